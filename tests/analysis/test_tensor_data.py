"""Whether a ``.data`` may be torch's (gradfix/analysis/tensor_data.py), and the rules that ask:
GF304 (writes through ``.data``) and GF403 (``loss.data[0]``)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from gradfix import Settings, check, fix
from gradfix.analysis.project import ProjectIndex
from gradfix.analysis.tensor_data import grads_may_require_grad, plain_data_classes, torch_absent
from gradfix.facts import build_facts

VALUE = """\
class Value:
    def __init__(self, data, children=()):
        self.data = data
        self.grad = 0.0
    def __add__(self, other):
        return Value(self.data + other.data)
"""


def _src(code: str) -> str:
    return textwrap.dedent(code).lstrip("\n")


def _lines(code: str, rule: str = "GF304", **kw) -> list[int]:
    return [f.line for f in check(_src(code), "m.py", Settings(select=(rule,)), **kw)]


@pytest.mark.parametrize(
    "code, absent",
    [
        ("def f(m):\n    m.weight.data.zero_()\n", False),  # no import at all: a fragment
        ("import math\ndef f(m):\n    m.weight.data.zero_()\n", True),
        ("from .layers import helper\ndef f(m):\n    m.weight.data.zero_()\n", True),
        ("from blocks import *\ndef f(m):\n    m.weight.data.zero_()\n", False),  # may bring torch
        ("import math  # works on torch modules\ndef f(m):\n    m.weight.data.zero_()\n", False),
        ("import math\ndef f(m):\n    import torch as T\n    m.weight.data.zero_()\n", False),
        ("import torch as T\n", False),
        ("from torch import nn\n", False),
    ],
)
def test_torch_absent(code, absent):
    assert torch_absent(build_facts(code)) is absent


def test_plain_data_classes_are_those_that_assign_self_data_without_a_torch_base():
    facts = build_facts(
        VALUE
        + "import torch.nn as nn\n"
        + "class P(nn.Parameter):\n    def reset(self, t):\n        self.data = t\n"
        + "class Holder:\n    def load(me, x):\n        me.data = x\n"
        + "class Other:\n    def __init__(self):\n        self.value = 1\n"
    )
    assert plain_data_classes(facts) == {"Value", "Holder"}


def test_micrograd_values_are_not_tensors_and_the_torch_leaf_next_to_them_is():
    code = (
        "import torch\n"
        + VALUE
        + _src(
            """
            a = Value(2.0)
            a.data += 0.01 * a.grad
            params = [Value(1.0), Value(2.0)]
            for p in params:
                p.data += -0.1 * p.grad
            def step(model, lr):
                for p in model.parameters():
                    p.data += -lr * p.grad
            class Neuron:
                def __init__(self):
                    self.b = Value(0.0)
                def parameters(self):
                    return [self.b]
            def nudge(n):
                n.b.data += 1.0
            w = torch.randn(3, requires_grad=True)
            w.data -= 0.1 * w.grad
            """
        )
    )
    assert _lines(code) == [24]  # `w.data -= ..` only


def test_the_micrograd_reproducer_is_left_alone_and_still_trains():
    """round5b FP-1: the fix used to rebind `p` and training stopped."""
    code = VALUE.replace("\n    def __add__", "\n    def __radd__") + _src(
        """
        params = [Value(1.0), Value(2.0)]
        for p in params:
            p.grad = 0.5
        for p in params:
            p.data += -0.1 * p.grad
        """
    )
    for source in (code, "import torch\n" + code, ("import torch as T\n" + code).replace("\n", "\r\n")):
        assert check(source, "m.py", Settings(select=("GF304",))) == []
        assert fix(source, "m.py", Settings(select=("GF304",), unsafe_fixes=True)) == source


def test_a_model_init_file_without_torch():
    init = "def init(m):\n    m.weight.data.fill_(0)\n"
    # Imports other modules, never torch: nothing here can be a tensor except through a caller,
    # and no judged-true finding of the precision corpus is in such a file.
    assert _lines("import math\n" + init) == []
    assert _lines("from .utils import helper\n" + init) == []
    # A fragment (no import at all) or a star import that may bring torch in: reported.
    assert _lines(init) == [2]
    assert _lines("from blocks import *\n" + init) == [3]
    assert _lines("import torch.nn as nn\n" + init) == [3]


def test_a_plain_class_of_another_project_module(tmp_path: Path):
    (tmp_path / "engine.py").write_text(VALUE)
    user = tmp_path / "train.py"
    user.write_text(
        _src(
            """
            import torch
            from engine import Value
            a = Value(1.0)
            a.data += 0.5
            w = torch.zeros(2, requires_grad=True)
            w.data += 0.5
            """
        )
    )
    index = ProjectIndex.build([str(p) for p in tmp_path.glob("*.py")])
    settings = Settings(select=("GF304",))
    assert [f.line for f in check(user.read_bytes(), str(user), settings, project=index)] == [6]
    # Alone, the file cannot tell what `Value` is: reported like any unknown receiver.
    assert [f.line for f in check(user.read_bytes(), str(user), settings)] == [4, 6]


def test_gf403_asks_the_same_question():
    body = "    loss = crit(out, y)\n    print(loss.data[0])\n"
    assert _lines("import torch\ndef f(out, y, crit):\n" + body, "GF403") == [4]
    assert _lines("import math\ndef f(out, y, crit):\n" + body, "GF403") == []
    code = "import torch\n" + VALUE + "def g(x):\n    loss = Value([x])\n    print(loss.data[0])\n"
    assert _lines(code, "GF403") == []


@pytest.mark.parametrize(
    "call, may",
    [
        ("loss.backward()", False),
        ("loss.backward(create_graph=False)", False),
        ("loss.backward(create_graph=True)", True),
        ("torch.autograd.grad(loss, ps, create_graph=flag)", True),
        ("loss.backward(**kw)", True),
        ("grad(loss, ps, **kw)", True),  # `from torch.autograd import grad`
        ("log(loss, **kw)", False),
    ],
)
def test_grads_may_require_grad(call, may):
    assert grads_may_require_grad(build_facts(f"import torch\n{call}\n")) is may


def test_a_file_with_a_data_holder_class_still_trains_torch_parameters():
    """A plain class with `self.data` (a dataset holder) does not make torch's parameters
    doubtful: a loop over `model.parameters()` is torch's unless a class of the file without a
    torch base defines `parameters` (micrograd's `MLP`)."""
    holder = "import torch\nclass Holder:\n    def __init__(self, x):\n        self.data = x\n"
    loop = "def step(model, lr):\n    for p in model.parameters():\n        p.data.add_(p.grad, alpha=-lr)\n"
    assert _lines(holder + loop) == [7]
    mlp = "class MLP:\n    def parameters(self):\n        return []\n"
    assert _lines(holder + mlp + loop) == []
    module = "class Net(torch.nn.Module):\n    def parameters(self):\n        return []\n"
    assert _lines(holder + module + loop) == [10]
    # A bare argument nothing ties to torch: as likely a `Holder` as a tensor.
    assert _lines(holder + "def f(w):\n    w.data.zero_()\n") == []


@pytest.mark.parametrize(
    "write, bare",
    [
        ("p.grad.data.zero_()", True),
        ("p.grad.data.mul_(1. / scaler.loss_scale)", True),
        ("p.grad.data.clamp_(-clip, clip)", True),
        ("p.grad.data[mask] = 0", True),
        ("p.grad.data.add_(p.data.sign(), alpha=0.1)", True),
        ("p.grad.data.div_(float(world_size))", True),
        ("p.grad.data.add_(p, alpha=0.1)", False),  # the parameter itself requires grad
        ("p.grad.data.add_(model.weight)", False),  # so does another parameter
        ("p.grad.data.add_(noise(p))", False),  # an unknown call may return a graph
        ("p.grad.data.copy_(g)", False),  # `g` is bound by the loop over parameters
        ("p.grad.data.add_(*mask)", False),  # unpacked: what it holds is not seen
    ],
)
def test_a_grad_write_loses_its_with_only_when_no_operand_may_require_grad(write, bare):
    code = f"import torch\ndef f(model, mask, clip, scaler, world_size, noise):\n    for p, g in zip(model.parameters(), model.parameters()):\n        {write}\n"
    fixed = fix(code, "m.py", Settings(select=("GF304",), unsafe_fixes=True))
    assert ".data" not in fixed.split("\n")[-2] or "p.data" in write
    assert ("no_grad" not in fixed) is bare


def test_a_local_operand_of_a_grad_write_is_followed_to_its_assignments():
    settings = Settings(select=("GF304",), unsafe_fixes=True)
    head = "import math\nimport torch\ndef f(model, updates, clip, total):\n"
    number = head + "    nu = min(1.0, math.sqrt(clip / total))\n    for p in model.parameters():\n        p.grad.data.mul_(nu)\n"
    assert "no_grad" not in fix(number, "m.py", settings)
    looked_up = head + "    for p in model.parameters():\n        v = updates[p]\n        p.grad.data.copy_(v)\n"
    assert "no_grad" in fix(looked_up, "m.py", settings)  # `updates[p]` may be anything
    looped = head + "    for p, v in zip(model.parameters(), updates):\n        p.grad.data.copy_(v)\n"
    assert "no_grad" in fix(looped, "m.py", settings)


def test_an_attribute_of_a_local_object_is_not_judged_by_how_the_object_was_built():
    code = (
        "import torch\nscaler = LossScaler()\nfor group in opt.param_groups:\n    for p in group['params']:\n"
        "        p.grad.data.mul_(1. / scaler.loss_scale)\n        p.grad.data.mul_(group['lr'])\n"
    )
    assert "no_grad" not in fix(code, "m.py", Settings(select=("GF304",), unsafe_fixes=True))
