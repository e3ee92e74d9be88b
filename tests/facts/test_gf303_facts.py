"""PyTorch facts GF303 (loss-accumulates-graph) relies on, checked on real torch."""

import pytest

torch = pytest.importorskip("torch")


def _graph_size(fn):
    """Autograd nodes reachable from ``fn``."""
    seen, todo = set(), [fn]
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        todo.extend(next_fn for next_fn, _ in node.next_functions)
    return len(seen)


def _train(steps, accumulate):
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    acc = 0
    for _ in range(steps):
        loss = model(torch.randn(4, 3)).pow(2).mean()
        loss.backward()
        acc = accumulate(acc, loss)
    return acc


def _plus(acc, loss):
    acc += loss
    return acc


def _plus_detached(acc, loss):
    acc += loss.detach()
    return acc


def test_accumulating_the_loss_keeps_every_step_graph_alive():
    short, long = _train(2, _plus), _train(6, _plus)
    assert short.grad_fn is not None and long.grad_fn is not None
    assert _graph_size(long.grad_fn) > _graph_size(short.grad_fn)  # grows with the steps


def test_detach_gives_the_same_value_bitwise_without_a_graph():
    with_graph, detached = _train(5, _plus), _train(5, _plus_detached)
    assert torch.equal(detached, with_graph.detach())
    assert detached.dtype == with_graph.dtype and detached.device == with_graph.device
    assert detached.grad_fn is None and not detached.requires_grad
    assert isinstance(detached, torch.Tensor)  # the type is kept


def test_item_style_changes_the_type():
    """Why `style = "item"` is unsafe: the accumulator becomes a Python float."""
    acc = _train(3, lambda acc, loss: acc + loss.item())
    assert isinstance(acc, float)
    assert acc == pytest.approx(_train(3, _plus).item())


def test_intentional_accumulation_backpropagates_the_sum():
    """The look-alike GF303 must not touch: the sum is what is differentiated."""
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    acc = 0
    for _ in range(3):
        acc += model(torch.randn(4, 3)).mean()
    acc.backward()
    assert model.weight.grad is not None
