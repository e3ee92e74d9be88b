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


# -- the finding itself (mutation testing): span, message, deferral to GF103, verify contract ----

def _gf102(code, select=("GF102",)):
    from gradfix import Settings, check

    return [(f.code, f.span.line, f.span.col, f.span.end_col, f.message) for f in check(code, settings=Settings(select=select))]


def test_two_disabled_regions_are_both_named():
    code = (
        "import torch\ndef f(model, x):\n    with torch.no_grad():\n        a = model(x)\n    with torch.inference_mode():\n"
        "        b = model(x)\n    (a + b).retain_grad()\n"
    )
    assert _gf102(code) == [
        ("GF102", 7, 4, 25, "`a + b` was computed under no_grad (lines 3, 5), so it has no grad_fn: retain_grad() raises RuntimeError")
    ]


@pytest.mark.parametrize("select", [("GF102",), ("GF102", "GF103")], ids=["alone", "with_GF103"])
def test_a_long_tensor_is_shortened_and_retain_grad_is_not_left_to_gf103(select):
    # GF103 is about backward only: GF102 keeps a retain_grad() on a block's result even with GF103 on.
    code = "import torch\ndef f(model, x):\n    with torch.no_grad():\n        h = model(x)\n    (h.abs().mean() + h.pow(2).sum()).retain_grad()\n"
    assert _gf102(code, select) == [
        ("GF102", 5, 4, 51, "`h.abs().mean() + h.pow(2).s...` was computed under no_grad (line 3), so it has no grad_fn: retain_grad() raises RuntimeError")
    ]


_OVERBROAD = (
    "import torch\ndef step(model, x, y, crit):\n    with torch.no_grad():\n        h = model.enc(x)\n        out = model.dec(h)\n"
    "    loss = crit(out, y)\n    loss.backward()\n"
)


def test_an_overbroad_block_is_left_to_gf103_only_when_gf103_runs():
    assert _gf102(_OVERBROAD) == [
        ("GF102", 7, 4, 19, "`loss` was computed under no_grad (line 3), so it has no grad_fn: backward() raises RuntimeError")
    ]
    assert [f[0] for f in _gf102(_OVERBROAD, ("GF102", "GF103"))] == ["GF103"]


def _raised(fn):
    try:
        fn()
    except RuntimeError as exc:
        return {"type": "RuntimeError", "message": str(exc)}
    raise AssertionError("did not raise")


def test_the_verify_contract_matches_the_real_errors_and_no_other():
    from gradfix.rules.gf102_backward_in_no_grad import BackwardInNoGrad
    from gradfix.verify.contract import _exc_matches

    [raises] = BackwardInNoGrad.contract().expect
    w = _leaf()
    with torch.no_grad():
        free = (w * 2).sum()
    with torch.inference_mode():
        inference = torch.ones(3)
    real = [
        _raised(free.backward),
        _raised(free.retain_grad),
        _raised(lambda: (inference * w).sum().backward()),
    ]
    for exc in real:
        assert _exc_matches(exc, raises.type, raises.match), exc
    other = _raised(lambda: torch.ones(2, 3) @ torch.ones(2, 3))
    assert not _exc_matches(other, raises.type, raises.match)


def test_a_file_defined_no_grad_wrapper_is_named_no_grad_at_the_decorator():
    code = (
        "import torch\ndef nograd(f):\n    def run(*a):\n        with torch.no_grad():\n            return f(*a)\n    return run\n"
        "@nograd\ndef forward(model, x):\n    return model(x)\ndef train(model, x):\n    out = forward(model, x)\n    out.sum().retain_grad()\n"
    )
    assert _gf102(code) == [
        ("GF102", 12, 4, 27, "`out.sum()` was computed under no_grad (line 7), so it has no grad_fn: retain_grad() raises RuntimeError")
    ]


def test_an_enable_grad_block_inside_no_grad_is_not_named_as_a_cause():
    code = (
        "import torch\ndef f(model, x):\n    with torch.no_grad():\n        with torch.enable_grad():\n            a = model(x)\n"
        "        b = a * 2\n    b.retain_grad()\n"
    )
    assert _gf102(code) == [
        ("GF102", 7, 4, 19, "`b` was computed under no_grad (line 3), so it has no grad_fn: retain_grad() raises RuntimeError")
    ]


def test_a_long_helper_name_is_shortened_in_the_cross_function_message():
    code = (
        "import torch\n@torch.no_grad()\ndef forward_pass(model, x):\n    return model(x)\n\n"
        "def backward_pass_for_the_optimizer(loss, opt):\n    loss.backward()\n    opt.step()\n\n"
        "def train(model, loader, crit, opt):\n    for x, y in loader:\n        out = forward_pass(model, x)\n"
        "        backward_pass_for_the_optimizer(crit(out, y), opt)\n"
    )
    assert _gf102(code) == [
        (
            "GF102", 13, 8, 58,
            "`crit(out, y)` was computed under no_grad (line 2); `backward_pass_for_the_optim...()` differentiates it at line 7: "
            "backward() raises RuntimeError",
        )
    ]


def test_only_the_disabling_item_of_a_with_is_named():
    # `set_grad_enabled(mode)` in the same `with` is no grad-disabled region: the message names no_grad.
    code = "import torch\ndef f(model, x, mode):\n    with torch.set_grad_enabled(mode), torch.no_grad():\n        h = model(x)\n    h.retain_grad()\n"
    assert _gf102(code) == [
        ("GF102", 5, 4, 19, "`h` was computed under no_grad (line 3), so it has no grad_fn: retain_grad() raises RuntimeError")
    ]
