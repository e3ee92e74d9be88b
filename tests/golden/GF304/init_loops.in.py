"""Weight init and parameter copies written through `.data`, the 2018 way."""
import math

import torch
import torch.nn as nn


def init_weights(model):
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            n = m.kernel_size[0] * m.kernel_size[1] * m.out_channels
            m.weight.data.normal_(0, math.sqrt(2.0 / n))
        elif isinstance(m, nn.BatchNorm2d):
            m.weight.data.fill_(1)
            m.bias.data.zero_()

        # Linear layers keep PyTorch's default init


def copy_params(src, dst, log):
    for p in dst.parameters():
        p.data.zero_()
    for p, q in zip(src.parameters(), dst.parameters()):
        p.data.copy_(q.data)
    log.info("copied")


def train(model, loader, opt, clip):
    for x, y in loader:
        loss = model(x).sub(y).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        for p in model.parameters():
            p.data.clamp_(-clip, clip)
