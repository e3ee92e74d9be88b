"""PyTorch facts GF101 relies on, checked on real torch."""

import pytest

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("name", ["no_grad", "enable_grad", "inference_mode", "set_grad_enabled"])
def test_with_uncalled_grad_context_raises_type_error(name):
    manager = getattr(torch, name)
    with pytest.raises(TypeError, match="context manager"):
        with manager:  # the bug GF101 fixes
            pass


@pytest.mark.parametrize(
    "name, grad_inside, inference_inside",
    [("no_grad", False, False), ("enable_grad", True, False), ("inference_mode", False, True)],
)
@pytest.mark.parametrize("grad_before", [True, False])
def test_called_grad_context_works(name, grad_inside, inference_inside, grad_before):
    """The called form (GF101's rewrite) sets the mode inside and restores it after."""
    x = torch.ones(2, requires_grad=True)
    with torch.set_grad_enabled(grad_before):
        assert torch.is_grad_enabled() is grad_before
        with getattr(torch, name)():
            assert torch.is_grad_enabled() is grad_inside
            assert torch.is_inference_mode_enabled() is inference_inside
            y = x * 2
        assert torch.is_grad_enabled() is grad_before
        assert torch.is_inference_mode_enabled() is False
    assert (y.grad_fn is not None) is grad_inside
    assert torch.is_inference(y) is inference_inside


def test_bare_decorators_work_so_gf101_ignores_them():
    x = torch.ones(2, requires_grad=True)

    @torch.no_grad
    def no_grad_double(t):
        return t * 2

    @torch.enable_grad
    def enabled_double(t):
        return t * 2

    @torch.inference_mode
    def inference_double(t):
        return t * 2

    assert no_grad_double(x).grad_fn is None
    with torch.no_grad():
        assert enabled_double(x).grad_fn is not None
    assert torch.is_inference(inference_double(x))


def test_set_grad_enabled_without_mode_still_fails_when_called():
    # Why GF101 has no fix for set_grad_enabled: adding () alone is still wrong.
    with pytest.raises(TypeError):
        with torch.set_grad_enabled():
            pass


def test_the_verify_contract_expects_the_type_error_torch_really_raises():
    # `gradfix verify` runs the original and the fix; for GF101 the original's TypeError must
    # disappear and everything after it may change. The expected message is torch's own.
    from gradfix.rules import all_rules
    from gradfix.verify.contract import ExceptionFixed, resolve

    rule = next(r for r in all_rules() if r.code == "GF101")
    contract = resolve(rule)
    assert (contract.summary, contract.may_differ, contract.downstream) == ("the TypeError disappears", ("exception",), True)
    assert contract.expect == (ExceptionFixed("TypeError", "context manager"),)
    with pytest.raises(TypeError) as raised:
        with torch.no_grad:
            pass
    assert contract.expect[0].match in str(raised.value)


def test_the_finding_offers_to_add_the_call_parentheses():
    from gradfix import Settings, check

    [finding] = check("import torch\nwith torch.no_grad:\n    y = f(x)\n", settings=Settings(select=("GF101",)))
    assert (finding.span.line, finding.span.col, finding.span.end_col) == (2, 5, 18)
    assert finding.fix_title == "Call the context manager: add `()`"
