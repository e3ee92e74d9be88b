import torch as T
# only used by the block below


def step(encoder, decoder, batch, criterion, opt):
    x, y = batch
    opt.zero_grad()
    out = decoder(encoder(x).detach(), temperature=0.5)
    loss = criterion(out, y)
    loss.backward()
    opt.step()
    return loss.item()
