"""A 2018 char-RNN and GAN sampler: names bound to fresh tensors, loader batches, hidden state."""
import torch
import torch.nn as nn


class CharRNN(nn.Module):
    def init_hidden(self, bsz):
        hidden = torch.zeros(self.n_layers, bsz, self.hidden_size)
        if self.use_cuda:
            hidden = hidden.cuda()  # keep it on the GPU
        return hidden


def sample(netG, n, nz):
    noise = torch.randn(n, nz, 1, 1)
    noisev = noise  # the generator's input
    return netG(noisev)


def train(model, train_loader, criterion, opt):
    hidden = model.init_hidden(32)
    for batch in train_loader:
        inputs, targets = batch
        inputs = inputs.cuda()
        hidden = hidden.detach()
        output, hidden = model(inputs, hidden)
        loss = criterion(output, targets)
        loss.backward()
        opt.step()


def warm_start(encoder, x, warm):
    h = torch.zeros(x.size(0), 16)
    if warm:
        h = encoder(x)  # a graph may hang on h now
    return h.detach()
