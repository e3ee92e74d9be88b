"""Torch facts GF102 (backward-in-no-grad) relies on, checked on real torch (CPU)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

NO_GRAD_FN = "does not require grad and does not have a grad_fn"


def _leaf():
    return torch.ones(3, requires_grad=True)


def test_backward_on_tensor_built_under_no_grad_raises():
    w = _leaf()
    with torch.no_grad():
        loss = (w * 2).sum()
    assert loss.grad_fn is None and not loss.requires_grad
    with pytest.raises(RuntimeError, match="element 0 of tensors " + NO_GRAD_FN):
        loss.backward()


@pytest.mark.parametrize(
    "region",
    [torch.no_grad, torch.inference_mode, lambda: torch.set_grad_enabled(False)],
    ids=["no_grad", "inference_mode", "set_grad_enabled_false"],
)
def test_every_grad_disabled_region_makes_results_grad_free(region):
    w = _leaf()
    with region():
        out = (w * 2).sum()
    assert out.grad_fn is None
    with pytest.raises(RuntimeError, match=NO_GRAD_FN):
        out.backward()


def test_decorated_function_results_are_grad_free():
    @torch.no_grad()
    def forward(w):
        return (w * 2).sum()

    with pytest.raises(RuntimeError, match=NO_GRAD_FN):
        forward(_leaf()).backward()


def test_autograd_grad_and_backward_raise_on_grad_free_outputs():
    w = _leaf()
    with torch.no_grad():
        score = (w * 2).sum()
    with pytest.raises(RuntimeError, match=NO_GRAD_FN):
        torch.autograd.grad(score, w)
    with pytest.raises(RuntimeError, match=NO_GRAD_FN):
        torch.autograd.backward([score])
    # One grad-free output among several is enough.
    with pytest.raises(RuntimeError, match="element 1 of tensors " + NO_GRAD_FN):
        torch.autograd.grad([(w * 3).sum(), score], w)


def test_retain_grad_under_no_grad_raises():
    w = _leaf()
    with torch.no_grad():
        h = w * 2
        with pytest.raises(RuntimeError, match="can't retain_grad on Tensor that has requires_grad=False"):
            h.retain_grad()
    with pytest.raises(RuntimeError, match="can't retain_grad on Tensor that has requires_grad=False"):
        h.retain_grad()


def test_backward_inside_no_grad_on_a_graph_built_before_works():
    """The look-alike GF102 must not report."""
    w = _leaf()
    loss = (w * 3).sum()
    with torch.no_grad():
        loss.backward()
    assert torch.equal(w.grad, torch.full((3,), 3.0))


def test_reassigned_name_and_requires_grad_leaf_are_not_grad_free():
    w = _leaf()
    with torch.no_grad():
        h = w * 2
    h = w * 2  # re-assigned from a grad-enabled computation
    h.retain_grad()
    with torch.no_grad():
        g = w * 2
    g.requires_grad_()
    g.retain_grad()
    assert h.grad_fn is not None and g.requires_grad


def test_views_and_requires_grad_factories_keep_requiring_grad_under_no_grad():
    """Why the analysis treats views and `requires_grad=True` factories as possibly differentiable."""
    w = torch.ones(2, 2, requires_grad=True)
    with torch.no_grad():
        view = w.view(-1)
        item = w[0]
        same = w.float()
        fresh = torch.zeros(2, requires_grad=True)
        marked = torch.zeros(2).requires_grad_()
        reduced = w.sum()
    assert view.requires_grad and item.requires_grad and same is w
    assert fresh.requires_grad and marked.requires_grad
    assert not reduced.requires_grad


def test_in_place_update_under_no_grad_keeps_history():
    """`loss += x` inside no_grad does not make a grad-carrying `loss` grad-free."""
    w = _leaf()
    loss = (w * 2).sum()
    with torch.no_grad():
        loss += 1
    assert loss.requires_grad and loss.grad_fn is not None
    loss.backward()


def test_enable_grad_inside_no_grad_records_a_graph():
    w = _leaf()
    with torch.no_grad():
        with torch.enable_grad():
            out = (w * 2).sum()
        assert not torch.is_grad_enabled()  # back to the outer no_grad
    assert torch.is_grad_enabled()
    assert out.requires_grad and out.grad_fn is not None
    (grad,) = torch.autograd.grad(out, w)
    assert torch.equal(grad, torch.full((3,), 2.0))
