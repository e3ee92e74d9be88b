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


# What the rule reports and writes: behaviour pinned by mutation testing (scripts/mutate.py).

from gradfix import Settings, check, fix  # noqa: E402

_SETTINGS = Settings(select=("GF404",), unsafe_fixes=True)
_HEAD = "import torch\nfrom torch.autograd import Variable\n"


@pytest.mark.parametrize(
    "before, after",
    [
        ("ok = isinstance(x, (Variable, torch.Tensor, np.ndarray))", "ok = isinstance(x, (torch.Tensor, np.ndarray))"),
        ("ok = isinstance(x, (torch.Tensor, Variable, int,))", "ok = isinstance(x, (torch.Tensor, int,))"),
        ("ok = isinstance(x, (Variable, torch.Tensor))", "ok = isinstance(x, torch.Tensor)"),
        ("ok = isinstance(x, (Variable, int))", "ok = isinstance(x, (torch.Tensor, int))"),
    ],
)
def test_variable_in_a_tuple_of_classes_gives_way_to_torch_tensor_once(before, after):
    (finding,) = check(_HEAD + before + "\n", settings=_SETTINGS)
    assert finding.fix_title == "Check for `torch.Tensor`" and finding.span.line == 3
    assert fix(_HEAD + before + "\n", settings=_SETTINGS) == "import torch\n" + after + "\n"


@pytest.mark.parametrize(
    "compare, title",
    [
        ("type(h) == Variable", "Write `isinstance(h, torch.Tensor)` (the branch runs again for tensors)"),
        ("type(h) is not Variable", "Write `not isinstance(h, torch.Tensor)` (the branch runs again for tensors)"),
    ],
)
def test_the_fix_title_of_a_type_comparison_is_the_isinstance_it_writes(compare, title):
    (finding,) = check(_HEAD + f"dead = {compare}\n", settings=_SETTINGS)
    assert (finding.span.line, finding.span.col, finding.fix_title) == (3, 7, title)


@pytest.mark.parametrize("code", ["ok = isinstance(*pair)", "def isinstance(a, b):\n    return True\nok = isinstance(x, Variable)",
                                  "from mylib import isinstance\nok = isinstance(x, Variable)"])
def test_calls_that_are_not_the_builtin_isinstance_of_two_arguments_are_left_alone(code):
    assert check(_HEAD + code + "\n", settings=_SETTINGS) == []
