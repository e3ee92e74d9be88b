import torch as T
from torch import nn


def train(model: nn.Module, loader, opt, max_norm, scale):
    for x, y in loader:
        model(x).sum().backward()
        for p in model.parameters():
            if p.grad is None:
                continue
            p.grad.clamp_(-max_norm, max_norm)  # clip
            p.grad *= scale
        opt.step()
        for p in model.parameters():
            p.grad.zero_()


@T.no_grad()
def manual_step(params: list[nn.Parameter], lr):
    for p in params:
        p.add_(p.grad, alpha=-lr)
        p.grad.zero_()  # with the parameter update: one `no_grad` for both


def average_gradients(params, world_size):
    for param in params:
        param.grad.div_(float(world_size))
