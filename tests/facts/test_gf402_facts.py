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
    assert b"return torch.zeros(1, n)\n" in fixed
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


# -- what the idiomatic rewrites rely on -----------------------------------------------------------
# Every constructor the fix treats as "fresh" (the wrapper goes), with arguments that run on CPU.
_FRESH = {
    "zeros": lambda: torch.zeros(2, 3),
    "ones": lambda: torch.ones(2),
    "empty": lambda: torch.empty(2),
    "full": lambda: torch.full((2,), 1.5),
    "rand": lambda: torch.rand(2),
    "randn": lambda: torch.randn(2),
    "randint": lambda: torch.randint(0, 5, (2,)),
    "randperm": lambda: torch.randperm(4),
    "arange": lambda: torch.arange(3.0),
    "range": lambda: _quietly(torch.range, 0.0, 2.0),  # deprecated (it warns), still in 2018 code
    "linspace": lambda: torch.linspace(0, 1, 3),
    "logspace": lambda: torch.logspace(0, 1, 3),
    "eye": lambda: torch.eye(2),
    "tensor": lambda: torch.tensor([1.0, 2.0]),
    "zeros_like": lambda: torch.zeros_like(torch.ones(2, requires_grad=True)),
    "ones_like": lambda: torch.ones_like(torch.ones(2, requires_grad=True)),
    "empty_like": lambda: torch.empty_like(torch.ones(2, requires_grad=True)),
    "full_like": lambda: torch.full_like(torch.ones(2, requires_grad=True), 3.0),
    "rand_like": lambda: torch.rand_like(torch.ones(2, requires_grad=True)),
    "randn_like": lambda: torch.randn_like(torch.ones(2, requires_grad=True)),
    "from_numpy": lambda: torch.from_numpy(pytest.importorskip("numpy").ones(2)),
    "FloatTensor": lambda: torch.FloatTensor(2),
    "LongTensor": lambda: torch.LongTensor([1, 2]),
    "Tensor": lambda: torch.Tensor([1.0]),
    "new": lambda: torch.ones(2, requires_grad=True).new(3),
    "new_zeros": lambda: torch.ones(2, requires_grad=True).new_zeros(3),
    "new_ones": lambda: torch.ones(2, requires_grad=True).new_ones(3),
    "new_full": lambda: torch.ones(2, requires_grad=True).new_full((3,), 2.0),
    "new_empty": lambda: torch.ones(2, requires_grad=True).new_empty(3),
    "new_tensor": lambda: torch.ones(2, requires_grad=True).new_tensor([1.0]),
}


def _quietly(func, *args, **kwargs):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return func(*args, **kwargs)


def test_range_takes_requires_grad_as_arange_does():
    assert _quietly(torch.range, 0.0, 2.0, requires_grad=True).requires_grad


@pytest.mark.parametrize("name", sorted(_FRESH))
def test_fresh_constructors_need_no_grad(name):
    t = _FRESH[name]()
    assert t.requires_grad is False and t.grad_fn is None and t.is_leaf


def test_keeping_methods_on_a_fresh_tensor_need_no_grad():
    base = torch.zeros(2, 3)
    for t in (
        base.float(), base.double(), base.long(), base.half(), base.int(), base.bool(), base.to("cpu"), base.cpu(),
        base.view(-1), base.transpose(0, 1), base.t(), base.unsqueeze(0), base.squeeze(), base.contiguous(),
        base.reshape(3, 2), base.clone(), base.detach(), base.zero_(), base.fill_(2.0), base.normal_(0, 1),
        base.uniform_(), base.type(torch.float64), base.permute(1, 0), base.expand(2, 2, 3), base.flatten(),
        base.random_(), base.exponential_(), base.geometric_(0.5), base.cauchy_(), base.log_normal_(),
        base.bernoulli_(0.3), torch.zeros(1).resize_(2, 3), base.new().resize_as_(base).bernoulli_(1 - 0.1),
    ):
        assert t.requires_grad is False and t.grad_fn is None
    # ...but a probability tensor that requires grad makes `bernoulli_`'s result require grad
    # (so only a literal probability keeps it grad-free, as for `fill_`)
    assert torch.zeros(3).bernoulli_(torch.full((3,), 0.5, requires_grad=True)).requires_grad
    # (a number probability, `1 - dropout` with a float `dropout`, keeps it grad-free; a
    # parameter with a number default is taken as one)
    assert torch.zeros(3).bernoulli_(1 - torch.tensor(0.5, requires_grad=True)).requires_grad


