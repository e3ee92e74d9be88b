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


def test_modules_built_under_inference_mode_have_inference_weights():
    """Why functions that build modules (timm's `fuse`) or copy a model (an EMA teacher) are
    left alone: the new weights can be neither trained nor updated in place later."""
    with torch.inference_mode():
        fused = torch.nn.Linear(2, 2)
    assert fused.weight.is_inference()
    with pytest.raises(RuntimeError, match="Inference tensors cannot be saved for backward"):
        fused(torch.randn(1, 2, requires_grad=True)).sum().backward()
    with torch.no_grad(), pytest.raises(RuntimeError, match="[Ii]nplace update to inference tensor"):
        fused.weight.mul_(0.999)  # an EMA step on the copy


def test_in_place_init_of_a_normal_tensor_keeps_it_normal():
    """`trunc_normal_(w)` under inference mode gains nothing: `w` is not an inference tensor."""
    weight = torch.nn.Parameter(torch.empty(3))
    with torch.inference_mode():
        weight.uniform_()
    assert not weight.is_inference()


def test_inference_mode_integer_targets_break_a_loss():
    """Generated tokens or pseudo-labels reused as targets in training fail too."""
    with torch.inference_mode():
        targets = torch.tensor([0, 2])
    logits = torch.randn(2, 3, requires_grad=True)
    with pytest.raises(RuntimeError, match="Inference tensors cannot be saved for backward"):
        torch.nn.functional.cross_entropy(logits, targets).backward()


# What the rule reports: behaviour pinned by mutation testing (scripts/mutate.py).

import textwrap  # noqa: E402

from gradfix import Settings, check, fix  # noqa: E402

_SETTINGS = Settings(select=("GF301",), unsafe_fixes=True)


def _gf301(code: str) -> list[str]:
    return [f"{f.span.line}:{f.span.col}-{f.span.end_col} {f.message}" for f in check(textwrap.dedent(code), settings=_SETTINGS)]


@pytest.mark.parametrize("method", ["append", "extend", "insert", "update", "setdefault", "add", "put", "__setitem__", "copy_"])
def test_a_function_that_fills_a_container_it_was_given_is_left_alone(method):
    # The tensors outlive the call through `outs`, not through the return value.
    assert _gf301(
        f"""
        import torch
        @torch.no_grad()
        def predict(model, x, outs):
            outs.{method}(model(x))
            return outs
        """
    ) == []
    # Filling its own local list is fine.
    assert _gf301(
        f"""
        import torch
        @torch.no_grad()
        def predict(model, x):
            outs = Store()
            outs.{method}(model(x))
            return outs
        """
    ) == ["3:1-16 `predict` only runs inference under `torch.no_grad()`: `torch.inference_mode()` is faster"]


@pytest.mark.parametrize("ret", ["y.item()", "y.tolist()", "y.numpy()", "float(y)", "int(y)", "bool(y)"])
def test_any_name_is_reported_when_only_python_values_come_back(ret):
    code = f"""
        import torch
        class Agent:
            @torch.no_grad()
            def act(self, state):
                if state is None:
                    return
                y = self.net(state).argmax()
                return {ret}
        """
    assert _gf301(code) == ["4:5-20 `act` only runs inference under `torch.no_grad()`: `torch.inference_mode()` is faster"]
    assert "@torch.inference_mode()" in fix(textwrap.dedent(code), settings=_SETTINGS)


def test_a_tensor_returned_next_to_python_values_needs_an_inference_name():
    assert _gf301(
        """
        import torch
        @torch.no_grad()
        def act(net, state):
            if state is None:
                return net(state)
            return net(state).item()
        """
    ) == []


def test_a_constant_result_still_counts_as_returning_outputs():
    # Only `return` / `return None` mean "no outputs" (an in-place update).
    assert _gf301(
        """
        import torch
        @torch.no_grad()
        def validate(model, loader):
            for x in loader:
                log(model(x))
            return True
        """
    ) == ["3:1-16 `validate` only runs inference under `torch.no_grad()`: `torch.inference_mode()` is faster"]


def test_no_return_value_means_no_finding_but_a_generator_yields_outputs():
    assert _gf301(
        """
        import torch
        @torch.no_grad()
        def evaluate(model, loader):
            for x in loader:
                log(model(x))
            return None
        """
    ) == []
    assert _gf301(
        """
        import torch
        @torch.no_grad()
        def predict(model, loader):
            for x in loader:
                yield model(x)
        """
    ) == ["3:1-16 `predict` only runs inference under `torch.no_grad()`: `torch.inference_mode()` is faster"]


def test_camel_case_names_are_split_into_words():
    assert _gf301(
        """
        import torch
        @torch.no_grad()
        def evalModel(model, x):
            return model(x)
        """
    ) == ["3:1-16 `evalModel` only runs inference under `torch.no_grad()`: `torch.inference_mode()` is faster"]
    assert _gf301(
        """
        import torch
        @torch.no_grad()
        def medieval(model, x):
            return model(x)
        """
    ) == []


@pytest.mark.parametrize("decorator", ["torch.inference_mode()", "torch.set_grad_enabled(False)", "torch.enable_grad()"])
def test_functions_under_another_grad_mode_are_not_reported(decorator):
    # The file mentions `no_grad` (the rule's trigger), so the rule does look at `predict`.
    assert _gf301(
        f"""
        import torch
        @torch.no_grad()
        def update_ema(ema, model):
            ema.copy_(model)

        @{decorator}
        def predict(model, x):
            return model(x)
        """
    ) == []
