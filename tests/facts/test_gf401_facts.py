"""Torch facts GF401 (variable-volatile) relies on, checked on real torch (CPU)."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch.autograd import Variable


def _record(fn):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = fn()
    return result, [str(w.message) for w in caught if "volatile" in str(w.message)]


def test_volatile_true_only_warns_and_equals_variable():
    x = torch.randn(2, 3, requires_grad=True) * 1.0
    v, messages = _record(lambda: Variable(x, volatile=True))
    assert messages and "volatile was removed" in messages[0]
    d = x.detach()
    assert v.requires_grad is d.requires_grad is False
    assert v.grad_fn is None and v.data_ptr() == d.data_ptr()


def test_volatile_no_longer_stops_graph_recording():
    # What `volatile` used to mean (no graph downstream) is gone: a forward pass records one.
    layer = torch.nn.Linear(3, 2)
    v, _ = _record(lambda: Variable(torch.randn(4, 3), volatile=True))
    assert layer(v).grad_fn is not None
    with torch.no_grad():
        assert layer(v).grad_fn is None


def test_volatile_false_is_silent():
    v, messages = _record(lambda: Variable(torch.randn(3), volatile=False))
    assert messages == [] and v.requires_grad is False


def test_volatile_and_requires_grad_both_true_raise():
    with pytest.raises(ValueError, match="volatile and require_grad"):
        _record(lambda: Variable(torch.randn(3), requires_grad=True, volatile=True))


def test_volatile_false_with_requires_grad_true_is_a_leaf():
    v, messages = _record(lambda: Variable(torch.randn(3), volatile=False, requires_grad=True))
    assert messages == [] and v.requires_grad and v.is_leaf


def test_volatile_none_raises_type_error():
    with pytest.raises(TypeError):
        Variable(torch.randn(3), volatile=None)


def test_third_positional_argument_is_volatile():
    _, messages = _record(lambda: Variable(torch.randn(3), False, True))
    assert messages


def test_volatile_attribute_is_always_false_so_propagating_it_needs_no_hint():
    # `Variable(z, volatile=x.volatile)` (2018 a2c code): `x.volatile` reads False (with a
    # warning) whatever the grad mode, so the message suggests no `set_grad_enabled` wrapper.
    x = torch.ones(2, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.no_grad():
            assert x.volatile is False and (x * 2).volatile is False
        assert x.volatile is False


# What the rule tells the user: behaviour pinned by mutation testing (scripts/mutate.py).

from gradfix import Settings, check  # noqa: E402


@pytest.mark.parametrize(
    "volatile, title",
    [
        ("True", "Write `x.detach()`; to record no graph, wrap the forward pass in `with torch.no_grad():`"),
        ("evaluation", "Write `x.detach()`; to record no graph, wrap the forward pass in `with torch.set_grad_enabled(not evaluation):`"),
        ("a or b", "Write `x.detach()`; to record no graph, wrap the forward pass in `with torch.set_grad_enabled(not (a or b)):`"),
        ("x.volatile", "Write `x.detach()`; grad mode propagates by itself: nothing to wrap"),
        ("False", "Write `x.detach()`"),
    ],
)
def test_the_fix_title_says_what_volatile_meant(volatile, title):
    code = f"from torch.autograd import Variable\nv = Variable(x, volatile={volatile})\n"
    (finding,) = check(code, settings=Settings(select=("GF401",)))
    assert finding.fix_title == title
    assert (finding.span.line, finding.span.col) == (2, 4)
