# Saliency maps, 2019 style: the scores come from a helper decorated for inference, and the
# gradient is taken in another function. The helper's @torch.no_grad() strips the graph, so
# torch.autograd.grad raises RuntimeError; GF102 names both functions' lines.
import torch


@torch.no_grad()
def class_scores(model, images):
    logits = model(images)
    return logits.max(dim=1).values


def saliency(model, images):
    images = images.clone().requires_grad_(True)
    scores = class_scores(model, images)
    (grads,) = torch.autograd.grad(scores.sum(), images)
    return grads.abs().amax(dim=1)
