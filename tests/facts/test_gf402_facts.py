"""Torch facts GF402 (variable-wrapper) relies on, checked on real torch (CPU)."""

from __future__ import annotations

import pytest
import torch
from torch.autograd import Variable


def _graph_tensor():
    leaf = torch.randn(3, requires_grad=True)
    return leaf, leaf * 2  # has a grad_fn


def test_variable_returns_a_new_detached_alias():
    _, x = _graph_tensor()
    v = Variable(x)
    assert v is not x  # so `x` alone is not an exact rewrite
    assert v.data_ptr() == x.data_ptr()  # same storage
    assert v.requires_grad is False and v.grad_fn is None and v.is_leaf
    assert type(v) is torch.Tensor


@pytest.mark.parametrize("requires_grad", [False, True])
def test_variable_matches_detach(requires_grad):
    x = torch.randn(2, 3, dtype=torch.float64, requires_grad=requires_grad)
    v, d = Variable(x), x.detach()
    for attr in ("dtype", "device", "shape", "requires_grad", "is_leaf", "grad_fn"):
        assert getattr(v, attr) == getattr(d, attr), attr
    assert v.data_ptr() == d.data_ptr() == x.data_ptr()
    assert Variable(torch.nn.Parameter(torch.ones(2))).requires_grad is False


def test_variable_shares_the_version_counter_like_detach():
    # An in-place write to `x` after the alias was saved for backward fails the same way.
    for wrap in (Variable, lambda t: t.detach()):
        w = torch.ones(3, requires_grad=True)
        t = torch.ones(3)
        out = (w * wrap(t)).sum()
        t.mul_(2)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            out.backward()


def test_variable_requires_grad_true_is_a_leaf_that_receives_grads():
    _, x = _graph_tensor()
    v = Variable(x, requires_grad=True)
    d = x.detach().requires_grad_(True)
    for t in (v, d):
        assert t.requires_grad and t.is_leaf and t.grad_fn is None
        assert t.data_ptr() == x.data_ptr()
        (t * 3).sum().backward()
        assert torch.equal(t.grad, torch.full((3,), 3.0))


def test_second_positional_argument_is_requires_grad():
    x = torch.randn(3)
    assert Variable(x, True).requires_grad is True
    assert Variable(x, False).requires_grad is False


def test_requires_grad_underscore_takes_only_bools():
    # Why the fix writes a literal `1` as `True`: Variable accepts an int, requires_grad_ does not.
    x = torch.randn(3)
    assert Variable(x, requires_grad=1).requires_grad is True
    with pytest.raises(TypeError):
        x.detach().requires_grad_(1)


def test_non_float_requires_grad_fails_both_ways():
    x = torch.zeros(2, dtype=torch.long)
    with pytest.raises(RuntimeError):
        Variable(x, requires_grad=True)
    with pytest.raises(RuntimeError):
        x.detach().requires_grad_(True)


def test_tensor_subclass_caveat():
    # Documented limitation: Variable() returns a plain Tensor, detach() keeps a subclass.
    class Tagged(torch.Tensor):
        pass

    t = torch.ones(2).as_subclass(Tagged)
    assert type(Variable(t)) is torch.Tensor
    assert type(t.detach()) is Tagged


# -- the import of `Variable` is public: `from model import *` re-exports it ---------------------

_MODEL = (
    "import torch\nfrom torch.autograd import Variable\n\n\n"
    "def init_hidden(n):\n    return Variable(torch.zeros(1, n))\n"
)
_TRAIN = "from model import *\n\nh = init_hidden(3)\nx = Variable(torch.ones(2))\nprint(float(x.sum() + h.sum()))\n"


def _run(folder):
    """Run ``folder/train.py`` in this process: (exception type name or None, stdout)."""
    import contextlib
    import io
    import runpy
    import sys

    out = io.StringIO()
    sys.path.insert(0, str(folder))
    sys.modules.pop("model", None)
    try:
        with contextlib.redirect_stdout(out):
            runpy.run_path(str(folder / "train.py"), run_name="__main__")
        return None, out.getvalue()
    except Exception as e:  # noqa: BLE001 - the outcome is what is compared
        return type(e).__name__, out.getvalue()
    finally:
        sys.path.remove(str(folder))
        sys.modules.pop("model", None)


@pytest.mark.parametrize("all_line", ["", "__all__ = ['init_hidden']\n"])
def test_star_import_reexports_variable_so_the_fix_keeps_the_import(tmp_path, all_line):
    # Real-repository shape (practical-pytorch char-rnn-classification): train.py calls
    # `Variable` that it only gets through `from model import *`.
    from gradfix import Settings, fix

    model = tmp_path / "model.py"
    model.write_text(_MODEL + all_line)
    (tmp_path / "train.py").write_text(_TRAIN)
    before = _run(tmp_path)
    # with __all__, the star import does not carry Variable: it fails already
    assert before[0] == ("NameError" if all_line else None)
    fixed = fix(model.read_bytes(), str(model), Settings(select=("GF402",)))
    assert b"torch.zeros(1, n).detach()" in fixed
    kept = b"from torch.autograd import Variable" in fixed
    assert kept is not bool(all_line)  # kept only where another module can take it
    model.write_bytes(fixed)
    assert _run(tmp_path) == before


def test_import_dropped_when_nothing_star_imports_the_module(tmp_path):
    from gradfix import Settings, fix

    model = tmp_path / "model.py"
    model.write_text(_MODEL)
    (tmp_path / "train.py").write_text("from model import init_hidden\nprint(init_hidden(2).shape)\n")
    fixed = fix(model.read_bytes(), str(model), Settings(select=("GF402",)))
    assert b"import Variable" not in fixed
    model.write_bytes(fixed)
    assert _run(tmp_path) == (None, "torch.Size([1, 2])\n")
