"""Which module a call runs the forward of (gradfix/analysis/vocabulary.forward_callee), and how
module-mode state reads a switch inside such a call (gradfix/analysis/module_mode.py)."""

from __future__ import annotations

import ast

import pytest

from gradfix import Settings, check
from gradfix.analysis.module_mode import EVAL, TRAIN, forward_target, modes_at, mode_items, switch_of, trained_evidence
from gradfix.analysis.vocabulary import forward_callee, module_expression
from gradfix.facts import build_facts


def _expr(source: str) -> ast.expr:
    return ast.parse(source, mode="eval").body


@pytest.mark.parametrize(
    "source, module",
    [
        ("model(x)", "model"),
        ("self.encoder(x)", "self.encoder"),
        ("model.forward(x)", "model"),
        ("self.net.forward(x, mask=m)", "self.net"),
        ("lstm.to(device)(x)", "lstm"),
        ("model.cuda()(x)", "model"),
        ("model.float()(x)", "model"),
        ("model.cuda(0).half()(x)", "model"),
        ("model.eval()(x)", "model"),
        ("model.train(False)(x)", "model"),
        ("model.requires_grad_(False)(x)", "model"),
        ("model.to(dev).forward(x)", "model"),
        # Not a module-returning chain: another object is called.
        ("Net()(x)", None),
        ("nn.MSELoss()(out, y)", None),
        ("model.get_head()(x)", None),
        ("fns[0](x)", None),
        ("super().forward(x)", None),
        ("get_model().to(dev)(x)", None),
    ],
)
def test_forward_callee(source, module):
    assert forward_callee(_expr(source)) == module


def test_a_moved_tensor_is_no_module_unless_it_is_called():
    """`x.to(dev)` is the callee chain of nothing: the call itself is `x.to`, which every rule
    filters as a method, never as the module `x`."""
    assert forward_callee(_expr("x.to(dev)")) == "x.to"
    assert module_expression(_expr("x.to(dev)")) == "x"  # syntax only: what `x` is, is evidence's
    facts = build_facts("def f(x, dev):\n    return x.to(dev)\n")
    assert [forward_target(facts, c) for c in facts.calls] == [None]


def test_forward_target_needs_the_same_evidence_for_every_form():
    """A forward takes inputs, and an imported function is no module, however it is spelled."""
    facts = build_facts(
        "import torch\n"
        "def f(model, x):\n"
        "    model.forward()\n"
        "    torch.forward(x)\n"
        "    model.forward(x)\n"
        "    model.to('cpu')(x)\n"
    )
    got = [forward_target(facts, c) for c in sorted(facts.calls, key=lambda c: c.lineno) if c.lineno >= 3]
    assert [g for g in got if g is not None] == ["model", "model"]


def test_a_switch_through_a_module_returning_chain_switches_the_module():
    (call,) = build_facts("model.to(dev).eval()\n").calls[:1]
    switch = switch_of(call)
    assert switch is not None and (switch.receiver, switch.mode) == ("model", "eval")
    assert switch_of(build_facts("x.float().cpu()\n").calls[0]) is None


SHAPES = """\
def f(model, x, dev):
    a = model.eval()(x)
    b = model.train().to(dev)(x)
    c = validate(model, model(x))
"""


def _calls(facts, line):
    return sorted((c for c in facts.calls if c.lineno == line), key=lambda c: (c.col_offset, -c.end_col_offset))


def test_a_switch_in_the_callee_chain_runs_before_the_forward():
    facts = build_facts(SHAPES)
    func = facts.functions[0]
    items = mode_items(facts, func, {"model"})
    outer_a = next(c for c in _calls(facts, 2) if isinstance(c.func, ast.Call))
    assert modes_at(facts, func, outer_a, items) == {EVAL}
    outer_b = next(c for c in _calls(facts, 3) if forward_callee(c) == "model" and c.args)
    assert modes_at(facts, func, outer_b, items) == {TRAIN}


def test_a_call_that_holds_the_forward_runs_after_it():
    """`validate(model, model(x))`: an evaluation helper (it switches `model` to eval mode)
    runs after its arguments, so line 3's train mode still holds at `model(x)`."""
    facts = build_facts(SHAPES)
    func = facts.functions[0]
    items = mode_items(facts, func, {"model"})
    inner = next(c for c in facts.calls if c.lineno == 4 and isinstance(c.func, ast.Name) and c.func.id == "model")
    assert modes_at(facts, func, inner, items) == {TRAIN}


def test_training_forwards_through_chains_are_training_evidence():
    source = (
        "def fit(model, loader, opt, dev):\n"
        "    for x in loader:\n"
        "        model.to(dev)(x).sum().backward()\n"
        "        opt.step()\n"
        "    model.eval()\n"
    )
    assert list(trained_evidence(build_facts(source))) == ["model"]
    assert list(trained_evidence(build_facts(source.replace("model.to(dev)(x)", "model.forward(x)")))) == ["model"]


def test_gradflow_reads_a_call_of_a_moved_module_as_a_module_call():
    """GF103: the frozen stage run as `enc.to(dev)(x)` inside `no_grad` is what `enc(x)` is."""
    source = (
        "import torch\n"
        "def step(enc, dec, x, y, opt, dev):\n"
        "    with torch.no_grad():\n"
        "        h = enc.to(dev)(x)\n"
        "        out = dec.to(dev)(h)\n"
        "    loss = ((out - y) ** 2).mean()\n"
        "    loss.backward()\n"
        "    opt.step()\n"
    )
    plain = source.replace(".to(dev)(", "(")
    codes = lambda s: [(f.code, f.line) for f in check(s, settings=Settings(select=("GF102", "GF103")))]  # noqa: E731
    assert codes(source) == codes(plain) == [("GF103", 3)]
