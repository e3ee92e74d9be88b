# Two toggle pairs in one block, odd spacing and comments that must survive.
import torch
from torch import set_grad_enabled


@torch.enable_grad()
def _g1_with_grad(feats, net):
    feats.requires_grad_()
    norm = net.head(feats).norm()
    g1, = torch.autograd.grad(norm, feats)
    return g1


@torch.enable_grad()
def _out_with_grad(net, feats):
    out = net.head(feats)   # second probe
    return out


class Probe:
    def run(self, net, batch):
        with torch.no_grad():
            feats = net.backbone(batch)

            # first probe: gradient of the logit norm
            # done
            g1 = _g1_with_grad(feats, net)

            out = _out_with_grad(net, feats)
            return g1, out
