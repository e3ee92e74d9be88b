"""PyTorch facts GF104 (no-grad-without-eval) relies on, checked on real torch (CPU)."""

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn


def _net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.Dropout(0.5), nn.Linear(16, 1))


def test_eval_does_not_disable_grad():
    """rules.md: `model.eval()` changes dropout / batch-norm only; grad is still recorded."""
    model = _net().eval()
    x = torch.randn(4, 8)
    y = model(x)
    assert torch.is_grad_enabled()
    assert y.requires_grad and y.grad_fn is not None
    y.sum().backward()
    assert model[0].weight.grad is not None


def test_no_grad_does_not_switch_dropout_off():
    """The bug GF104 fixes: under no_grad alone, dropout is still random."""
    model = _net()
    x = torch.randn(64, 8)
    with torch.no_grad():
        a, b = model(x), model(x)
    assert not torch.equal(a, b)
    assert model.training


def test_eval_makes_dropout_deterministic():
    model = _net()
    x = torch.randn(64, 8)
    drop = nn.Dropout(0.5)
    ones = torch.ones(1000)
    assert not torch.equal(drop(ones), drop(ones))  # train mode: two passes differ
    drop.eval()
    assert torch.equal(drop(ones), ones)  # eval mode: identity
    model.eval()
    with torch.no_grad():
        assert torch.equal(model(x), model(x))


def test_no_grad_still_updates_batch_norm_statistics():
    """Evaluating in train mode under no_grad overwrites the running statistics."""
    bn = nn.BatchNorm1d(4)
    before = bn.running_mean.clone(), bn.num_batches_tracked.clone()
    with torch.no_grad():
        bn(torch.randn(32, 4) + 3.0)
    assert not torch.equal(bn.running_mean, before[0])
    assert bn.num_batches_tracked.item() == before[1].item() + 1


def test_eval_freezes_and_uses_batch_norm_statistics():
    bn = nn.BatchNorm1d(4)
    bn.eval()
    mean, count = bn.running_mean.clone(), bn.num_batches_tracked.clone()
    x = torch.randn(32, 4) + 3.0
    out = bn(x)
    assert torch.equal(bn.running_mean, mean) and torch.equal(bn.num_batches_tracked, count)
    # eval uses the running statistics (mean 0, var 1 at init): output is x itself, not normalised
    assert torch.allclose(out, x / torch.sqrt(torch.tensor(1.0 + bn.eps)))


def test_eval_is_recursive_so_parent_eval_covers_submodules():
    """`model.eval()` covers `model.encoder(x)`: the fix switches the parent name."""
    model = nn.Module()
    model.encoder = nn.Sequential(nn.Linear(2, 2), nn.Dropout())
    model.eval()
    assert not model.encoder.training and not model.encoder[1].training


def test_train_was_training_restores_the_callers_mode():
    """The `restore` style: `model.train(model_was_training)` puts back either mode."""
    for start in (True, False):
        model = _net().train(start)
        was_training = model.training
        model.eval()
        try:
            assert not any(m.training for m in model.modules())
        finally:
            model.train(was_training)
        assert all(m.training == start for m in model.modules())


def test_eval_stays_after_the_function_returns():
    """Why GF104's `insert` fix is unsafe and GF105 exists: the mode is not scoped."""
    model = _net()

    def evaluate(m):
        m.eval()
        with torch.no_grad():
            return m(torch.randn(4, 8))

    evaluate(model)
    assert not model.training


def test_train_false_is_eval():
    model = _net()
    model.train(False)
    assert not model.training and not model[2].training


def test_submodule_follows_the_parents_mode_set_by_the_caller():
    """Held-out review: `self.lm` in a method of an nn.Module is left alone, because the caller's
    `parent.train()`/`parent.eval()` reaches it (also after the submodule switched itself)."""
    parent = nn.Module()
    parent.lm = nn.Sequential(nn.Linear(2, 2), nn.Dropout())
    parent.lm.train()
    parent.eval()
    assert not parent.lm.training and not parent.lm[1].training
    parent.lm.train()
    parent.train(False)
    assert not parent.lm[1].training
    parent.train()
    assert parent.lm.training and parent.lm[1].training


def test_a_discarded_forward_under_no_grad_materialises_lazy_parameters():
    """Held-out review: `model(batch)` as a bare statement under `no_grad` (PyG's `init_params`)
    initialises lazy parameters; it is not an evaluation. The parameters still train later."""
    model = nn.Sequential(nn.LazyLinear(3))
    with torch.no_grad():
        model(torch.randn(2, 5))
    weight = model[0].weight
    assert isinstance(weight, nn.Parameter) and weight.shape == (3, 5) and weight.requires_grad
    model(torch.randn(2, 5)).sum().backward()
    assert weight.grad is not None


def test_eval_and_to_return_the_module_itself():
    """Held-out review 3: `model = Net().eval()` / `Net().to(dev).eval()` binds the module, in
    eval mode, so a later forward under no_grad needs no further `.eval()`."""
    net = nn.Sequential(nn.Linear(2, 2), nn.Dropout())
    assert net.eval() is net and not net[1].training
    fresh = nn.Sequential(nn.Linear(2, 2), nn.Dropout())
    bound = fresh.to("cpu").eval()
    assert bound is fresh and not bound.training and not bound[1].training


