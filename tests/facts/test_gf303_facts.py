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


# What the rule reports and how it fixes it: behaviour pinned by mutation testing (scripts/mutate.py).

import textwrap  # noqa: E402
from pathlib import Path  # noqa: E402

from gradfix import Settings, check, fix  # noqa: E402


def _gf303(code: str, **options) -> list:
    settings = Settings(select=("GF303",), unsafe_fixes=True, rule_options={"GF303": options})
    return check(textwrap.dedent(code), settings=settings)


def _where(findings) -> list[str]:
    return [f"{f.span.line}:{f.span.col} {f.message}" for f in findings]


def test_a_backward_on_every_pass_is_reported_even_when_the_loss_starts_as_a_float():
    # `loss = 0.0` before the loop does not matter: every `total += loss` follows a backward.
    code = """
        def fit(model, loader):
            total = 0
            loss = 0.0
            for x in loader:
                loss = model(x)
                loss.backward()
                total += loss
        """
    assert _where(_gf303(code)) == ["8:8 `total` accumulates `loss` with its graph: every step's graph stays alive"]


def test_a_conditional_backward_is_reported_when_the_loss_is_never_a_plain_number():
    code = """
        def fit(model, loader, crit):
            total = 0
            for x, y in loader:
                loss = crit(model(x), y)
                if y is not None:
                    loss.backward()
                total += loss
        """
    assert _where(_gf303(code)) == ["8:8 `total` accumulates `loss` with its graph: every step's graph stays alive"]
    assert "total += loss.detach()" in fix(textwrap.dedent(code), settings=Settings(select=("GF303",)))


def test_the_fix_title_names_the_rewrite_of_each_style():
    code = """
        def fit(model, loader):
            total = 0
            for x in loader:
                loss = model(x)
                loss.backward()
                total += loss
        """
    (detach,) = _gf303(code)
    assert detach.fix_title == "Write `loss.detach()` (same value, no graph)"
    assert detach.fix.value == "safe"
    (item,) = _gf303(code, style="item")
    assert item.fix_title == "Write `loss.item()` (`total` becomes a Python float)"
    assert item.fix.value == "unsafe"


def _observed(returned, requires_grad):
    """One `train_epoch` call as the verify harness observes it."""
    call = {
        "index": 0, "name": "train_epoch", "returned": {"": returned}, "requires_grad": {"": requires_grad},
        "inference": {}, "numbers": {"": float(returned)}, "grad_enabled": True, "inference_mode": False,
        "training": {"model": True}, "state": {}, "forwards": (),
    }
    return {"calls": [call], "initial_state": {}, "final_state": {}, "grads": {}, "files": {}, "exception": None,
            "grad_enabled_end": True}


def test_the_contract_confirms_a_detached_sum_on_the_shipped_scenario_and_rejects_a_kept_graph():
    from gradfix.rules import rule_by_code
    from gradfix.verify.harness import MISMATCH, judge
    from gradfix.verify.contract import INTENDED_VERDICT
    from gradfix.verify.scenario import read_scenario

    scenario = read_scenario(Path(__file__).parents[2] / "fixtures" / "gf303_rnn_lm_running_loss.py")
    rule = rule_by_code("GF303")
    total = torch.tensor(2.5)
    before = _observed(total, True)
    detach = {"style": "detach"}
    assert judge(scenario, rule, detach, before, _observed(total.clone(), False), "cpu").verdict == INTENDED_VERDICT
    kept = judge(scenario, rule, detach, before, _observed(total.clone(), True), "cpu")
    assert kept.verdict == MISMATCH and "train_epoch returned requires grad" in kept.detail
    # The verify report's contract column says what each style promises.
    assert all(contract.summary for contract in rule.contract().values())


@pytest.mark.parametrize("backward", ["(loss / 4).backward()", "(loss * 2).backward()", "scaler.scale(loss).backward()"])
def test_item_style_fixes_a_scaled_scalar_loss(backward):
    code = f"""
        def fit(model, loader, scaler):
            total = 0
            for x in loader:
                loss = model(x)
                {backward}
                total += loss
        """
    (finding,) = _gf303(code, style="item")
    assert finding.fix.value == "unsafe" and "may not be a scalar" not in finding.message
    fixed = fix(textwrap.dedent(code), settings=Settings(select=("GF303",), unsafe_fixes=True, rule_options={"GF303": {"style": "item"}}))
    assert "total += loss.item()\n" in fixed


def test_the_loss_may_come_first_in_the_sum():
    code = """
        def fit(model, loader):
            total = 0
            for x in loader:
                loss = model(x)
                loss.backward()
                total = loss + total
                shifted = loss + offset
        """
    assert _where(_gf303(code)) == ["7:8 `total` accumulates `loss` with its graph: every step's graph stays alive"]
    assert "total = loss.detach() + total\n" in fix(textwrap.dedent(code), settings=Settings(select=("GF303",)))


@pytest.mark.parametrize("use", ["avg.backward()", "(avg * 2).backward()", "torch.autograd.grad(avg, params)",
                                 "scaled = avg * 2\n    scaled.backward()"])
def test_no_finding_when_the_sum_is_backpropagated_through_an_alias(use):
    code = f"""
import torch
def fit(model, loader, params):
    total = 0
    for x in loader:
        loss = model(x)
        loss.backward()
        total += loss
    avg = total / len(loader)
    {use}
"""
    assert _gf303(code) == []


def test_a_backward_and_the_sum_in_the_same_else_arm_are_reported():
    code = """
        def fit(model, loader, crit):
            total = 0
            loss = None
            for x, y in loader:
                if y is None:
                    continue
                else:
                    loss = crit(model(x), y)
                    loss.backward()
                    total += loss
        """
    assert _where(_gf303(code)) == ["11:12 `total` accumulates `loss` with its graph: every step's graph stays alive"]


def test_an_average_of_the_sum_that_is_only_returned_does_not_hide_the_finding():
    code = """
        def fit(model, loader):
            total = 0
            for x in loader:
                loss = model(x)
                loss.backward()
                total += loss
            avg = total / len(loader)
            return avg
        """
    assert _where(_gf303(code)) == ["7:8 `total` accumulates `loss` with its graph: every step's graph stays alive"]
