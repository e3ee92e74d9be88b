"""Old research code: some toggles are fixable, the rest are only reported."""
import torch

torch.set_grad_enabled(False)  # module level: reported, never rewritten


def run(model, batch, train):
    if train:
        torch.set_grad_enabled(True)
    else:
        torch.set_grad_enabled(False)
    return model(batch)


def stream(model, loader):
    torch.set_grad_enabled(False)
    for batch in loader:
        yield model(batch)


def safe_eval(model, batch):
    previous = torch.is_grad_enabled()
    torch.set_grad_enabled(False)
    try:
        return model(batch)
    finally:
        torch.set_grad_enabled(previous)


def score(model, batch, labels):
    model.eval()
    torch.set_grad_enabled(False)  # gradfix: ignore[GF201]
    return (model(batch).argmax(1) == labels).float().mean()


def validate(model, loader):
    model.eval()
    total = 0
    with torch.no_grad():
        for batch, labels in loader:
            total += (model(batch).argmax(1) == labels).sum().item()
        return total


if __name__ == "__main__":
    torch.set_grad_enabled(False)
    validate(None, [])
