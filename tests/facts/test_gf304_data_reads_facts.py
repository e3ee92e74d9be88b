"""PyTorch facts behind GF304 dropping `.data` from the *operands* of a write it moves under
`no_grad` (`p.data.copy_(q.data)` -> `p.copy_(q)`), checked on real torch."""

import pytest

torch = pytest.importorskip("torch")


def _params(seed=0):
    g = torch.Generator().manual_seed(seed)
    return (
        torch.nn.Parameter(torch.randn(4, 3, generator=g)),
        torch.nn.Parameter(torch.randn(4, 3, generator=g)),
    )


def _state(*tensors):
    return [(t.detach().clone(), t.requires_grad, t.grad_fn, t.is_leaf, t._version) for t in tensors]


def _same(a, b):
    assert len(a) == len(b)
    for (va, ra, fa, la, ea), (vb, rb, fb, lb, eb) in zip(a, b):
        assert torch.equal(va, vb) and (ra, fa, la, ea) == (rb, fb, lb, eb)


@pytest.mark.parametrize(
    "old, new",
    [
        (lambda p, q: p.copy_(q.data), lambda p, q: p.copy_(q)),
        (lambda p, q: p.copy_(p.data * 0.9 + q.data * 0.1), lambda p, q: p.copy_(p * 0.9 + q * 0.1)),
        (lambda p, q: p.add_(q.data, alpha=-0.5), lambda p, q: p.add_(q, alpha=-0.5)),
        (lambda p, q: p.mul_(0.5).add_(q.data.clone(), alpha=0.5), lambda p, q: p.mul_(0.5).add_(q.clone(), alpha=0.5)),
        (lambda p, q: p.copy_(q.data.view(12).view(4, 3)), lambda p, q: p.copy_(q.view(12).view(4, 3))),
    ],
)
def test_a_data_read_as_an_operand_under_no_grad_is_the_tensor_itself(old, new):
    """Inside the fix's `with torch.no_grad():` (the written `.data` already dropped), reading
    `q` instead of `q.data` leaves values, requires_grad, grad_fn, leaf-ness and versions the
    same: the operand is only read, and nothing computed from `q` records a graph."""
    p1, q1 = _params()
    p2, q2 = _params()
    with torch.no_grad():
        old(p1, q1)
        new(p2, q2)
    _same(_state(p1, q1), _state(p2, q2))
    # both still train the same way afterwards
    (p1 * q1).sum().backward()
    (p2 * q2).sum().backward()
    assert torch.equal(p1.grad, p2.grad) and torch.equal(q1.grad, q2.grad)


def test_the_operand_read_bumps_no_version_either_way():
    p, q = _params()
    y = (q * q).sum()  # saves q for backward
    with torch.no_grad():
        p.copy_(q)
    y.backward()  # q was only read: no "modified by an inplace operation"
    assert q._version == 0


def test_an_in_place_method_on_the_data_alias_is_not_the_same_as_on_the_tensor():
    """Why `q.data.t_()` keeps its `.data`: the alias changes shape, the tensor does not."""
    q = torch.nn.Parameter(torch.randn(2, 3))
    alias = q.data
    alias.t_()
    assert alias.shape == (3, 2) and q.shape == (2, 3)
    with torch.no_grad():
        q.t_()
    assert q.shape == (3, 2)
