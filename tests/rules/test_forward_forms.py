"""Every rule that asks "does this call run module M's forward?" reads `m.forward(x)` and
`m.to(dev)(x)` as it reads `m(x)`: same findings, same evidence (vocabulary.forward_callee)."""

from __future__ import annotations

import pytest

from gradfix import Settings, check, fix

FORMS = ["model(x)", "model.forward(x)", "model.to(dev)(x)", "model.cuda().float()(x)"]

TRAIN_AND_TEST = """\
import torch as T
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        return self.drop(self.fc(x))


def train(model, loader, opt, dev):
    model.train()
    for x, y in loader:
        opt.zero_grad()
        T.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()


def test(model, loader, dev):
    with T.no_grad():
        return sum((FORWARD.argmax(1) == y).sum().item() for x, y in loader)
"""


def _found(source, codes):
    return [(f.code, f.line) for f in check(source, settings=Settings(select=codes))]


@pytest.mark.parametrize("form", FORMS)
def test_gf104_reports_an_evaluation_however_the_forward_is_spelled(form):
    assert _found(TRAIN_AND_TEST.replace("FORWARD", form), ("GF104",)) == [("GF104", 25)]


@pytest.mark.parametrize("form", FORMS)
def test_gf104_needs_the_same_evidence_for_every_form(form):
    """Nothing in the file trains `model` (no `.train()`, no training scope calls it): no
    evidence that it is in train mode, whatever the spelling."""
    untrained = TRAIN_AND_TEST.replace("    model.train()\n", "").replace("model(x), y)", "other(x), y)")
    assert _found(untrained.replace("FORWARD", form), ("GF104",)) == []


@pytest.mark.parametrize("form", FORMS)
def test_gf104_sees_the_training_forward_however_it_is_spelled(form):
    """The training scope's forward is the evidence that `model` trains (no `.train()` here;
    `model.parameters()` says it is a module): spelled as a chain or `.forward`, it still is."""
    source = TRAIN_AND_TEST.replace("    model.train()\n", "    print(sum(p.numel() for p in model.parameters()))\n")
    source = source.replace("model(x), y)", f"{form}, y)")
    assert _found(source.replace("FORWARD", "model(x)"), ("GF104",)) == [("GF104", 25)]


FIT = """\
import torch


def fit(model, loader, opt, dev):
    for epoch in range(3):
        for x, y in loader:
            opt.zero_grad()
            torch.nn.functional.mse_loss(FORWARD, y).backward()
            opt.step()
        model.eval()
        print(epoch)
"""


@pytest.mark.parametrize("form", FORMS)
def test_gf105_reports_training_in_eval_mode_however_the_forward_is_spelled(form):
    assert _found(FIT.replace("FORWARD", form), ("GF105",)) == [("GF105", 8)]


def test_gf105_inserts_train_in_the_epoch_loop_for_a_chain_forward():
    fixed = fix(FIT.replace("FORWARD", "model.to(dev)(x)"), settings=Settings(select=("GF105",), unsafe_fixes=True))
    assert "    for epoch in range(3):\n        model.train()\n        for x, y in loader:\n" in fixed


def test_gf302_fix_for_a_forward_method_call_in_a_loop_with_work_after_it():
    source = (
        "import torch\n"
        "def embed(model, batches, out):\n"
        "    model.eval()\n"
        "    feats = []\n"
        "    for x in batches:\n"
        "        feats.append(model.forward(x))  # raw features\n"
        "    out.write(str(len(feats)))\n"
        "    return feats\n"
    )
    fixed = fix(source, settings=Settings(select=("GF302",), unsafe_fixes=True))
    assert fixed == source.replace(
        "    for x in batches:\n        feats.append(model.forward(x))  # raw features\n",
        "    with torch.no_grad():\n        for x in batches:\n            feats.append(model.forward(x))  # raw features\n",
    )


def test_gf302_is_silent_on_a_forward_of_a_module_that_was_not_switched():
    source = "def f(model, head, x, dev):\n    model.eval()\n    return head.forward(x) + head.to(dev)(x)\n"
    assert _found(source, ("GF302",)) == []


def test_gf302_crlf_and_a_comment_in_the_chain():
    source = "import torch\r\ndef f(model, x, dev):\r\n    model.eval()\r\n    return model.to(  # move\r\n        dev)(x)\r\n"
    fixed = fix(source, settings=Settings(select=("GF302",), unsafe_fixes=True))
    assert fixed == "import torch\r\n@torch.no_grad()\r\n" + source.split("\r\n", 1)[1]
