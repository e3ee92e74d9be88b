"""The grad-mode data flow across functions (gradfix/analysis/gradflow.py), and how GF102/GF103
share it: the deferral of GF102 to GF103 follows the enabled set."""

from __future__ import annotations

import ast

from gradfix import Settings, check
from gradfix.analysis.gradflow import Param, analyses, flow
from gradfix.facts import build_facts

SPLIT = """\
import torch

def forward_pass(model, x):
    with torch.no_grad():
        h = model.encoder(x)
        out = model.decoder(h)
    return out

def backward_pass(loss, opt):
    loss.backward()
    opt.step()

def train(model, loader, crit, opt):
    for x, y in loader:
        out = forward_pass(model, x)
        backward_pass(crit(out, y), opt)
"""


def _function(facts, name):
    return next(f for f in facts.functions if f.name == name)


def test_summaries_say_what_a_function_returns_and_differentiates():
    facts = build_facts(SPLIT)
    the_flow = flow(facts)
    forward = the_flow.summary(_function(facts, "forward_pass"))
    region = next(r for r in facts.regions if r.kind == "with")
    assert forward.returns == frozenset({region.owner})  # grad-free because of its own block
    backward = the_flow.summary(_function(facts, "backward_pass"))
    assert [s.status for s in backward.differentiates] == [frozenset({Param("loss")})]


def test_a_backward_in_a_callee_is_a_site_of_the_caller():
    facts = build_facts(SPLIT)
    train = next(a for a in analyses(facts) if a.func is _function(facts, "train"))
    (site,) = [s for s in train.sites if s.status]
    assert isinstance(site.call.func, ast.Name) and site.call.func.id == "backward_pass"
    assert site.origin.call.lineno == 10  # loss.backward() inside backward_pass


def test_gf103_reports_the_block_in_the_helper_and_gf102_defers_to_it():
    findings = check(SPLIT, settings=Settings(select=("GF102", "GF103")))
    assert [(f.code, f.line) for f in findings] == [("GF103", 4)]


def test_with_gf103_ignored_gf102_reports_the_site():
    findings = check(SPLIT, settings=Settings(select=("GF102", "GF103"), ignore=("GF103",)))
    assert [(f.code, f.line) for f in findings] == [("GF102", 16)]
    assert "backward_pass()` differentiates it at line 10" in findings[0].message
    assert len(findings[0].message) <= 140


def test_same_function_shape_is_also_reported_by_gf102_once_gf103_is_ignored():
    source = (
        "import torch\ndef step(model, x, y, crit):\n    with torch.no_grad():\n        h = model.enc(x)\n"
        "        out = model.dec(h)\n    crit(out, y).backward()\n"
    )
    assert [f.code for f in check(source, settings=Settings(select=("GF102", "GF103")))] == ["GF103"]
    assert [f.code for f in check(source, settings=Settings(select=("GF102",)))] == ["GF102"]


def test_an_argument_that_may_carry_history_keeps_the_callee_silent():
    source = SPLIT.replace("out = forward_pass(model, x)", "out = model(x)")
    assert check(source, settings=Settings(select=("GF102", "GF103"))) == []


def test_recursion_does_not_loop():
    source = "import torch\ndef f(model, x, n):\n    if n:\n        return f(model, x, n - 1)\n    with torch.no_grad():\n        return model(x)\n\ndef g(model, x):\n    f(model, x, 3).backward()\n"
    codes = [f.code for f in check(source, settings=Settings(select=("GF102",)))]
    assert codes == []  # the recursive path is unknown: unknown wins


def test_accelerate_and_amp_backward_spellings_are_sites():
    source = (
        "import torch\ndef step(model, x, accelerator, scaler):\n    with torch.no_grad():\n        a = model(x).sum()\n"
        "        b = model(x).sum()\n    accelerator.backward(a)\n    scaler.scale(b).backward()\n"
    )
    lines = [f.line for f in check(source, settings=Settings(select=("GF102",)))]
    assert lines == [6, 7]


NOGRAD_WRAPPER = """\
import torch as t
from functools import wraps


def nograd(f):
    @wraps(f)
    def new_f(*args, **kwargs):
        with t.no_grad():
            return f(*args, **kwargs)
    return new_f


class Detector:
    @nograd
    def predict(self, imgs):
        self.eval()
        return self(imgs)

    def fine_tune(self, imgs):
        self.predict(imgs).sum().backward()
"""


def test_a_file_local_no_grad_decorator_is_a_grad_disabled_region():
    """precision-fp.md (chenyuntc/simple-faster-rcnn-pytorch): `@nograd`, a wrapper defined in the
    same file whose body runs the function under `with t.no_grad()`, disables grad like
    `@torch.no_grad()`, for every rule that asks where the regions are."""
    facts = build_facts(NOGRAD_WRAPPER)
    predict = next(f for f in facts.functions if f.name == "predict")
    (region,) = [r for r in facts.regions if r.owner is predict]
    assert region.kind == "decorator" and region.mode == "disabled" and region.api is None
    forward = next(c for c in facts.calls_in(predict) if isinstance(c.func, ast.Name) and c.func.id == "self")
    assert facts.grad_mode_at(forward) == "disabled"
    findings = check(NOGRAD_WRAPPER, settings=Settings(select=("GF102",)))
    assert [(f.code, f.line) for f in findings] == [("GF102", 20)]
    plain = NOGRAD_WRAPPER.replace("        with t.no_grad():\n            return f", "        return f")
    assert [r for r in build_facts(plain).regions] == []


def test_a_conditional_backward_in_a_helper_is_no_fact_about_every_call():
    """The Annotated Transformer's loss helper backpropagates only when given an optimizer;
    validation calls it under no_grad without one."""
    source = (
        "import torch\ndef loss_compute(out, y, crit, opt=None):\n    loss = crit(out, y)\n    if opt is not None:\n"
        "        loss.backward()\n        opt.step()\n    return loss.item()\n\n"
        "def validate(model, loader, crit):\n    total = 0.0\n    for x, y in loader:\n        with torch.no_grad():\n"
        "            out = model(x)\n        total += loss_compute(out, y, crit)\n    return total\n"
    )
    assert check(source, settings=Settings(select=("GF102", "GF103"))) == []
    unconditional = source.replace("    if opt is not None:\n        loss.backward()\n        opt.step()\n", "    loss.backward()\n")
    assert [f.code for f in check(unconditional, settings=Settings(select=("GF102", "GF103")))] == ["GF103"]
