"""PyTorch 0.3 helpers that test for `Variable`: dead branches since 0.4, and an isinstance alias."""
import numpy as np
import torch


def repackage_hidden(h):
    """Wraps hidden states in new Variables, to detach them from their history."""
    if isinstance(h, torch.Tensor):  # a single state
        return h.detach()
    else:
        return tuple(repackage_hidden(v) for v in h)


def to_numpy(x):
    # tensors and arrays alike
    if isinstance(x, (torch.Tensor, np.ndarray)):
        return x.cpu().numpy() if torch.is_tensor(x) else x
    return np.asarray(x)


def describe(x):
    if not isinstance(x, torch.Tensor):
        return "plain"
    return "variable"


class Variable2:
    # a look-alike class name: left alone
    pass


def is_plain(x):
    return type(x) != Variable2
