"""Wrong findings of the round-11 sample (bench/precision/verdicts11.tsv), one fixture per
shape, written for these tests: the facts each one showed to be wrong."""

from __future__ import annotations

import ast

from gradfix import Settings, check

MODE = Settings(select=("GF104", "GF105"))

# A book notebook: each section defines `get_model()` with its own class inside, returns
# `model, loss_fn, optimizer`, and evaluates under no_grad without `.eval()`.
SECTION = """\
def get_model():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.hidden = nn.Linear(784, 100){extra}
            self.out = nn.Linear(100, 10)

        def forward(self, x):
            h = self.hidden(x)
            return self.out(h), h

    model = Net()
    loss_fn = nn.CrossEntropyLoss()
    optimizer = Adam(model.parameters(), lr=1e-3)
    return model, loss_fn, optimizer


def train_batch(x, y, model, opt, loss_fn):
    batch_loss = loss_fn(model(x)[0], y)
    batch_loss.backward()
    opt.step()
    opt.zero_grad()


def accuracy(x, y, model):
    with torch.no_grad():
        prediction = model(x)[0]
    return prediction.argmax(-1) == y


model, loss_fn, optimizer = get_model()
for epoch in range(5):
    for x, y in loader:
        train_batch(x, y, model, optimizer, loss_fn)
        accuracy(x, y, model)
"""
HEADER = "import torch\nimport torch.nn as nn\nfrom torch.optim import Adam\n\n"


def _findings(source: str) -> list[tuple[str, int]]:
    return [(f.code, f.line) for f in check(source, settings=MODE)]


def test_a_model_built_from_a_class_the_factory_defines_is_judged_by_that_class():
    free = HEADER + SECTION.format(extra="")
    sensitive = HEADER + SECTION.format(extra="\n            self.bn = nn.BatchNorm1d(100)")
    # Linear layers only: `.eval()` would change nothing (the method's own tuple `return` is
    # not what the factory returns)
    assert _findings(free) == []
    assert [code for code, _ in _findings(sensitive)] == ["GF104"]


def test_a_redefined_factory_is_the_one_the_call_runs():
    # the first section's model is mode-free, the second's holds batch norm: only the second
    # section's evaluation is reported
    first = SECTION.format(extra="")
    second = SECTION.format(extra="\n            self.bn = nn.BatchNorm1d(100)")
    source = HEADER + first + "\n\n" + second
    found = _findings(source)
    assert [code for code, _ in found] == ["GF104"]
    assert found[0][1] > len((HEADER + first).splitlines())


def test_an_element_the_factory_does_not_always_return_as_a_tuple_stays_unknown():
    source = HEADER + SECTION.format(extra="").replace(
        "    return model, loss_fn, optimizer", "    if cfg:\n        return model\n    return model, loss_fn, optimizer"
    )
    # unknown but trained: reported, as for any module gradfix cannot see
    assert [code for code, _ in _findings(source)] == ["GF104"]


def test_a_factory_returning_a_container_is_judged_by_what_the_container_holds():
    # `nn.Sequential(nn.Dropout(0.25), ...)`: the dropout inside makes it mode-sensitive
    source = HEADER + SECTION.format(extra="").replace(
        "    model = Net()", "    model = nn.Sequential(nn.Dropout(0.25), nn.Linear(784, 10)).to('cpu')"
    )
    assert [code for code, _ in _findings(source)] == ["GF104"]
    assert _findings(source.replace("nn.Dropout(0.25), ", "")) == []


HELPERS = """\
import copy
import torch
import torch.nn as nn


def _check_gradients(policy, x):
    policy.zero_grad()
    policy(x).sum().backward()


def _check_kl(policy, x):
    with torch.no_grad():
        before = policy(x)
    trained = copy.deepcopy(policy)
    return before, trained


def test_gradients():
    policy = nn.Sequential(nn.Linear(1, 3), nn.Dropout(0.1))
    _check_gradients(policy, torch.rand(1, 1))


def test_kl():
    policy = nn.Sequential(nn.Linear(1, 3), nn.Dropout(0.1))
    _check_kl(policy, torch.rand(1, 1))
"""


def test_a_parameter_every_caller_hands_its_own_object_is_not_another_helpers_parameter():
    # pfrl's ACER tests: `_check_kl`'s policy is each test's own, never trained; the helper
    # that trains a parameter of the same name is handed other objects
    assert _findings(HELPERS) == []
    # where a caller trains the object it hands over, the evidence is that object's
    trains = HELPERS.replace("    _check_kl(policy, torch.rand(1, 1))", "    _check_gradients(policy, torch.rand(1, 1))\n    _check_kl(policy, torch.rand(1, 1))")
    assert [code for code, _ in _findings(trains)] == ["GF104"]
    # a module-level object handed over is shared by name, as before
    shared = HELPERS + "\n\nnet = nn.Sequential(nn.Dropout(0.1))\n_check_gradients(net, 1)\n_check_kl(net, 1)\n"
    assert [code for code, _ in _findings(shared)] == ["GF104"]


ADALINE = """\
import torch
from torch.autograd import grad


def train(model, x, y, epochs):
    for e in range(epochs):
        loss = torch.mean((model.forward(x) - y) ** 2)
        g = grad(loss, model.weight)[0]
        model.weight = model.weight - 0.01 * g
        with torch.no_grad():
            print(torch.mean((model.forward(x) - y) ** 2))


class Adaline:
    def __init__(self, n):
        self.weight = torch.zeros(n, 1, requires_grad=True)

    def forward(self, x):
        return torch.mm(x, self.weight).view(-1)


class Adaline3(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.linear = torch.nn.Linear(n, 1)
        self.drop = torch.nn.Dropout(0.1)


model = Adaline(2)
train(model, x, y, 5)
model = Adaline3(2)
model(x).sum().backward()
"""


def _not_a_module(source: str) -> bool:
    from gradfix.analysis.module_mode import not_a_module
    from gradfix.facts import build_facts

    facts = build_facts(source)
    train = next(f for f in facts.functions if f.name == "train")
    forward = next(c for c in facts.calls_in(train) if isinstance(c.func, ast.Attribute) and c.func.attr == "forward")
    return not_a_module(facts, "model", forward)


def test_a_parameter_every_call_hands_a_plain_object_has_no_eval():
    # the course notebook's `train(model, ...)` is only ever handed the plain `Adaline`: an
    # `.eval()` there would raise AttributeError, whatever a later cell's `model` is (the
    # binding that reaches the call decides, not every binding of the name)
    assert _findings(ADALINE) == []
    assert _not_a_module(ADALINE)
    assert not _not_a_module(ADALINE.replace("model = Adaline(2)\ntrain", "model = Adaline3(2)\ntrain"))
    assert not _not_a_module(ADALINE.replace("train(model, x, y, 5)", "train(model, x, y, 5)\ntrain(other, x, y, 5)"))
