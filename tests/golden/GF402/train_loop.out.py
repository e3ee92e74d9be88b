"""A 2017-style training script: every tensor wrapped in Variable."""
import torch
import torch.nn as nn
from torch.autograd import grad


def train_epoch(model, loader, optimizer, use_cuda=False):
    model.train()
    criterion = nn.CrossEntropyLoss()
    for batch_idx, (data, target) in enumerate(loader):
        if use_cuda:
            data = data.float().cuda()
        optimizer.zero_grad()
        loss = criterion(model(data), target)
        loss.backward()
        optimizer.step()


def gradient_penalty(critic, real, fake, train_alpha=False):
    alpha = torch.rand(real.size(0), 1, requires_grad=train_alpha)
    mixed = (alpha * real + (1 - alpha) * fake).detach().requires_grad_()
    scores = critic(mixed)
    g = grad(scores.sum(), mixed, create_graph=True)[0]
    return ((g.norm(2, dim=1) - 1) ** 2).mean()


def init_hidden(weight, layers, bsz, hidden):
    return (weight.new(layers, bsz, hidden).zero_(),
            weight.new(layers, bsz, hidden).zero_())
