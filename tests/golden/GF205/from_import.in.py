# GF205 with `from torch import set_grad_enabled` and no torch module import
from torch import set_grad_enabled

from data import loader


def embed(model):
    with set_grad_enabled(False):
        return [model(batch) for batch in loader]
