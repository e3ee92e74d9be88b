"""Classifier with a training loop and inference helpers."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Classifier(nn.Module):
    def __init__(self, dim, classes):
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(dim, 128), nn.ReLU())
        self.head = nn.Linear(128, classes)

    @torch.no_grad()  # frozen backbone: must stay a normal tensor for the head's backward
    def forward(self, x):
        return self.head(self.backbone(x))

    @torch.inference_mode()
    def predict_proba(self, x):
        """Class probabilities, for the demo page."""
        return F.softmax(self(x), dim=-1)


@torch.no_grad()
def teacher_targets(teacher, x):
    return F.softmax(teacher(x) / 4.0, dim=-1)


def distill(student, teacher, loader, optimizer):
    for x, _ in loader:
        optimizer.zero_grad()
        loss = F.kl_div(F.log_softmax(student(x), -1), teacher_targets(teacher, x), reduction="batchmean")
        loss.backward()
        optimizer.step()


@torch.inference_mode()
def predict(model, loader):
    model.eval()
    preds = []
    for x, _ in loader:
        preds.append(model(x).argmax(dim=1))
    return torch.cat(preds)


@torch.no_grad()
def update_ema(ema, model, decay=0.999):
    for e, p in zip(ema.parameters(), model.parameters()):
        e.mul_(decay).add_(p, alpha=1 - decay)
