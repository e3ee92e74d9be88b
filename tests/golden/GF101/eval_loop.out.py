import torch
import torch.nn as nn


def evaluate(model: nn.Module, loader) -> float:
    model.eval()
    correct = 0
    with torch.no_grad():  # no graph needed for evaluation
        for x, y in loader:
            correct += (model(x).argmax(1) == y).sum().item()
    return correct / len(loader.dataset)
