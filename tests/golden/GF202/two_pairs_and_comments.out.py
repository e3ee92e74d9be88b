# Two toggle pairs in one block, odd spacing and comments that must survive.
import torch
from torch import set_grad_enabled


class Probe:
    def run(self, net, batch):
        with torch.no_grad():
            feats = net.backbone(batch)

            # first probe: gradient of the logit norm
            @torch.enable_grad()
            def _with_grad(feats, net):
                feats.requires_grad_()
                norm = net.head(feats).norm()
                g1, = torch.autograd.grad(norm, feats)
                return g1
            # done
            g1 = _with_grad(feats, net)

            @torch.enable_grad()
            def _with_grad_2(net, feats):
                out = net.head(feats)   # second probe
                return out
            out = _with_grad_2(net, feats)
            return g1, out
