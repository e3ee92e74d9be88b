"""PyTorch facts GF202 (nested-toggle-hack) relies on, checked on real torch."""

import pytest

torch = pytest.importorskip("torch")


def test_nested_enabling_with_records_a_graph():
    # The article's §3.1 claim ("the inner set_grad_enabled(True) cannot override the outer
    # False") is false: the inner block records graphs, so the §3.2 toggle hack is never needed.
    with torch.set_grad_enabled(False):
        with torch.set_grad_enabled(True):
            x = torch.randn(3, requires_grad=True)
            y = x * 2
        assert torch.is_grad_enabled() is False
    assert y.grad_fn is not None
    with torch.no_grad():
        with torch.enable_grad():
            z = x * 3
    assert z.grad_fn is not None


def test_toggle_hack_works_and_the_outer_with_restores_the_mode():
    assert torch.is_grad_enabled()
    with torch.set_grad_enabled(False):
        torch.set_grad_enabled(True)
        x = torch.randn(3, requires_grad=True)
        y = x * 2
        torch.set_grad_enabled(False)
        assert torch.is_grad_enabled() is False
    assert y.grad_fn is not None
    assert torch.is_grad_enabled()


def test_outer_with_restores_the_mode_after_an_exception_inside_the_toggle_pair():
    assert torch.is_grad_enabled()
    with pytest.raises(ZeroDivisionError):
        with torch.no_grad():
            torch.set_grad_enabled(True)
            1 / 0
            torch.set_grad_enabled(False)  # never reached
    assert torch.is_grad_enabled()
    with torch.no_grad():
        with pytest.raises(ZeroDivisionError):
            with torch.no_grad():
                torch.set_grad_enabled(True)
                1 / 0
        assert torch.is_grad_enabled() is False  # restored to the outer no_grad's mode


def _toggle_hack(x):
    with torch.no_grad():
        torch.set_grad_enabled(True)
        y = (x * x).sum()
        torch.set_grad_enabled(False)
        after = torch.is_grad_enabled()
    return y, after


def _block_style(x):
    with torch.no_grad():
        with torch.enable_grad():
            y = (x * x).sum()
        after = torch.is_grad_enabled()
    return y, after


def _function_style(x):
    with torch.no_grad():

        @torch.enable_grad()
        def _with_grad(x):
            y = (x * x).sum()
            return y

        y = _with_grad(x)
        after = torch.is_grad_enabled()
    return y, after


@pytest.mark.parametrize("rewrite", [_block_style, _function_style])
def test_rewrites_give_identical_values_grads_and_mode(rewrite):
    x1 = torch.arange(4.0, requires_grad=True)
    x2 = torch.arange(4.0, requires_grad=True)
    y1, after1 = _toggle_hack(x1)
    y2, after2 = rewrite(x2)
    assert after1 is after2 is False
    assert torch.equal(y1, y2)
    assert (y1.grad_fn is None) == (y2.grad_fn is None) == False  # noqa: E712
    y1.backward()
    y2.backward()
    assert torch.equal(x1.grad, x2.grad)
    assert torch.is_grad_enabled()


def test_toggle_and_enable_grad_agree_inside_inference_mode():
    # GF202 also treats inference_mode as grad-disabled: the toggle and enable_grad() set the
    # same grad-mode flag there, so the rewrite keeps whatever torch does (inference tensors).
    x = torch.ones(2, requires_grad=True)
    with torch.inference_mode():
        torch.set_grad_enabled(True)
        a = x * 2
        mode_a = torch.is_grad_enabled()
        torch.set_grad_enabled(False)
        with torch.enable_grad():
            b = x * 2
            mode_b = torch.is_grad_enabled()
        after = torch.is_grad_enabled()
    assert mode_a is mode_b is True
    assert after is False
    assert torch.is_inference(a) == torch.is_inference(b)
    assert (a.grad_fn is None) == (b.grad_fn is None)
    assert a.requires_grad == b.requires_grad
