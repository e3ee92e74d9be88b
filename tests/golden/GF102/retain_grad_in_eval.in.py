"""Saliency for a report: the map is computed inside no_grad, so autograd has nothing to do.

GF102 is diagnostic only: the file is reported (twice) and left exactly as it is.
"""
import torch
import torch.nn.functional as F


def saliency_map(model, image, label):
    model.eval()
    with torch.no_grad():
        logits = model(image)
        loss = F.cross_entropy(logits, label)
    # Both raise RuntimeError: `logits` and `loss` have no grad_fn.
    logits.retain_grad()
    grads = torch.autograd.grad(loss, image)
    return grads[0].abs()
