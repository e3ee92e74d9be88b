"""GF104 false positives of the round-5 precision sample (bench/precision/verdicts5.tsv, sample 3).

Every GF104 finding of that sample was false. One fixture per shape, written for these tests
(the shapes seen in real code, not copied from it); each also checks that the true finding
next to it stays.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from gradfix import Settings, check

MODES = Settings(select=("GF104", "GF105"))


def _found(source, settings=MODES):
    return [(f.code, f.line) for f in check(source, settings=settings)]


# A notebook's own container class (no nn.Module base), with layers whose flag is set by hand:
# no `.eval()` exists on it (the fix would raise AttributeError).
PLAIN_CONTAINER = """\
import torch


class Jitter:
    def __init__(self):
        self.training = True
        self.w = torch.ones(3, requires_grad=True)

    def __call__(self, x):
        return x * self.w + (torch.rand_like(x) if self.training else 0)

    def parameters(self):
        return [self.w]


class Stack:
    def __init__(self, layers):
        self.layers = layers

    def __call__(self, x):
        for layer in self.layers:
            x = layer(x)
        return x

    def parameters(self):
        return [p for layer in self.layers for p in layer.parameters()]


model = Stack([Jitter(), Jitter()])
params = model.parameters()
batch = torch.rand(5, 3)
model(batch).square().mean().backward()
for layer in model.layers:
    layer.training = False


@torch.no_grad()
def report():
    print(model(batch).square().mean().item())


report()
"""


def test_a_plain_container_class_is_no_module():
    assert _found(PLAIN_CONTAINER) == []


def test_the_same_container_deriving_from_nn_module_is_still_reported():
    source = PLAIN_CONTAINER.replace("class Stack:", "class Stack(torch.nn.Module):").replace(
        "for layer in model.layers:\n    layer.training = False\n", ""
    )
    assert _found(source) == [("GF104", 37)]


def test_the_same_container_as_a_notebook(tmp_path):
    cells = PLAIN_CONTAINER.split("\n\n\n")
    notebook = {
        "cells": [{"cell_type": "code", "metadata": {}, "source": c.splitlines(True), "outputs": [], "execution_count": None} for c in cells],
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    (tmp_path / "nb.ipynb").write_text(json.dumps(notebook))
    run = subprocess.run(
        [sys.executable, "-m", "gradfix", "check", "--format", "json", "--no-cache", "--select", "GF104,GF105", "nb.ipynb"],
        cwd=tmp_path, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert json.loads(run.stdout) == [], run.stderr
    assert notebook["cells"][2]["source"][0] == "class Stack:\n"
    notebook["cells"][2]["source"][0] = "class Stack(torch.nn.Module):\n"
    notebook["cells"][3]["source"] = notebook["cells"][3]["source"][:-2]  # no hand-set flags
    (tmp_path / "nb.ipynb").write_text(json.dumps(notebook))
    run = subprocess.run(
        [sys.executable, "-m", "gradfix", "check", "--format", "json", "--no-cache", "--select", "GF104,GF105", "nb.ipynb"],
        cwd=tmp_path, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert [f["code"] for f in json.loads(run.stdout)] == ["GF104"], run.stderr


# Two tests build their own model from a hub loader; one copies it and trains both copies.
HUB_TESTS = """\
import copy
import torch
from transformers import AutoModelForSequenceClassification as Auto


def test_same_logits():
    base = Auto.from_pretrained("tiny")
    twin = copy.deepcopy(base)
    with torch.no_grad():
        a = base(torch.ones(1, 3, dtype=torch.long)).logits
        b = twin(torch.ones(1, 3, dtype=torch.long)).logits
    assert torch.equal(a, b)


def test_same_grads():
    base = Auto.from_pretrained("tiny")
    twin = copy.deepcopy(base)
    base(torch.ones(1, 3, dtype=torch.long)).logits.sum().backward()
    twin(torch.ones(1, 3, dtype=torch.long)).logits.sum().backward()
    for p, q in zip(base.parameters(), twin.parameters()):
        assert torch.equal(p.grad, q.grad)
