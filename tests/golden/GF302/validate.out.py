import torch
import torch.nn.functional as F


def train_one_epoch(model, loader, optimizer):
    model.train()
    for x, y in loader:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()


@torch.no_grad()
def validate(model, loader):
    model.eval()
    correct, total = 0, 0
    for x, y in loader:
        logits = model(x)  # graph recorded for nothing
        correct += (logits.argmax(1) == y).sum().item()
        total += y.numel()
    return correct / total


@torch.no_grad()
def evaluate_with_tta(model, x):
    """Average over a horizontal flip."""
    model.eval()
    # two passes
    a = model(x)
    b = model(x.flip(-1)).flip(-1)
    return (a + b) / 2


def evaluate_ok(model, x):
    model.eval()
    with torch.no_grad():
        return model(x)


def saliency_map(model, x, target):
    model.eval()
    x = x.clone().requires_grad_(True)
    model(x)[0, target].backward()
    return x.grad.abs()


def fgsm(model, x, y, eps):
    model.eval()
    x = x.clone().detach().requires_grad_(True)
    grad, = torch.autograd.grad(F.cross_entropy(model(x), y), x)
    return (x + eps * grad.sign()).detach()


def fit(model, loader, optimizer, epochs):
    for _ in range(epochs):
        train_one_epoch(model, loader, optimizer)
        print(validate(model, loader))
