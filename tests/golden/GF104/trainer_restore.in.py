# golden: GF104.style=restore
"""A small trainer class: validation must not leave the model in eval mode for the caller."""
import torch
from torch import nn


class Trainer:
    def __init__(self, model: nn.Module, lr=1e-3):
        self.model = model
        self.opt = torch.optim.Adam(self.model.parameters(), lr=lr)
        self.crit = nn.CrossEntropyLoss()

    def fit_batch(self, x, y):
        self.model.train()
        self.opt.zero_grad()
        loss = self.crit(self.model(x), y)
        loss.backward()
        self.opt.step()
        return loss.item()

    def validate(self, loader):
        total, n = 0.0, 0
        with torch.autograd.grad_mode.no_grad():
            for x, y in loader:
                logits = self.model(x)
                total += self.crit(logits, y).item() * len(y)
                n += len(y)
        return total / n

    @torch.inference_mode()
    def embed(self, x):
        feats = self.model.backbone(x)  # penultimate features
        if feats.dim() > 2:
            return feats.flatten(1)
        return feats

    def score(self, loader):
        # the loss function is not a module whose mode matters: stays silent
        with torch.no_grad():
            return sum(self.crit(x, y).item() for x, y in loader)
