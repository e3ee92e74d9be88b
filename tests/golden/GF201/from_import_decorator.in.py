"""Offline feature export for the retrieval index."""
from torch import set_grad_enabled

from models import build_model


def export_features(model, loader):
    # Only used offline; grads are never needed here.
    set_grad_enabled(False)
    out = []
    for batch in loader:
        out.append(model(batch))  # keep order
    return out

