"""Offline feature export for the retrieval index."""

from models import build_model
import torch


@torch.no_grad()
def export_features(model, loader):
    # Only used offline; grads are never needed here.
    out = []
    for batch in loader:
        out.append(model(batch))  # keep order
    return out

