"""Torch facts GF103 (overbroad-no-grad) relies on: what its two fix styles do, on real torch."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn


def _model():
    torch.manual_seed(0)
    return nn.ModuleDict({"encoder": nn.Linear(4, 3), "decoder": nn.Linear(3, 2)})


def _data():
    g = torch.Generator().manual_seed(1)
    return torch.randn(5, 4, generator=g), torch.randn(5, 2, generator=g)


def _grads(model):
    return {n: (None if p.grad is None else p.grad.clone()) for n, p in model.named_parameters()}


def test_original_block_raises_and_trains_nothing():
    model, (inputs, labels) = _model(), _data()
    with torch.no_grad():
        hidden = model["encoder"](inputs)
        outputs = model["decoder"](hidden)
    loss = nn.MSELoss()(outputs, labels)
    with pytest.raises(RuntimeError, match="element 0 of tensors does not require grad and does not have a grad_fn"):
        loss.backward()
    assert all(g is None for g in _grads(model).values())


def _detach_style(model, inputs, labels):
    hidden = model["encoder"](inputs)
    outputs = model["decoder"](hidden.detach())
    nn.MSELoss()(outputs, labels).backward()
    return _grads(model)


def _narrow_style(model, inputs, labels):
    with torch.no_grad():
        hidden = model["encoder"](inputs)
    outputs = model["decoder"](hidden)
    nn.MSELoss()(outputs, labels).backward()
    return _grads(model)


def _single_expression(model, inputs, labels):
    outputs = model["decoder"](model["encoder"](inputs).detach())
    nn.MSELoss()(outputs, labels).backward()
    return _grads(model)


def test_detach_rewrite_trains_the_decoder_only():
    grads = _detach_style(_model(), *_data())
    assert grads["decoder.weight"] is not None and grads["decoder.weight"].abs().sum() > 0
    assert grads["decoder.bias"] is not None
    assert grads["encoder.weight"] is None and grads["encoder.bias"] is None


@pytest.mark.parametrize("other", [_narrow_style, _single_expression], ids=["narrow", "single_expression"])
def test_narrow_and_single_expression_give_the_same_grads_as_detach(other):
    expected = _detach_style(_model(), *_data())
    got = other(_model(), *_data())
    assert expected.keys() == got.keys()
    for name, grad in expected.items():
        if grad is None:
            assert got[name] is None, name
        else:
            assert torch.equal(grad, got[name]), name


def test_narrow_records_no_graph_for_the_frozen_stage_detach_does():
    model, (inputs, _) = _model(), _data()
    with torch.no_grad():
        narrow_hidden = model["encoder"](inputs)
    detach_hidden = model["encoder"](inputs)
    assert narrow_hidden.grad_fn is None
    assert detach_hidden.grad_fn is not None  # the graph exists, `.detach()` only cuts it


def test_frozen_output_read_after_the_block_changes_under_detach():
    """Why `detach` falls back to `narrow` when a frozen name is read outside the consumers."""
    model, (inputs, labels) = _model(), _data()
    hidden = model["encoder"](inputs)  # detach style: the frozen stage now records a graph
    outputs = model["decoder"](hidden.detach())
    loss = nn.MSELoss()(outputs, labels) + hidden.pow(2).mean()  # a later read of `hidden`
    loss.backward()
    assert model["encoder"].weight.grad is not None  # the encoder would start training


def test_inference_mode_cannot_be_narrowed():
    """Why `narrow` falls back to `detach` for inference_mode blocks."""
    model, (inputs, labels) = _model(), _data()
    with torch.inference_mode():
        hidden = model["encoder"](inputs)
    with pytest.raises(RuntimeError, match="Inference tensors cannot be saved for backward"):
        nn.MSELoss()(model["decoder"](hidden), labels).backward()


def test_target_network_value_under_no_grad_is_legitimate():
    """The look-alike GF103 must not report: the loss keeps a grad_fn through `q`."""
    torch.manual_seed(0)
    net, target_net = nn.Linear(4, 2), nn.Linear(4, 2)
    s, s2 = _data()[0], _data()[0] + 1
    with torch.no_grad():
        target = target_net(s2).max(1).values
    q = net(s).max(1).values
    loss = nn.MSELoss()(q, target)
    loss.backward()
    assert net.weight.grad is not None and target_net.weight.grad is None


# -- look-alikes found in the precision review: these run fine, so GF102/GF103 stay silent -------


def test_a_criterion_with_parameters_trains_on_frozen_features():
    # Center loss / ArcFace / AdaptiveLogSoftmaxWithLoss on features made under no_grad:
    # the loss has a grad_fn through the criterion's own parameters.
    enc = nn.Linear(4, 3)
    with torch.no_grad():
        feats = enc(torch.randn(5, 4))
    head = nn.AdaptiveLogSoftmaxWithLoss(3, 20, cutoffs=[10])
    loss = head(feats, torch.randint(0, 20, (5,))).loss
    assert loss.grad_fn is not None
    loss.backward()
    assert enc.weight.grad is None and all(p.grad is not None for p in head.head.parameters())


def test_a_parameter_fetched_under_no_grad_still_requires_grad():
    model = nn.Linear(2, 2)
    with torch.no_grad():
        w = model.get_parameter("weight")
    assert w.requires_grad
    (w**2).sum().backward()
    assert model.weight.grad is not None


def test_an_lstm_hidden_state_is_a_tuple_without_detach():
    # Why `detach` style falls back to `narrow` for names unpacked from the frozen stage.
    out, hidden = nn.LSTM(3, 4)(torch.randn(2, 1, 3))
    assert isinstance(hidden, tuple) and not hasattr(hidden, "detach")
    assert out.detach().shape == out.shape


# -- the fix's shape checks (mutation testing): these blocks are reported without a fix ----------

_SHAPES_WITHOUT_FIX = {
    # `w = model.aux(x)` does not consume the frozen stage: no two-stage shape.
    "unrelated_consumer": (
        "import torch\ndef step(model, x, y, crit):\n    with torch.no_grad():\n        h = model.enc(x)\n        out = model.dec(h)\n"
        "        w = model.aux(x)\n    loss = crit(out, y)\n    loss.backward()\n",
        (3, 4, 6),
    ),
    # The body on the `with` line, and `;`-joined statements: no statement to move out.
    "same_line_body": (
        "import torch\ndef step(model, x, y, crit):\n    with torch.no_grad(): h = model.enc(x); out = model.dec(h)\n"
        "    loss = crit(out, y)\n    loss.backward()\n",
        (3, 4, 3),
    ),
    "semicolon_joined": (
        "import torch\ndef step(model, x, y, crit):\n    with torch.no_grad():\n        h = model.enc(x); out = model.dec(h)\n"
        "    loss = crit(out, y)\n    loss.backward()\n",
        (3, 4, 4),
    ),
}


@pytest.mark.parametrize("name", sorted(_SHAPES_WITHOUT_FIX))
def test_shapes_outside_the_two_stage_form_are_reported_without_a_fix(name):
    from gradfix import Settings, check, fix

    code, (line, col, end_line) = _SHAPES_WITHOUT_FIX[name]
    settings = Settings(select=("GF103",), unsafe_fixes=True)
    [finding] = check(code, settings=settings)
    assert (finding.span.line, finding.span.col, finding.span.end_line) == (line, col, end_line)
    backward_line = code.count("\n")
    assert finding.message == (
        f"`loss`, backpropagated at line {backward_line}, is computed only from this block: no grad_fn, backward raises RuntimeError"
    )
    assert finding.fix_title is None
    assert fix(code, settings=settings) == code


def test_a_stage_picked_from_a_container_is_no_frozen_stage_to_detach():
    # `stages[0](x)` is not a call of a named stage: the single-statement fix is not offered.
    from gradfix import Settings, check, fix

    code = (
        "import torch\ndef step(model, stages, x, y, crit):\n    with torch.no_grad():\n        out = model.dec(stages[0](x))\n"
        "    loss = crit(out, y)\n    loss.backward()\n"
    )
    settings = Settings(select=("GF103",), unsafe_fixes=True)
    [finding] = check(code, settings=settings)
    assert (finding.span.line, finding.span.col, finding.span.end_line, finding.span.end_col) == (3, 4, 4, 37)
    assert finding.fix_title is None
    assert fix(code, settings=settings) == code


def test_the_message_shortens_the_tensor_past_30_characters_and_the_fix_detaches():
    from gradfix import Settings, check, fix

    code = (
        "import torch\ndef step(model, x, y, crit):\n    with torch.no_grad():\n        h = model.enc(x)\n        out = model.dec(h)\n"
        "    (crit(out, y) + out.abs().mean()).backward()\n"
    )
    settings = Settings(select=("GF103",), unsafe_fixes=True)
    [finding] = check(code, settings=settings)
    assert (finding.span.line, finding.span.col, finding.span.end_line, finding.span.end_col) == (3, 4, 5, 26)
    assert finding.message == (
        "`crit(out, y) + out.abs().me...`, backpropagated at line 6, is computed only from this block: no grad_fn, backward raises RuntimeError"
    )
    assert finding.fix_title == "Drop the block; detach `h` where line 5 read it"
    assert fix(code, settings=settings) == (
        "import torch\ndef step(model, x, y, crit):\n    h = model.enc(x)\n    out = model.dec(h.detach())\n"
        "    (crit(out, y) + out.abs().mean()).backward()\n"
    )
