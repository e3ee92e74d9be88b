"""PyTorch facts GF302 (eval-without-no-grad) relies on, checked on real torch."""

import pytest

torch = pytest.importorskip("torch")


def _net():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Dropout(0.5), torch.nn.BatchNorm1d(8))


def test_eval_does_not_disable_grad():
    net = _net()
    net.eval()
    out = net(torch.randn(6, 4))
    assert torch.is_grad_enabled()
    assert out.requires_grad and out.grad_fn is not None  # a graph was recorded


def test_no_grad_in_eval_mode_gives_the_same_values_without_a_graph():
    net, x = _net(), torch.randn(6, 4)
    net.eval()
    expected = net(x)
    with torch.no_grad():
        got = net(x)
    assert torch.equal(got, expected.detach())
    assert not got.requires_grad and got.grad_fn is None


def test_callers_can_no_longer_backpropagate_through_no_grad_outputs():
    """Why the fix is unsafe: an adversarial/perceptual-loss caller breaks."""
    net = _net().eval()
    x = torch.randn(6, 4, requires_grad=True)
    net(x).sum().backward()  # before the fix: grads reach the input
    assert x.grad is not None
    with torch.no_grad():
        out = net(x)
    with pytest.raises(RuntimeError, match="does not require grad"):
        out.sum().backward()


def test_eval_and_to_return_the_same_module_but_a_new_one_trains():
    """`model = model.eval()` / `model = model.to(dev)` keep the module (still in eval mode);
    `norm = Norm()` after `norm.eval()` binds a fresh module in training mode."""
    net = _net()
    assert net.eval() is net and net.to("cpu") is net and not net.training
    fresh = _net()
    assert fresh.training


def test_a_scripted_module_keeps_eval_mode():
    net = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5)).eval()
    scripted = torch.jit.script(net)
    assert not scripted.training
    x = torch.randn(3, 4)
    assert torch.equal(scripted(x), scripted(x))  # dropout off