def test_values_computed_from_grad_free_tensors_need_no_grad_in_any_grad_mode():
    """analysis/provenance.py: an operator, a `torch.*` function or a tensor method whose
    operands are all grad-free tensors or constants gives a grad-free tensor, even where grad
    is enabled (so `Variable(<such a value>)` can become the value itself)."""
    _, h = _graph_tensor()
    with torch.enable_grad():
        fresh = torch.zeros(2, 3)
        for t in (
            torch.LongTensor([1, 2]) * 2, -h.data + 1.0, torch.atan2(h.data, h.data), torch.transpose(fresh, 0, 1),
            torch.cat([h.data.view(-1), torch.ones(2)], dim=0), h.data.sum(0, keepdim=True), fresh * 3, fresh @ fresh.t(),
        ):
            assert t.requires_grad is False and t.grad_fn is None
        # ...but one operand that requires grad, or `requires_grad_()`, and it does
        assert (fresh + h).requires_grad and h.data.clone().requires_grad_().requires_grad


def test_data_is_grad_free_even_on_a_graph_tensor():
    leaf, x = _graph_tensor()
    for t in (leaf.data, x.data, x.data.float(), x.data.view(-1)):
        assert t.requires_grad is False and t.grad_fn is None


def test_variable_of_data_equals_detach():
    # `Variable(h.data)` -> `h.detach()`: same values and storage, no graph, a leaf.
    _, h = _graph_tensor()
    old, new = Variable(h.data), h.detach()
    assert torch.equal(old, new) and old.data_ptr() == new.data_ptr() == h.data_ptr()
    assert not old.requires_grad and not new.requires_grad and old.is_leaf and new.is_leaf


def test_the_data_of_a_variable_is_the_data_of_its_argument():
    # `Variable(h).data` -> `h.data`: each is a new detached alias of `h`'s storage.
    _, h = _graph_tensor()
    old, new = Variable(h).data, h.data
    assert torch.equal(old, new) and old.data_ptr() == new.data_ptr() == h.data_ptr()
    assert old is not h and new is not h and not old.requires_grad and not new.requires_grad


def test_dropping_the_wrapper_of_a_fresh_tensor_changes_nothing_but_identity():
    v, t = Variable(torch.arange(3.0)), torch.arange(3.0)
    for attr in ("dtype", "device", "shape", "requires_grad", "is_leaf", "grad_fn"):
        assert getattr(v, attr) == getattr(t, attr), attr
    assert torch.equal(v, t)


_TAKES_REQUIRES_GRAD = {
    "zeros": (2,), "ones": (2,), "empty": (2,), "full": ((2,), 1.5), "rand": (2,), "randn": (2,),
    "arange": (3.0,), "linspace": (0, 1, 3), "logspace": (0, 1, 3), "eye": (2,), "tensor": ([1.0, 2.0],),
    "zeros_like": (torch.ones(2),), "ones_like": (torch.ones(2),), "empty_like": (torch.ones(2),),
    "full_like": (torch.ones(2), 3.0), "rand_like": (torch.ones(2),), "randn_like": (torch.ones(2),),
}


@pytest.mark.parametrize("name", sorted(_TAKES_REQUIRES_GRAD))
def test_constructor_requires_grad_equals_the_wrapper(name):
    # `Variable(torch.zeros(3), requires_grad=True)` -> `torch.zeros(3, requires_grad=True)`.
    fn, args = getattr(torch, name), _TAKES_REQUIRES_GRAD[name]
    new = fn(*args, requires_grad=True)
    old = Variable(fn(*args), requires_grad=True)
    for t in (old, new):
        assert t.requires_grad and t.is_leaf and t.grad_fn is None
    assert old.shape == new.shape and old.dtype == new.dtype


@pytest.mark.parametrize("method", ["new_zeros", "new_ones", "new_empty", "new_tensor", "new_full"])
def test_new_methods_take_requires_grad(method):
    args = {"new_tensor": ([1.0],), "new_full": ((2,), 1.0)}.get(method, ((2,),))
    t = getattr(torch.ones(1), method)(*args, requires_grad=True)
    assert t.requires_grad and t.is_leaf


@pytest.mark.parametrize(
    "make", [lambda **kw: torch.FloatTensor(3, **kw), lambda **kw: torch.ones(2).new(3, **kw)], ids=["FloatTensor", "new"]
)
def test_legacy_constructors_take_no_requires_grad_so_the_fix_uses_requires_grad_(make):
    with pytest.raises(TypeError):
        make(requires_grad=True)
    t = make().requires_grad_()
    assert t.requires_grad and t.is_leaf


