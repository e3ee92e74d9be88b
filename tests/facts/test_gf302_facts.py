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


def _call_with_args(module, method):
    """Call the nn.Module method ``method`` with arguments it takes on a CPU-only machine."""
    args = {"to": ("cpu",), "train": (False,), "requires_grad_": (True,)}.get(method, ())
    return getattr(module, method)(*args)


def test_the_module_returning_methods_gradfix_strips_return_the_module_itself():
    """`model.to(dev)(x)`, `model.float()(x)`, `model.eval()(x)` run `model`'s forward: every
    method in vocabulary.MODULE_RETURNS_SELF hands back the very module (``cuda`` by its
    source: it returns ``self._apply(..)``, which returns ``self``)."""
    import inspect

    from gradfix.analysis.vocabulary import MODULE_RETURNS_SELF

    for method in sorted(MODULE_RETURNS_SELF):
        net = _net()
        if method == "cuda" and not torch.cuda.is_available():
            assert inspect.getsource(torch.nn.Module.cuda).rstrip().endswith("return self._apply(lambda t: t.cuda(device))")
            assert inspect.getsource(torch.nn.Module._apply).rstrip().endswith("return self")
            continue
        assert _call_with_args(net, method) is net, method
    # A tensor's `.to()`/`.float()` is a tensor, which cannot be called: a call of such a chain is a module's.
    t = torch.randn(2)
    assert not callable(t.to("cpu")) and not callable(t.float())
    assert callable(_net().to("cpu"))


def test_forward_and_a_moved_module_record_a_graph_in_eval_mode_like_a_plain_call():
    """`model.forward(x)` and `model.to(dev)(x)` are evaluations as `model(x)` is: eval mode
    still records a graph, and `no_grad` gives the same values without one."""
    net, x = _net(), torch.randn(6, 4)
    net.eval()
    for out in (net.forward(x), net.to("cpu")(x), net.float()(x), net.eval()(x)):
        assert out.requires_grad and out.grad_fn is not None
        assert torch.equal(out, net(x))
    with torch.no_grad():
        quiet = net.to("cpu")(x)
    assert not quiet.requires_grad and torch.equal(quiet, net(x).detach())
    fresh = _net()
    fresh.eval()(x)  # `.eval()(x)` switches the module before its forward runs, for good
    assert not fresh.training


@pytest.mark.parametrize("freeze", ["requires_grad_", "loop"])
def test_a_frozen_module_records_no_graph_unless_its_input_requires_grad(freeze):
    net = _net()
    if freeze == "requires_grad_":
        net.requires_grad_(False)
    else:
        for p in net.parameters():
            p.requires_grad = False
    net.eval()
    out = net(torch.randn(6, 4))
    assert not out.requires_grad and out.grad_fn is None  # nothing for no_grad to save
    x = torch.randn(6, 4, requires_grad=True)  # an adversarial attack's input: the graph is wanted
    assert net(x).grad_fn is not None
