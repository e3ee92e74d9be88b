# Legacy evaluation loop that needs input gradients (saliency maps) for a few batches.
import torch as T
import torch.nn.functional as F


@T.enable_grad()   # saliency needs d(score)/d(input)
def _saliency_with_grad(images, model, labels):
    images = images.clone().requires_grad_(True)
    score = F.log_softmax(model(images), dim=1).gather(1, labels[:, None]).sum()
    grad, = T.autograd.grad(score, images)
    saliency = grad.abs().amax(dim=1)
    return images, saliency


def evaluate(model, loader, criterion, saliency_every=10):
    model.eval()
    total_loss, maps = 0.0, []
    with T.no_grad():
        for step, (images, labels) in enumerate(loader):
            logits = model(images)
            total_loss += criterion(logits, labels).item()
            if step % saliency_every:
                continue
            images, saliency = _saliency_with_grad(images, model, labels)
            maps.append(saliency.cpu())
    return total_loss / len(loader), maps
