# GF205 with `from torch import set_grad_enabled` and no torch module import

from data import loader
import torch


def embed(model):
    with torch.no_grad():
        return [model(batch) for batch in loader]