def test_mode_free_layers_compute_the_same_in_train_and_eval():
    """Held-out review 3: a Sequential of the layers in gf104's MODE_FREE_LAYERS (sampled here)
    gives identical outputs in both modes; adding dropout or batch-norm breaks that."""
    from gradfix.analysis.project import MODE_FREE_LAYERS

    torch.manual_seed(0)
    x = torch.randn(4, 3, 8, 8)
    nets = [
        nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.MaxPool2d(2), nn.GroupNorm(2, 4), nn.Flatten(),
                      nn.LayerNorm(36), nn.Linear(36, 5), nn.Tanh(), nn.LogSoftmax(1)),
        nn.Sequential(nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Linear(12, 6), nn.GELU(), nn.Softmax(1)),
    ]
    for net in nets:
        names = {type(m).__name__ for m in net}
        assert names <= MODE_FREE_LAYERS
        net.train()
        a = net(x)
        net.eval()
        assert torch.equal(a, net(x))
    for layer in (nn.Dropout(0.5), nn.BatchNorm2d(3)):
        assert type(layer).__name__ not in MODE_FREE_LAYERS
        net = nn.Sequential(layer, nn.Flatten(), nn.Linear(192, 2))
        net.train()
        a = net(x)
        net.eval()
        assert not torch.equal(a, net(x))


# -- the fix's range (mutation testing) -------------------------------------------------------

_TWO_BLOCKS = (
    "import torch\ndef evaluate(model, a, b):\n    with torch.no_grad():\n        x = model(a)\n    print(x)\n    with torch.no_grad():\n"
    "        y = model(b)\n    return x, y\n"
    "def train(model, loader, opt):\n    model.train()\n    for x in loader:\n        model(x).sum().backward()\n        opt.step()\n"
)


@pytest.mark.parametrize("style", ["insert", "restore"])
def test_two_sibling_blocks_get_one_eval_and_one_restore_around_both(style):
    from gradfix import Settings, check, fix

    settings = Settings(select=("GF104",), unsafe_fixes=True, rule_options={"GF104": {"style": style}})
    [finding] = check(_TWO_BLOCKS, settings=settings)
    assert (finding.span.line, finding.span.col, finding.span.end_col) == (4, 12, 20)
    assert finding.message == "`model` runs under `torch.no_grad()` in train mode (trained at line 10): dropout/batch norm stay on"
    restore = " and restore the mode in a `finally`" if style == "restore" else ""
    assert finding.fix_title == f"Insert `model.eval()` before the block{restore}"
    evaluate = (
        "    model.eval()\n    with torch.no_grad():\n        x = model(a)\n    print(x)\n    with torch.no_grad():\n        y = model(b)\n"
        if style == "insert"
        else "    was_training = model.training\n    model.eval()\n    try:\n        with torch.no_grad():\n            x = model(a)\n"
        "        print(x)\n        with torch.no_grad():\n            y = model(b)\n    finally:\n        model.train(was_training)\n"
    )
    assert fix(_TWO_BLOCKS, settings=settings) == _TWO_BLOCKS.replace(
        "    with torch.no_grad():\n        x = model(a)\n    print(x)\n    with torch.no_grad():\n        y = model(b)\n", evaluate
    )


def _valid_example(marker):
    from gradfix.rules import rule_by_code

    [code] = [v.code for v in rule_by_code("GF104").VALID if marker in v.code]
    return code


@pytest.mark.parametrize(
    "marker, silencer, plain",
    [
        ("# noqa: GF104", "  # noqa: GF104", ""),
        ("contextlib.nullcontext()", "torch.no_grad() if frozen else contextlib.nullcontext()", "torch.no_grad()"),
        ("def evaluate(model, x):\n    model.eval()\n", "    model.eval()\n    with", "    with"),
    ],
    ids=["noqa", "conditional_region", "eval_before"],
)
def test_each_look_alike_example_is_silent_for_the_reason_it_shows(marker, silencer, plain):
    # The example, with what makes it legitimate taken out, is reported: it is silent for that reason.
    from gradfix import Settings, check

    settings = Settings(select=("GF104",))
    code = _valid_example(marker)
    assert check(code, settings=settings) == []
    assert [f.code for f in check(code.replace(silencer, plain), settings=settings)] == ["GF104"]


def test_a_frozen_teacher_in_a_training_step_is_silent_the_trained_model_in_an_evaluation_is_not():
    from gradfix import Settings, check

    settings = Settings(select=("GF104",))
    code = _valid_example("def distil(")
    assert check(code, settings=settings) == []
    evaluation = code.replace("t = teacher(x)", "t = model(x)").replace("    loss.backward()\n    opt.step()\n", "")
    assert [f.code for f in check(evaluation, settings=settings)] == ["GF104"]


def test_two_branches_in_a_loop_get_one_eval_before_the_loop():
    from gradfix import Settings, check, fix

    code = (
        "import torch\ndef train(model, loader, opt):\n    model.train()\n    for x in loader:\n        model(x).sum().backward()\n"
        "        opt.step()\ndef evaluate(model, batches, flip):\n    for x in batches:\n        if flip:\n            with torch.no_grad():\n"
        "                y = model(x.flip(0))\n        else:\n            with torch.no_grad():\n                y = model(x)\n        print(y)\n"
    )
    settings = Settings(select=("GF104",), unsafe_fixes=True)
    [finding] = check(code, settings=settings)
    assert (finding.span.line, finding.span.col) == (11, 20)
    assert finding.fix_title == "Insert `model.eval()` before the loop"
    # nothing in the loop switches the model: once before it, not once per batch
    assert fix(code, settings=settings) == code.replace("    for x in batches:\n", "    model.eval()\n    for x in batches:\n")
