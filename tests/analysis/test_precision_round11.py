"""Wrong findings of the round-11 sample (bench/precision/verdicts11.tsv), one fixture per
shape, written for these tests: the facts each one showed to be wrong."""

from __future__ import annotations

import textwrap

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
