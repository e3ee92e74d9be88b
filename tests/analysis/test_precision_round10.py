"""Wrong findings and awkward rewrites of the round-9 sample (bench/precision/verdicts9.tsv,
judged on 7782f5d), one fixture per shape, written for these tests."""

from __future__ import annotations

import textwrap

import pytest

from gradfix import Settings, check, fix

DIFFERENTIATION = Settings(select=("GF102", "GF103"))


def _codes(source: str, settings: Settings) -> list[str]:
    return [f.code for f in check(textwrap.dedent(source), settings=settings)]


DEMONSTRATION = """\
import torch

x = torch.arange(1., 4)
w = torch.ones(3, requires_grad=True)
with torch.no_grad():
    z = w @ x
{backward}
"""


def _demonstration(handler: str) -> str:
    body = "    z.backward()\n" if handler else "z.backward()\n"
    if not handler:
        return DEMONSTRATION.format(backward=body)
    return DEMONSTRATION.format(backward=f"try:\n{body}{handler}:\n    print('no grad_fn, as expected')")


@pytest.mark.parametrize("handler", ["except RuntimeError as e", "except (ValueError, RuntimeError)", "except builtins.RuntimeError"])
def test_a_backward_whose_runtime_error_is_caught_is_expected_to_fail(handler):
    # A tutorial shows that a tensor computed under no_grad cannot be backpropagated.
    assert _codes(_demonstration(handler), DIFFERENTIATION) == []


@pytest.mark.parametrize("handler", ["", "except Exception", "except", "except ValueError"])
def test_general_error_handling_does_not_make_the_backward_expected_to_fail(handler):
    assert _codes(_demonstration(handler), DIFFERENTIATION) == ["GF103"]


def test_backward_under_no_grad_in_a_try_that_expects_the_error():
    source = """\
    import torch

    def probe(model, x):
        with torch.no_grad():
            try:
                model(x).sum().backward()
            except RuntimeError:
                return False
        return True
    """
    assert _codes(source, DIFFERENTIATION) == []
    assert _codes(source.replace("except RuntimeError", "except Exception"), DIFFERENTIATION) == ["GF103"]


INIT_PAIRS = """\
import torch
import torch.nn as nn


class Policy(nn.Module):
    def __init__(self, n, h):
        super().__init__()
        self.bn0 = nn.BatchNorm1d(n)
        self.bn0.weight.data.fill_(1)
        self.bn0.bias.data.fill_(0)

        self.linear1 = {between}
        self.bn1 = nn.BatchNorm1d(h)
        self.bn1.weight.data.fill_(1)
        self.bn1.bias.data.fill_(0)

        self.head = nn.Linear(h, 1)
        self.head.weight.data.mul_(0.1)
        self.head.bias.data.mul_(0.1)
        self.mask = torch.ones(h)

    def forward(self, x):
        return self.head(self.bn1(self.linear1(self.bn0(x)))) * self.mask
"""

DATA = Settings(select=("GF304",), unsafe_fixes=True)


def test_init_writes_separated_by_the_layers_they_initialise_share_one_with():
    # round 9, ikostrikov/pytorch-ddpg-naf: six `with` blocks in one __init__ before
    source = INIT_PAIRS.format(between="nn.Linear(n, h)")
    assert _codes(source, DATA) == ["GF304"]
    fixed = fix(source, settings=DATA)
    assert fixed.count("with torch.no_grad():") == 1
    assert "            self.linear1 = nn.Linear(n, h)\n" in fixed  # built inside the `with`
    assert "        self.bn0 = nn.BatchNorm1d(n)\n" in fixed  # the first layer stays before it
    assert "        self.mask = torch.ones(h)\n" in fixed  # and what follows the last write after it
    assert ".data" not in fixed
    compile(fixed, "<fixed>", "exec")
    assert fix(fixed, settings=DATA) == fixed


def test_a_project_module_between_init_writes_keeps_them_apart():
    # its constructor may do anything (a buffer computed from a parameter): not joined
    source = INIT_PAIRS.format(between="Encoder(n, h)")
    assert _codes(source, DATA) == ["GF304", "GF304"]
    assert fix(source, settings=DATA).count("with torch.no_grad():") == 2


LAZY_NET = """\
import torch
import torch.nn as nn


class Trainer(object):
    def __init__(self, net=None):
        self._net = net
        self._optimizer = None

    def _initialize(self):
        if self._net is None:
            self._net = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.2))
        self._optimizer = torch.optim.Adam(self._net.parameters())

    def fit(self, batches):
        if self._optimizer is None:
            self._initialize()
        for x in batches:
            loss = self._net(x).sum()
            self._optimizer.zero_grad()
            loss.backward()
            self._optimizer.step()

    def predict(self, x):
        self._net.train(False)
        return self._net(x).detach()
"""

TRAIN_MODE = Settings(select=("GF105",), unsafe_fixes=True)


def test_train_goes_after_the_call_that_builds_the_module():
    # round 9, dataflowr's FactorizationModel: `self._net.train()` at the top of fit() ran
    # before `self._initialize()` built the net, an AttributeError on None
    assert _codes(LAZY_NET, TRAIN_MODE) == ["GF105"]
    fixed = fix(LAZY_NET, settings=TRAIN_MODE)
    assert "            self._initialize()\n        self._net.train()\n        for x in batches:\n" in fixed
    compile(fixed, "<fixed>", "exec")
    assert fix(fixed, settings=TRAIN_MODE) == fixed


def test_no_fix_when_the_statement_that_uses_the_module_also_builds_it():
    source = LAZY_NET.replace(
        "        if self._optimizer is None:\n            self._initialize()\n        for x in batches:\n",
        "        for x in batches:\n            if self._optimizer is None:\n                self._initialize()\n",
    )
    findings = [f for f in check(source, settings=TRAIN_MODE) if f.code == "GF105"]
    assert len(findings) == 1 and findings[0].fix is None


def test_import_torch_goes_beside_the_files_torch_imports():
    # round 10 (torchtitan, lufficc/SSD): `import torch` was appended after the project's own
    # imports; a person adds it next to `import torch.nn as nn`
    source = "from collections import OrderedDict\n\n# layers\nimport torch.nn as nn\n\nfrom .local import thing\n\n\ndef init(m):\n    for p in m.parameters():\n        p.data.zero_()\n"
    fixed = fix(source, settings=DATA)
    assert fixed.startswith("from collections import OrderedDict\n\n# layers\nimport torch\nimport torch.nn as nn\n\nfrom .local import thing\n")
    assert fix("import os\nfrom torch import nn\n\n\ndef f(p):\n    p.data.zero_()\n", settings=DATA).startswith("import os\nimport torch\nfrom torch import nn\n")
    loop = "\n\n\ndef init(m):\n    for p in m.parameters():\n        p.data.zero_()\n"
    # `import torch.jit` binds `torch` itself: nothing to add
    assert fix("import torch.jit\nimport torch.nn as nn" + loop, settings=DATA).startswith("import torch.jit\nimport torch.nn as nn\n\n\n@torch.no_grad()")
