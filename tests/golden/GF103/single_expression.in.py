import torch as T
from torch import no_grad  # only used by the block below


def step(encoder, decoder, batch, criterion, opt):
    x, y = batch
    opt.zero_grad()
    with no_grad():
        out = decoder(encoder(x), temperature=0.5)
    loss = criterion(out, y)
    loss.backward()
    opt.step()
    return loss.item()
