"""Torch facts GF403 (data-index-zero) relies on, checked on real torch (CPU)."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
OUT, TARGET = torch.randn(4, 5), torch.tensor([0, 1, 2, 3])


def _scalars():
    x = torch.randn(4, 5, requires_grad=True)
    yield nn.CrossEntropyLoss()(OUT, TARGET)
    yield F.nll_loss(F.log_softmax(OUT, 1), TARGET)
    yield F.mse_loss(x, torch.zeros(4, 5))
    yield F.cross_entropy(OUT, TARGET)
    yield F.binary_cross_entropy(torch.sigmoid(OUT), torch.rand(4, 5))
    yield F.binary_cross_entropy_with_logits(OUT, torch.rand(4, 5))
    yield F.kl_div(F.log_softmax(OUT, 1), F.softmax(OUT, 1), reduction="batchmean")
    yield x.sum()
    yield x.mean()
    yield torch.sum(x)
    yield torch.mean(x)
    yield x.sum(dtype=torch.float64)
    yield F.mse_loss(x, torch.zeros(4, 5)) + 0.5 * x.sum()


@pytest.mark.parametrize("value", list(_scalars()), ids=lambda v: type(v.grad_fn).__name__)
def test_losses_and_full_reductions_are_0_dim(value):
    assert value.dim() == 0
    with pytest.raises(IndexError, match="invalid index of a 0-dim tensor"):
        value.data[0]
    item = value.item()
    assert isinstance(item, float) and item == value.detach().double().item()


def test_kl_div_default_reduction_is_0_dim():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # reduction="mean" warns about batchmean
        assert F.kl_div(F.log_softmax(OUT, 1), F.softmax(OUT, 1)).dim() == 0


def test_legacy_size_average_false_is_still_0_dim():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # size_average is deprecated
        loss = F.nll_loss(F.log_softmax(OUT, 1), TARGET, size_average=False)
    assert loss.dim() == 0


def test_unreduced_losses_and_dim_reductions_are_indexable():
    # Why these are not flagged: `.data[0]` is a real first element there.
    per_sample = [
        F.cross_entropy(OUT, TARGET, reduction="none"),
        nn.NLLLoss(reduction="none")(F.log_softmax(OUT, 1), TARGET),
        OUT.sum(1),
        OUT.mean(dim=0),
    ]
    for value in per_sample:
        assert value.dim() == 1 and value.data[0].dim() == 0
        with pytest.raises(RuntimeError):
            value.item()  # more than one element


def test_legacy_reduce_false_keeps_one_value_per_sample():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert nn.CrossEntropyLoss(reduce=False)(OUT, TARGET).dim() == 1


def test_accumulator_built_with_a_shape_keeps_it():
    # Why `loss = torch.zeros(1); loss += crit(...)` is not flagged: the sum broadcasts to
    # shape (1,), `.data[0]` works today and returns a tensor, `.item()` a Python float.
    loss = torch.zeros(1)
    loss += nn.MSELoss()(torch.ones(3), torch.zeros(3))
    assert loss.shape == (1,)
    assert isinstance(loss.data[0], torch.Tensor) and loss.data[0].dim() == 0
    assert type(loss.item()) is float
    pair = torch.zeros(2)  # `[sum, count]` accumulators: `.item()` would raise
    with pytest.raises(RuntimeError):
        pair.item()


# How `gradfix verify` judges the fix: behaviour pinned by mutation testing (scripts/mutate.py).


def _run(exception, calls):
    """What the verify harness observes of a run that made ``calls`` probe calls."""
    call = {"name": "train", "returned": {}, "requires_grad": {}, "inference": {}, "numbers": {}, "grad_enabled": True,
            "inference_mode": False, "training": {"model": True}, "state": {}, "forwards": ()}
    return {"calls": [{**call, "index": i} for i in range(calls)], "initial_state": {}, "final_state": {}, "grads": {},
            "files": {}, "exception": exception, "grad_enabled_end": True}


def test_the_contract_wants_the_0_dim_index_error_gone_and_nothing_else():
    from pathlib import Path

    from gradfix.rules import rule_by_code
    from gradfix.verify.contract import INTENDED_VERDICT
    from gradfix.verify.harness import MISMATCH, judge
    from gradfix.verify.scenario import read_scenario

    scenario = read_scenario(Path(__file__).parents[2] / "fixtures" / "gf403_loss_data_index.py")
    rule = rule_by_code("GF403")
    raised = {"type": "IndexError", "message": "invalid index of a 0-dim tensor. Use `tensor.item()`", "call": "train"}
    fixed = judge(scenario, rule, {}, _run(raised, 1), _run(None, 3), "cpu")
    assert fixed.verdict == INTENDED_VERDICT and fixed.detail.startswith("the IndexError disappears")
    other = {"type": "RuntimeError", "message": "invalid index of a 0-dim tensor", "call": "train"}
    assert judge(scenario, rule, {}, _run(other, 1), _run(None, 3), "cpu").verdict == MISMATCH
    assert judge(scenario, rule, {}, _run(raised, 1), _run(raised, 1), "cpu").verdict == MISMATCH
    assert rule.contract().summary == "the IndexError disappears"  # the verify report's contract column


def _gf403(code: str) -> list[str]:
    import textwrap

    from gradfix import Settings, check

    return [f"{f.span.line}:{f.span.col} {f.message}" for f in check(textwrap.dedent(code), settings=Settings(select=("GF403",)))]


def test_a_criterion_built_unreduced_in_the_file_is_indexed_on_purpose():
    assert _gf403(
        """
        import torch.nn as nn
        crit = nn.MSELoss(reduction='none')
        print(crit(a, b).data[0])
        print(criterion(a, b).data[0])
        print(crit_per_sample(a, b).data[0])
        """
    ) == ["5:6 `criterion(a, b).data[0]` raises IndexError: losses and full reductions are 0-dim since PyTorch 0.4"]


@pytest.mark.parametrize("reduction", ["out.mean(1)", "out.sum(dim=0)", "torch.sum(out, 1)", "torch.mean(out, 0)",
                                       "F.mse_loss(a, b, reduction=how)", "crit(a, b).view(1)"])
def test_a_loss_reduced_over_a_dimension_or_of_unknown_reduction_is_not_reported(reduction):
    assert _gf403(
        f"""
        import torch
        import torch.nn.functional as F
        loss = {reduction}
        print(loss.data[0])
        """
    ) == []


@pytest.mark.parametrize("reduction", ["out.mean()", "torch.sum(out)", "torch.mean(out, dtype=torch.float64)",
                                       "F.mse_loss(a, b, reduction='mean')"])
def test_a_full_reduction_is_reported(reduction):
    assert _gf403(
        f"""
        import torch
        import torch.nn.functional as F
        value = {reduction}
        print(value.data[0])
        """
    ) == ["5:6 `value.data[0]` raises IndexError: losses and full reductions are 0-dim since PyTorch 0.4"]


def test_bases_the_rule_cannot_judge_are_left_alone_without_failing():
    # `Variable()` (no argument) is no shaped constructor; `out[0]` is a subscript, not a sum.
    assert _gf403(
        """
        loss = Variable()
        loss += crit(a, b)
        print(loss.data[0])
        print(out[0].data[0])
        print((loss ** 2).data[0])
        """
    ) == ["4:6 `loss.data[0]` raises IndexError: losses and full reductions are 0-dim since PyTorch 0.4"]