def test_from_numpy_takes_no_requires_grad():
    np = pytest.importorskip("numpy")

    with pytest.raises(TypeError):
        torch.from_numpy(np.ones(2), requires_grad=True)


def test_a_wrapper_detached_at_once_adds_nothing():
    # `Variable(h).detach()` and `Variable(h.data).detach()` are `h.detach()`: same storage,
    # no graph, not a leaf that wants grad, and later in-place writes are shared the same way.
    h = torch.randn(3, requires_grad=True) * 2
    for wrapped in (Variable(h).detach(), Variable(h.data).detach()):
        plain = h.detach()
        assert wrapped.data_ptr() == plain.data_ptr() == h.data_ptr()
        assert wrapped.grad_fn is None and plain.grad_fn is None
        assert wrapped.requires_grad is plain.requires_grad is False
        assert wrapped.is_leaf and plain.is_leaf


def test_volatile_calls_are_gf401s_while_it_runs_and_gf402s_alone():
    """With GF401 selected GF402 reports only the call without `volatile`; alone it reports all three,
    the `volatile=True, requires_grad=True` one as a possible ValueError."""
    from gradfix import Settings, check

    code = (
        "from torch.autograd import Variable\n\ndef f(x):\n    a = Variable(x, volatile=True)\n    b = Variable(x)\n"
        "    c = Variable(x, volatile=True, requires_grad=True)\n    return a, b, c\n"
    )
    alias = "legacy `Variable(...)` of a tensor: since PyTorch 0.4 it returns a detached alias"
    both = [(f.code, f.span.line, f.span.col, f.message) for f in check(code, settings=Settings(select=("GF401", "GF402"))) if f.code == "GF402"]
    assert both == [("GF402", 5, 8, alias)]
    alone = [(f.span.line, f.span.col, f.message) for f in check(code, settings=Settings(select=("GF402",)))]
    assert alone == [(4, 8, alias), (5, 8, alias), (6, 8, "legacy `Variable(...)` with `volatile` and `requires_grad` may raise ValueError")]


def test_a_numpy_value_carries_no_autograd_history():
    # provenance: a NumPy function's result needs no grad, whatever its operands (xavier_init's
    # `torch.randn(*size) * (1. / np.sqrt(n / 2.))` is fresh)
    import numpy as np

    scale = 1.0 / np.sqrt(8 / 2.0)
    assert not isinstance(scale, torch.Tensor)
    assert not (torch.randn(3) * scale).requires_grad
    with pytest.raises(RuntimeError, match="requires grad"):
        np.sqrt(torch.ones(3, requires_grad=True))  # a tensor with history cannot even go in


@pytest.mark.parametrize(
    "make",
    [
        lambda x: x.long(),
        lambda x: x.int(),
        lambda x: x.bool(),
        lambda x: x.argmax(0),
        lambda x: x.argsort(),
        lambda x: x.eq(1),
        lambda x: x > 0,
        lambda x: x.nonzero(),
        lambda x: x.to(torch.long),
        lambda x: x.type(torch.LongTensor),
    ],
)
def test_an_integer_or_bool_result_carries_no_graph(make):
    # provenance.integer_tensor: `Variable(target.long())` is `target.long()`, whatever target is
    x = torch.randn(4, requires_grad=True) * 2  # with a grad_fn
    result = make(x)
    assert result.dtype in (torch.int64, torch.int32, torch.bool)
    assert not result.requires_grad and result.grad_fn is None


def test_an_integer_tensor_stays_grad_free_whatever_is_written_into_it():
    # FastCampus's char_tensor: `tensor = torch.zeros(n).long(); tensor[c] = ...; Variable(tensor)`
    t = torch.zeros(3).long()
    t[0] = torch.ones(1, requires_grad=True)[0] * 2
    t.add_(torch.ones(3, requires_grad=True).long())
    assert not t.requires_grad and t.grad_fn is None
    with pytest.raises(RuntimeError, match="floating point"):
        t.requires_grad_()  # nobody can make it require grad either
    assert torch.randint(3, (2,)).dtype == torch.int64 and torch.randperm(3).dtype == torch.int64


def test_the_integer_dtypes_gradfix_names_are_integer():
    from gradfix.analysis.provenance import _INTEGER_CLASSES, _INTEGER_DTYPES

    for name in _INTEGER_DTYPES:
        dtype = getattr(torch, name.split(".", 1)[1])
        assert not dtype.is_floating_point and not dtype.is_complex, name
    for name in _INTEGER_CLASSES:
        assert not getattr(torch, name)(1).is_floating_point(), name
