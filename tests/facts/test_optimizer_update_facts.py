"""PyTorch facts behind GF304's placement of ``no_grad`` in optimizer code (the update loop goes
under one ``no_grad``, ``step()`` is decorated with the closure under ``enable_grad``), checked
on real torch."""

import copy
import math

import pytest

torch = pytest.importorskip("torch")


def test_ops_on_tensors_that_need_no_grad_record_nothing_in_either_mode():
    """What an optimizer's update computes from ``p.grad``, ``p.data`` and its state: no
    history with or without ``no_grad``, and the same values."""
    p = torch.nn.Parameter(torch.tensor([1.0, -2.0, 3.0]))
    p.grad = torch.tensor([0.5, 0.25, -1.0])
    results = []
    for disabled in (False, True):
        state = torch.zeros_like(p.data)
        with torch.set_grad_enabled(not disabled):
            grad = p.grad.data
            state.mul_(0.9).add_(grad, alpha=0.1)
            denom = state.abs().sqrt().add_(1e-8)
            ratio = grad / denom
        assert not state.requires_grad and state.grad_fn is None and ratio.grad_fn is None
        results.append((state.clone(), ratio.clone()))
    assert all(torch.equal(a, b) for a, b in zip(*results))


def test_an_index_tensor_cannot_require_grad():
    """``p.grad.data[mask] = 0``: the index never carries a graph, only the value written can."""
    for index in (torch.tensor([True, False]), torch.tensor([0, 1])):
        with pytest.raises(RuntimeError, match="floating point"):
            index.requires_grad_()


def test_deepcopy_of_a_tensor_is_the_same_under_no_grad():
    p = torch.nn.Parameter(torch.tensor([1.0, 2.0]))
    plain = copy.deepcopy(p.data)
    with torch.no_grad():
        disabled = copy.deepcopy(p.data)
    assert torch.equal(plain, disabled) and not plain.requires_grad and not disabled.requires_grad
    assert copy.deepcopy(p).requires_grad
    with torch.no_grad():
        assert copy.deepcopy(p).requires_grad


class _Legacy(torch.optim.Optimizer):
    """A pre-1.5 style optimizer: updates through ``.data``, no grad-mode control."""

    def __init__(self, params, lr=0.1, betas=(0.9, 0.99)):
        super().__init__(params, dict(lr=lr, betas=betas))

    def step(self, closure=None):
        loss = None
        if closure is not None:
            loss = closure()
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = p.grad.data
                state = self.state[p]
                if len(state) == 0:
                    state["step"] = 0
                    state["avg"] = copy.deepcopy(p.data).zero_()
                state["step"] += 1
                avg = state["avg"]
                avg.mul_(group["betas"][0]).add_(grad, alpha=1 - group["betas"][0])
                scale = group["lr"] / (1 - group["betas"][0] ** state["step"])
                p.data.add_(avg, alpha=-scale * math.sqrt(1.0))
        return loss


class _Rewritten(_Legacy):
    """The same optimizer as GF304 rewrites it: ``@torch.no_grad()`` on ``step``, the closure
    under ``torch.enable_grad()``, ``.data`` dropped from the write."""

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = p.grad.data
                state = self.state[p]
                if len(state) == 0:
                    state["step"] = 0
                    state["avg"] = copy.deepcopy(p.data).zero_()
                state["step"] += 1
                avg = state["avg"]
                avg.mul_(group["betas"][0]).add_(grad, alpha=1 - group["betas"][0])
                scale = group["lr"] / (1 - group["betas"][0] ** state["step"])
                p.add_(avg, alpha=-scale * math.sqrt(1.0))
        return loss


def _train(optimizer_class):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    x, y = torch.randn(16, 4), torch.randn(16, 1)
    opt = optimizer_class(model.parameters())
    losses = []

    def closure():
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        return loss

    for _ in range(3):
        losses.append(opt.step(closure).item())
    states = [s["avg"] for s in opt.state.values()]
    return [p.detach().clone() for p in model.parameters()], losses, states, model


def test_a_decorated_step_with_the_closure_under_enable_grad_trains_the_same():
    before, losses_before, states_before, _ = _train(_Legacy)
    after, losses_after, states_after, model = _train(_Rewritten)
    assert all(torch.equal(a, b) for a, b in zip(before, after))
    assert losses_before == losses_after
    assert all(torch.equal(a, b) and not b.requires_grad for a, b in zip(states_before, states_after))
    assert all(p.is_leaf and p.requires_grad for p in model.parameters())
    assert torch.is_grad_enabled()  # the decorator restores the caller's mode
