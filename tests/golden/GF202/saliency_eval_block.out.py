# golden: GF202.style=block
import torch as T
import torch.nn.functional as F


def evaluate(model, loader, criterion, saliency_every=10):
    model.eval()
    total_loss, maps = 0.0, []
    with T.no_grad():
        for step, (images, labels) in enumerate(loader):
            logits = model(images)
            total_loss += criterion(logits, labels).item()
            if step % saliency_every:
                continue
            with T.enable_grad():   # saliency needs d(score)/d(input)
                images = images.clone().requires_grad_(True)
                score = F.log_softmax(model(images), dim=1).gather(1, labels[:, None]).sum()
                grad, = T.autograd.grad(score, images)
                saliency = grad.abs().amax(dim=1)
            maps.append(saliency.cpu())
    return total_loss / len(loader), maps
