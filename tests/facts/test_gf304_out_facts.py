"""PyTorch facts behind GF304's `out=` writes (`torch.add(a, b, out=p.data)`), checked on real torch."""

import re
import warnings

import pytest

torch = pytest.importorskip("torch")


def _param():
    return torch.nn.Parameter(torch.tensor([1.0, 2.0, 3.0]))


A, B = torch.tensor([1.0, 1.0, 1.0]), torch.tensor([0.5, 2.0, -4.0])

# Functions that take tensors, as the fix rewrites them: `out=p.data` -> `out=p` under `no_grad`.
COMPUTING = {
    "add": lambda out: torch.add(A, B, alpha=2, out=out),
    "mul": lambda out: torch.mul(A, B, out=out),
    "sub": lambda out: torch.sub(A, B, out=out),
    "div": lambda out: torch.div(A, B, out=out),
    "clamp": lambda out: torch.clamp(B, -1, 1, out=out),
    "lerp": lambda out: torch.lerp(A, B, 0.9, out=out),
    "addcmul": lambda out: torch.addcmul(A, A, B, value=0.1, out=out),
    "where": lambda out: torch.where(B > 0, A, B, out=out),
    "cat": lambda out: torch.cat([A[:1], B[1:]], out=out),
    "matmul": lambda out: torch.matmul(torch.eye(3), B, out=out),
    "sum": lambda out: torch.sum(torch.ones(2, 3), 0, out=out),
    "normal (tensor mean)": lambda out: torch.normal(A, 0.0, out=out),
}


def test_out_a_leaf_that_requires_grad_raises_outside_no_grad():
    """Why the fix adds `no_grad` and cannot just drop `.data`."""
    p = _param()
    with pytest.raises(RuntimeError, match=r"functions with out=\.\.\. arguments don't support automatic differentiation"):
        torch.add(A, B, out=p)


@pytest.mark.parametrize("name", sorted(COMPUTING))
def test_out_the_tensor_under_no_grad_gives_the_same_values_and_keeps_a_leaf_parameter(name):
    write = COMPUTING[name]
    torch.manual_seed(0)
    through_data = _param()
    write(through_data.data)
    torch.manual_seed(0)
    p = _param()
    with torch.no_grad():
        result = write(p)
    assert result is p
    assert torch.equal(p.detach(), through_data.detach())
    assert isinstance(p, torch.nn.Parameter) and p.is_leaf and p.requires_grad and p.grad_fn is None


def test_out_through_data_skips_the_version_counter_and_no_grad_does_not():
    """The GF304 fact, for `out=`: a saved tensor overwritten through `.data` gives a wrong
    gradient silently; the fixed write makes that backward raise (why the fix is unsafe)."""
    p = _param()
    y = (p * p).sum()  # saves p
    torch.mul(A, B, out=p.data)
    assert p._version == 0
    y.backward()  # no error, and the gradient is computed from the overwritten values
    assert torch.equal(p.grad, 2 * p.detach())
    q = _param()
    z = (q * q).sum()
    with torch.no_grad():
        torch.mul(A, B, out=q)
    assert q._version == 1
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        z.backward()


def test_data_operands_and_the_written_tensor_itself_drop_together():
    """`torch.clamp(w.data, -1, 1, out=w.data)` -> `torch.clamp(w, -1, 1, out=w)`: the input
    requires grad, but under no_grad nothing is recorded and the values are the same."""
    w = torch.nn.Parameter(torch.tensor([-3.0, 0.5, 9.0]))
    expected = w.detach().clamp(-1, 1)
    with torch.no_grad():
        torch.clamp(w, -1, 1, out=w)
    assert torch.equal(w.detach(), expected) and w.is_leaf and w.requires_grad and w.grad_fn is None


def test_out_a_view_of_the_parameter_under_no_grad_writes_the_same_values():
    """`out=w.data[0]` -> `out=w[0]`."""
    w, v = (torch.nn.Parameter(torch.zeros(2, 3)) for _ in range(2))
    torch.add(A, B, out=w.data[0])
    with torch.no_grad():
        torch.add(A, B, out=v[0])
    assert torch.equal(w.detach(), v.detach()) and v.is_leaf and v.requires_grad


def test_a_shape_change_resizes_the_parameter_only_without_data():
    """A caveat of the (unsafe) fix: when the result has another shape, `out=p.data` resizes
    only the alias and `out=p` resizes `p`; torch warns about both."""
    p, q = _param(), _param()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.add(torch.ones(5), 1, out=p.data)
        with torch.no_grad():
            torch.add(torch.ones(5), 1, out=q)
    assert p.shape == (3,) and q.shape == (5,)
    assert len([w for w in caught if "resized" in str(w.message)]) == 2


def _factory_calls():
    from gradfix.rules.gf304_data_mutation import _FACTORIES

    calls = {
        "arange": lambda out: torch.arange(3.0, out=out),
        "empty": lambda out: torch.empty(3, out=out),
        "eye": lambda out: torch.eye(3, out=out),
        "full": lambda out: torch.full((3,), 2.0, out=out),
        "linspace": lambda out: torch.linspace(0, 1, 3, out=out),
        "logspace": lambda out: torch.logspace(0, 1, 3, out=out),
        "normal": lambda out: torch.normal(0.0, 1.0, (3,), out=out),
        "ones": lambda out: torch.ones(3, out=out),
        "rand": lambda out: torch.rand(3, out=out),
        "randint": lambda out: torch.randint(0, 5, (3,), out=out),
        "randn": lambda out: torch.randn(3, out=out),
        "randperm": lambda out: torch.randperm(3, out=out),
        "range": lambda out: torch.range(0, 2, out=out),
        "zeros": lambda out: torch.zeros(3, out=out),
        "fft.fftfreq": lambda out: torch.fft.fftfreq(3, out=out),
        "fft.rfftfreq": lambda out: torch.fft.rfftfreq(4, out=out),
    }
    return _FACTORIES, calls


def test_a_factory_out_a_parameter_under_no_grad_clears_requires_grad_or_raises():
    """Why GF304 reports `torch.randn(3, out=w.data)` without a fix: the factory's
    `requires_grad=False` reaches the `out=` tensor, so the rewrite would silently freeze the
    parameter (or raise), while through `.data` the parameter keeps training."""
    factories, calls = _factory_calls()
    assert set(calls) <= factories
    for name, write in calls.items():
        out = torch.nn.Parameter(torch.zeros(3))
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # torch.range is deprecated
                with torch.no_grad():
                    write(out)
        except RuntimeError as error:
            assert "require grad" in str(error), name
            continue
        assert not out.requires_grad, name
    kept = _param()
    torch.zeros(3, out=kept.data)
    assert kept.requires_grad  # through `.data`: the parameter still trains


def test_every_documented_factory_with_out_is_in_gf304s_list():
    """A torch that adds a sized factory taking `out=` (documented with `requires_grad`)
    fails here, not in a user's training run."""
    factories, _ = _factory_calls()
    documented = set()
    for prefix, module in (("", torch), ("fft.", torch.fft), ("linalg.", torch.linalg), ("special.", torch.special)):
        for name in dir(module):
            func = getattr(module, name)
            if name.startswith("_") or isinstance(func, type) or not callable(func):
                continue
            doc = func.__doc__ or ""
            if re.search(r"\bout\b\s*[(=:]", doc) and "requires_grad" in doc:
                documented.add(prefix + name)
    assert {"zeros", "randn", "fft.fftfreq"} <= documented  # the scan itself works
    assert documented <= factories, sorted(documented - factories)
