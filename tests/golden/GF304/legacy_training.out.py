import torch
import torch.nn as nn


@torch.no_grad()
def weights_init(m):
    classname = m.__class__.__name__
    if classname.find("Conv") != -1:
        m.weight.normal_(0.0, 0.02)
    elif classname.find("BatchNorm") != -1:
        m.weight.normal_(1.0, 0.02)
        # beta starts at zero
        m.bias.fill_(0)


@torch.no_grad()
def sgd_step(model, lr):
    for p in model.parameters():
        if p.grad is None:
            continue
        p.add_(-lr, p.grad)  # deprecated signature, kept as is
        p.grad.zero_()


def clip_critic(critic, c=0.01):
    for p in critic.parameters():
        p.data.clamp_(-c, c)  # gradfix: ignore[GF304]


@torch.no_grad()
def soft_update(target, source, tau):
    for target_param, param in zip(target.parameters(), source.parameters()):
        target_param.copy_(target_param * (1.0 - tau) + param * tau)


def prune_columns(layer, keep):
    layer.weight.data = layer.weight.data[:, keep]  # shape change: not a GF304 write


def report(loss, x):
    print(loss.data[0], x.data.cpu())


class Buffer:
    def reset(self):
        self.data.zero_()  # an ordinary attribute named `data`


class SGD(torch.optim.Optimizer):
    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            for p in group["params"]:
                p -= group["lr"] * p.grad
