"""PyTorch facts GF301 (prefer-inference-mode) relies on, checked on real torch."""

import pytest

torch = pytest.importorskip("torch")


def _net():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))


def test_inference_mode_gives_the_same_outputs_as_no_grad():
    net, x = _net(), torch.randn(5, 4)
    with torch.no_grad():
        expected = net(x)
    with torch.inference_mode():
        got = net(x)
    assert torch.equal(got, expected)
    assert got.is_inference() and not expected.is_inference()


def test_no_grad_outputs_can_feed_training_later():
    net, head = _net(), torch.nn.Linear(2, 1)
    with torch.no_grad():
        feats = net(torch.randn(5, 4))
    head(feats).sum().backward()  # works: feats is a normal tensor
    assert head.weight.grad is not None


def test_inference_tensors_cannot_be_saved_for_backward():
    """Why the fix is unsafe, and why forward methods and training callers are left alone."""
    net, head = _net(), torch.nn.Linear(2, 1)
    with torch.inference_mode():
        feats = net(torch.randn(5, 4))
    with pytest.raises(RuntimeError, match="Inference tensors cannot be saved for backward"):
        head(feats).sum().backward()


def test_inference_tensors_cannot_be_updated_in_place_outside_inference_mode():
    with torch.inference_mode():
        out = torch.ones(3) * 2
    with pytest.raises(RuntimeError, match="[Ii]nplace update to inference tensor outside InferenceMode"):
        out.add_(1)


def test_every_spelling_the_fix_writes_exists():
    # `T.no_grad` -> `T.inference_mode`, also under torch.autograd(.grad_mode).
    assert torch.autograd.inference_mode is torch.inference_mode
    assert torch.autograd.grad_mode.inference_mode is torch.inference_mode


@pytest.mark.parametrize("called", [True, False])
def test_inference_mode_works_as_decorator_called_or_bare(called):
    decorator = torch.inference_mode() if called else torch.inference_mode

    @decorator
    def predict(t):
        return t * 2

    out = predict(torch.ones(2, requires_grad=True))
    assert out.is_inference() and not out.requires_grad
