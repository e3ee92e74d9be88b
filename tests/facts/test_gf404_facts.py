"""Torch facts GF404 (variable-type-check) relies on, checked on real torch (CPU)."""

from __future__ import annotations

import pytest
import torch
from torch.autograd import Variable


def _tensors():
    leaf = torch.randn(3, requires_grad=True)
    return [torch.zeros(2), leaf, leaf * 2, torch.nn.Parameter(torch.ones(2)), Variable(torch.ones(2))]


@pytest.mark.parametrize("t", _tensors(), ids=["fresh", "leaf", "graph", "parameter", "variable"])
def test_type_is_never_variable_so_the_branch_is_dead(t):
    assert (type(t) == Variable) is False
    assert (type(t) is Variable) is False
    assert (type(t) != Variable) is True


@pytest.mark.parametrize("t", _tensors(), ids=["fresh", "leaf", "graph", "parameter", "variable"])
def test_isinstance_variable_means_isinstance_tensor(t):
    assert isinstance(t, Variable) is True is isinstance(t, torch.Tensor)
    assert isinstance(t, (Variable, dict)) is isinstance(t, (torch.Tensor, dict))


@pytest.mark.parametrize("value", [3, 2.5, "x", None, [torch.ones(1)], {"a": torch.ones(1)}])
def test_isinstance_variable_is_false_for_non_tensors(value):
    assert isinstance(value, Variable) is False is isinstance(value, torch.Tensor)


def test_the_rewrite_makes_the_dead_branch_run_for_tensors():
    # `type(x) == Variable` -> `isinstance(x, torch.Tensor)`: True for tensors, False otherwise.
    for t in _tensors():
        assert (type(t) == Variable) != isinstance(t, torch.Tensor)
    assert isinstance(3, torch.Tensor) is (type(3) == Variable) is False