"""


def test_from_pretrained_and_its_deepcopy_are_in_eval_mode():
    assert _found(HUB_TESTS) == []


def test_a_hub_model_switched_to_train_mode_is_reported():
    source = HUB_TESTS.replace('    twin = copy.deepcopy(base)\n    with', '    base.train()\n    twin = copy.deepcopy(base)\n    with', 1)
    assert _found(source) == []  # the function chose train mode itself (`.train()` here): its call
    source = HUB_TESTS.replace('base = Auto.from_pretrained("tiny")\n    twin', 'base = Auto.from_pretrained("tiny").train()\n    twin', 1)
    assert _found(source) == [("GF104", 10)]


def test_models_returned_by_a_setup_method_are_unknown_and_untrained_here():
    source = """\
import copy
import torch
from transformers import AutoModel


class TestChunked:
    def _setup(self):
        ref = AutoModel.from_pretrained("tiny")
        return ref, copy.deepcopy(ref)

    def test_forward(self):
        ref, chunked = self._setup()
        with torch.no_grad():
            assert torch.equal(ref(torch.ones(1, 2)), chunked(torch.ones(1, 2)))

    def test_backward(self):
        ref = AutoModel.from_pretrained("tiny")
        ref.train()
        ref(torch.ones(1, 2)).sum().backward()
        assert all(p.grad is not None for p in ref.parameters())
"""
    assert _found(source) == []


# A test file whose helper returns an eval-mode tower; one test trains its own copy.
HELPER_TESTS = """\
import torch
from torch import nn


class Tower(nn.Module):
    def __init__(self, depth):
        super().__init__()
        self.body = nn.Sequential(*[nn.Linear(4, 4) for _ in range(depth)], nn.Dropout(0.1))

    def forward(self, x):
        return self.body(x)


def make_tower(depth=2):
    return Tower(depth).eval()


def test_deterministic():
    m = make_tower(depth=3)
    with torch.no_grad():
        assert torch.equal(m(torch.ones(2, 4)), m(torch.ones(2, 4)))


def test_grads():
    m = make_tower().train()
    m(torch.ones(2, 4)).sum().backward()
    assert all(p.grad is not None for p in m.parameters())
"""


def test_a_helper_returning_an_eval_mode_module_gives_eval_mode():
    assert _found(HELPER_TESTS) == []


@pytest.mark.parametrize("helper", ["    return Tower(depth)\n", "    t = Tower(depth)\n    t.train()\n    return t\n"])
def test_a_helper_returning_a_train_mode_module_is_reported(helper):
    source = HELPER_TESTS.replace("    return Tower(depth).eval()\n", helper)
    # with the random weights of its constructor the module is probed, not evaluated (round 6)
    assert _found(source) == []
    loaded = "    m = make_tower(depth=3)\n    m.load_state_dict(torch.load('tower.pt'))\n"
    source = source.replace("    m = make_tower(depth=3)\n", loaded)
    assert [c for c, _ in _found(source)] == ["GF104"]


# An evaluation helper that accepts a module or a plain function (a scratch model).
EITHER = """\
import torch


def accuracy(batches, net):
    hits = 0
    with torch.no_grad():
        for x, y in batches:
            if isinstance(net, torch.nn.Module):
                net.eval()
                hits += (net(x).argmax(1) == y).sum().item()
                net.train()
            else:
                hits += (net(x, is_training=False).argmax(1) == y).sum().item()
    return hits


def fit(net, loader, opt):
    for x, y in loader:
        torch.nn.functional.cross_entropy(net(x), y).backward()
        opt.step()
"""


def test_the_else_of_isinstance_module_is_no_module():
    assert _found(EITHER) == []


def test_without_the_isinstance_test_the_call_is_reported():
    source = EITHER.replace("if isinstance(net, torch.nn.Module):", "if use_module:")
    assert [c for c, _ in _found(source)] == ["GF104"]
