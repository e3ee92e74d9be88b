# Two toggle pairs in one block, odd spacing and comments that must survive.
import torch
from torch import set_grad_enabled


class Probe:
    def run(self, net, batch):
        with torch.no_grad():
            feats = net.backbone(batch)

            # first probe: gradient of the logit norm
            set_grad_enabled(True)
            feats.requires_grad_()
            norm = net.head(feats).norm()
            g1, = torch.autograd.grad(norm, feats)
            # done
            set_grad_enabled(False)

            torch.set_grad_enabled( True )
            out = net.head(feats)   # second probe
            torch.set_grad_enabled(mode=False)
            return g1, out
