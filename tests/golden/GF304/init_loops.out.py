"""Weight init and parameter copies written through `.data`, the 2018 way."""
import math

import torch
import torch.nn as nn


@torch.no_grad()
def init_weights(model):
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            n = m.kernel_size[0] * m.kernel_size[1] * m.out_channels
            m.weight.normal_(0, math.sqrt(2.0 / n))
        elif isinstance(m, nn.BatchNorm2d):
            m.weight.fill_(1)
            m.bias.zero_()

        # Linear layers keep PyTorch's default init


@torch.no_grad()
def copy_params(src, dst, log):
    for p in dst.parameters():
        p.zero_()
    for p, q in zip(src.parameters(), dst.parameters()):
        p.copy_(q)
    log.info("copied")


def train(model, loader, opt, clip):
    for x, y in loader:
        loss = model(x).sub(y).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        with torch.no_grad():
            for p in model.parameters():
                p.clamp_(-clip, clip)
