# Style check on a team codebase that used set_grad_enabled everywhere
import torch as T
import torch.nn as nn


@T.no_grad()
def predict(model: nn.Module, images):
    return model(images).softmax(-1)


def evaluate(model, loader, criterion):
    model.eval()
    total = 0.0
    with T.no_grad():  # no graphs during validation
        for images, labels in loader:
            total += criterion(model(images), labels).item()
    return total / len(loader)


def forward_pass(model, inputs, compute_grad=False):
    """Article §4.3: the mode is a run-time value, so set_grad_enabled is the right tool."""
    with T.set_grad_enabled(compute_grad):
        return model(inputs)


def adapt(model, support, steps):
    with T.no_grad():
        model.eval()
        with T.enable_grad():
            for _ in range(steps):
                model.inner_step(support)
