"""PyTorch facts GF304 (data-mutation) relies on, checked on real torch."""

import warnings

import pytest

torch = pytest.importorskip("torch")


def _param():
    return torch.nn.Parameter(torch.tensor([1.0, 2.0, 3.0]))


def test_data_mutation_bypasses_the_version_counter_and_gives_wrong_grads_silently():
    p = _param()
    y = (p * p).sum()  # saves p for backward; d/dp = 2 * p_old = [2, 4, 6]
    p.data.mul_(10)
    assert p._version == 0
    y.backward()  # no error...
    assert torch.equal(p.grad, 2 * p.detach())  # ...but computed from the new values
    assert not torch.equal(p.grad, torch.tensor([2.0, 4.0, 6.0]))


def test_no_grad_mutation_bumps_the_version_so_backward_raises():
    """Why the fix is unsafe: the silent wrong gradient becomes an error."""
    p = _param()
    y = (p * p).sum()
    with torch.no_grad():
        p.mul_(10)
    assert p._version == 1
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()


def test_no_grad_in_place_on_a_leaf_works_and_keeps_it_a_leaf():
    p = _param()
    with torch.no_grad():
        p.mul_(2)
        p.zero_()
        p.fill_(1.5)
    assert p.is_leaf and p.requires_grad and p.grad_fn is None
    assert torch.equal(p.detach(), torch.full((3,), 1.5))
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        p.mul_(2)  # without no_grad: why the fix adds the `with`


def _sgd_step(through_data):
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    target = torch.nn.Linear(4, 2)
    model(torch.randn(3, 4)).pow(2).sum().backward()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the deprecated add_(alpha, other)
        for p, t in zip(model.parameters(), target.parameters()):
            if through_data:
                p.data.add_(-0.1, p.grad.data)
                p.data[0] = 0.5
                p.data -= 0.01 * p.grad
                t.data.copy_(0.9 * t.data + 0.1 * p.data)
                p.grad.data.zero_()
            else:
                with torch.no_grad():
                    p.add_(-0.1, p.grad.data)
                    p[0] = 0.5
                    p -= 0.01 * p.grad
                    t.copy_(0.9 * t.data + 0.1 * p.data)
                    p.grad.zero_()
    return [x.detach().clone() for x in (*model.parameters(), *target.parameters())], model


def test_optimizer_style_updates_give_the_same_values_after_the_fix():
    before, _ = _sgd_step(through_data=True)
    after, model = _sgd_step(through_data=False)
    assert all(torch.equal(a, b) for a, b in zip(before, after))
    assert all(p.is_leaf and p.requires_grad and isinstance(p, torch.nn.Parameter) for p in model.parameters())


def test_rebinding_data_changes_the_shape_which_no_grad_in_place_cannot():
    """`w.data = w.data[:, keep]` is not a write GF304 can rewrite."""
    w = torch.nn.Parameter(torch.ones(2, 4))
    w.data = w.data[:, :2]
    assert w.shape == (2, 2)


def test_clamping_a_saved_activation_through_data_works_but_under_no_grad_raises():
    """Why a bare name assigned from a computation (`p = F.softmax(x)`) is only reported: the
    `.data` hack trains today, the rewrite would stop it at the first backward."""
    x = torch.randn(4, requires_grad=True)
    p = torch.softmax(x, 0)  # softmax saves its output
    p.data.clamp_(0.3, 1)
    p.sum().backward()
    q = torch.softmax(x.detach().requires_grad_(), 0)
    with torch.no_grad():
        q.clamp_(0.3, 1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        q.sum().backward()


def test_no_grad_in_place_on_buffers_views_and_grads_gives_the_same_values():
    """Receivers the fix rewrites besides parameters: a buffer, a view of a parameter, `.grad`."""
    bn = torch.nn.BatchNorm1d(3)
    weight = torch.nn.Parameter(torch.zeros(2, 3))
    (weight * 2).sum().backward()
    via_data = [bn.running_mean.clone(), weight.detach().clone(), weight.grad.clone()]
    via_data[0].data.add_(1)
    via_data[1].data[0].fill_(5)
    via_data[2].data.zero_()
    with torch.no_grad():
        bn.running_mean.add_(1)
        weight[0].fill_(5)
        weight.grad.zero_()
    assert torch.equal(bn.running_mean, via_data[0])
    assert torch.equal(weight.detach(), via_data[1])
    assert torch.equal(weight.grad, via_data[2])
    assert weight.is_leaf and weight.grad_fn is None


def test_a_data_subscript_write_with_an_index_key_is_reported_and_a_string_key_is_not():
    """`.data[0] = v` indexes a tensor (reported); `.data['k'] = v` is a mapping (DGL's feature dict)."""
    from gradfix import Settings, check

    code = (
        "import torch\n\nclass M(torch.nn.Module):\n    def reset(self):\n"
        "        self.weight.data[0] = 0\n        self.weight.data['k'] = 0\n"
    )
    [finding] = check(code, settings=Settings(select=("GF304",)))
    assert (finding.code, finding.span.line, finding.span.col) == ("GF304", 5, 8)
    assert finding.message == "in-place write through `.data` of `self.weight` bypasses autograd's version checks"
    # the constant written into the mapping is the same under `no_grad`: the method is decorated
    assert finding.fix_title == "Decorate `reset` with `@torch.no_grad()` and drop `.data`"


def test_a_name_not_bound_by_the_loop_over_parameters_is_only_reported():
    """`buf` is not the loop's target, so nothing says it is a parameter: reported, no fix."""
    from gradfix import Settings, check

    code = "import torch\n\ndef step(model, buf):\n    for p in model.parameters():\n        pass\n    buf.data.zero_()\n"
    [finding] = check(code, settings=Settings(select=("GF304",)))
    assert (finding.span.line, finding.span.col) == (6, 4)
    assert finding.message == "in-place write through `.data` of `buf` bypasses autograd's version checks"
    assert finding.fix_title is None and not finding.fix


def test_a_key_the_items_loop_does_not_bind_still_indexes_a_tensor():
    """Only the loop's own key (`k`) makes `.data[k]` a mapping; `.data[i]` is a tensor write."""
    from gradfix import Settings, check

    code = (
        "import torch\n\nclass M(torch.nn.Module):\n    def reset(self, m, i):\n"
        "        for k, v in m.items():\n            self.weight.data[k] = v\n        self.weight.data[i] = 0\n"
    )
    [finding] = check(code, settings=Settings(select=("GF304",)))
    assert (finding.span.line, finding.span.col) == (7, 8)
    assert finding.message == "in-place write through `.data` of `self.weight` bypasses autograd's version checks"


def test_setting_requires_grad_is_the_same_under_no_grad_so_the_loop_is_wrapped_whole():
    """analysis/regions.records_no_graph: `p.requires_grad = False` may move under `no_grad`
    with the copy beside it (the momentum-encoder loop: `pk.data.copy_(pq.data)` then
    `pk.requires_grad = False`), so the fix wraps the loop, not each copy."""
    q, k = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)
    with torch.no_grad():
        for pq, pk in zip(q.parameters(), k.parameters()):
            pk.copy_(pq)
            pk.requires_grad = False
    assert all(not p.requires_grad and p.is_leaf and torch.equal(p, r) for p, r in zip(k.parameters(), q.parameters()))
    from gradfix import Settings, fix

    code = (
        "def init(q, k, x):\n    for pq, pk in zip(q.parameters(), k.parameters()):\n        pk.data.copy_(pq.data)\n"
        "        pk.requires_grad = False\n    return k(x)\n"
    )
    fixed = fix(code, "a.py", Settings(select=("GF304",), unsafe_fixes=True))
    assert "    with torch.no_grad():\n        for pq, pk in zip(q.parameters(), k.parameters()):\n            pk.copy_(pq)\n" in fixed, fixed


def _grads(create_graph=False):
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    loss = model(torch.randn(4, 3)).pow(2).sum()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # create_graph's reference-cycle warning
        loss.backward(create_graph=create_graph)
    return list(model.parameters())


def test_in_place_on_a_grad_outside_no_grad_works_and_matches_the_data_write():
    """Why `p.grad.data.mul_(s)` becomes `p.grad.mul_(s)` with no `with`: an ordinary `.grad`
    does not require grad (it is what torch's own optimizers write, `p.grad.zero_()` /
    `zero_grad`), so in-place ops on it record nothing and raise nothing."""
    through_data, direct = _grads(), _grads()
    for p in through_data:
        p.grad.data.mul_(0.5)
        p.grad.data.clamp_(-1, 1)
        p.grad.data *= 3
    for p in direct:
        assert not p.grad.requires_grad and p.grad.grad_fn is None
        p.grad.mul_(0.5)
        p.grad.clamp_(-1, 1)
        p.grad *= 3
        assert not p.grad.requires_grad and p.grad.grad_fn is None
    for a, b in zip(through_data, direct):
        assert torch.equal(a.grad, b.grad)
    for p in direct:
        p.grad.zero_()
        assert torch.equal(p.grad, torch.zeros_like(p))


def test_after_create_graph_a_grad_requires_grad_and_in_place_on_it_is_recorded():
    """Why the `.grad` rewrite is skipped where `create_graph=True` is used: there `p.grad` is a
    graph node, `p.grad.mul_(s)` outside `no_grad` is recorded into it (a new grad_fn), which the
    `.data` write was not; under `no_grad` it is not (what the wrapping fix writes)."""
    for p in _grads(create_graph=True):
        assert p.grad.requires_grad and p.grad.grad_fn is not None
        before = p.grad.grad_fn
        p.grad.data.mul_(2)
        assert p.grad.grad_fn is before
        p.grad.mul_(2)
        assert p.grad.grad_fn is not before and "Mul" in type(p.grad.grad_fn).__name__
    for p in _grads(create_graph=True):
        before = p.grad.grad_fn
        with torch.no_grad():
            p.grad.mul_(2)
        assert p.grad.grad_fn is before


def test_a_fresh_constructor_gives_the_same_tensor_under_no_grad():
    """Why a set-up section's `b = torch.randn(2)` may join the `with` around the writes next to
    it and be read after it: with no `requires_grad=`, a constructor builds a tensor without
    history either way."""
    torch.manual_seed(0)
    outside = [torch.randn(2, 3), torch.zeros(4), torch.arange(5), torch.ones(2)]
    torch.manual_seed(0)
    with torch.no_grad():
        inside = [torch.randn(2, 3), torch.zeros(4), torch.arange(5), torch.ones(2)]
    for a, b in zip(outside, inside):
        assert torch.equal(a, b)
        assert not a.requires_grad and not b.requires_grad and a.is_leaf and b.is_leaf
        assert (a * 2).requires_grad is (b * 2).requires_grad is False


def test_a_distributed_collective_on_grads_does_the_same_with_grad_mode_on_or_off(tmp_path):
    """analysis/regions.py: `dist.all_reduce(p.grad)` records no graph, so a loop that reduces
    and then scales the grads may go under one `no_grad` whole."""
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not built in")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        results = []
        for mode in (True, False):
            w = torch.ones(3, requires_grad=True)
            (w * 2).sum().backward()
            with torch.set_grad_enabled(mode):
                dist.all_reduce(w.grad, op=dist.ReduceOp.SUM)
                w.grad.div_(2)
            results.append((w.grad.clone(), w.grad.requires_grad, w.grad.grad_fn))
        assert torch.equal(results[0][0], results[1][0])
        assert results[0][1:] == results[1][1:] == (False, None)
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize(
    "build",
    [
        lambda: torch.nn.Linear(4, 3),
        lambda: torch.nn.BatchNorm1d(5),
        lambda: torch.nn.Conv2d(2, 3, 3),
        lambda: torch.nn.LSTM(4, 6, num_layers=2, dropout=0.1),
        lambda: torch.nn.Embedding(7, 4, padding_idx=0),
        lambda: torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.LayerNorm(3)),
    ],
)
def test_a_torch_nn_module_built_under_no_grad_is_the_same_module(build):
    """Why GF304 lets `self.bn1 = nn.BatchNorm1d(h)` sit inside the `with` that joins the init
    writes around it (regions.builds_torch_module): same values, and every parameter is still a
    leaf that requires grad and trains."""
    torch.manual_seed(0)
    plain = build()
    torch.manual_seed(0)
    with torch.no_grad():
        quiet = build()
    for (name, a), (_, b) in zip(plain.named_parameters(), quiet.named_parameters(), strict=True):
        assert torch.equal(a, b), name
        assert b.requires_grad and b.is_leaf and b.grad_fn is None, name
    sum(p.sum() for p in quiet.parameters()).backward()
    assert all(p.grad is not None for p in quiet.parameters())
    assert torch.nn.Parameter(torch.zeros(2)).requires_grad
    with torch.no_grad():
        assert torch.nn.Parameter(torch.zeros(2)).requires_grad


_VIEW_CALLS = {
    "view": lambda t: t.view(-1),
    "view_as": lambda t: t.view_as(t),
    "narrow": lambda t: t.narrow(0, 1, 2),
    "select": lambda t: t.select(1, 0),
    "t": lambda t: t.t(),
    "transpose": lambda t: t.transpose(0, 1),
    "permute": lambda t: t.permute(1, 0),
    "squeeze": lambda t: t.squeeze(),
    "unsqueeze": lambda t: t.unsqueeze(0),
    "diagonal": lambda t: t.diagonal(),
    "expand": lambda t: t[:1].expand(4, 4),
    "expand_as": lambda t: t[:1].expand_as(t),
    "as_strided": lambda t: t.as_strided((2,), (1,)),
    "unflatten": lambda t: t.unflatten(0, (2, 2)),
    "movedim": lambda t: t.movedim(0, 1),
    "swapaxes": lambda t: t.swapaxes(0, 1),
    "unfold": lambda t: t.unfold(0, 2, 1),
}


@pytest.mark.parametrize("method", sorted(_VIEW_CALLS))
def test_a_storage_view_of_data_writes_the_parameter_and_so_does_it_under_no_grad(method):
    from gradfix.analysis.vocabulary import STORAGE_VIEWS

    assert set(_VIEW_CALLS) == STORAGE_VIEWS  # every method GF304 follows, and only those
    through_data, through_no_grad = torch.nn.Parameter(torch.ones(4, 4)), torch.nn.Parameter(torch.ones(4, 4))
    _VIEW_CALLS[method](through_data.data).fill_(0)
    with torch.no_grad():
        _VIEW_CALLS[method](through_no_grad).fill_(0)
    assert (through_data == 0).any() and torch.equal(through_data.detach(), through_no_grad.detach())
    assert through_no_grad.requires_grad and through_no_grad.is_leaf


def test_a_lazy_modules_parameter_takes_a_data_write_but_raises_on_a_real_one():
    # `self.net = nn.LazyLinear(1); self.net.weight.data.normal_(..)` (d2l): the `.data` write
    # runs (on an uninitialised parameter, it writes nothing); the same write under no_grad, or
    # with torch.nn.init, raises ValueError. GF304 reports such a write without a fix.
    m = torch.nn.LazyLinear(1)
    m.weight.data.normal_(0, 0.01)
    m.bias.data.fill_(0)
    with torch.no_grad(), pytest.raises(ValueError, match="uninitialized parameter"):
        m.weight.normal_(0, 0.01)
    with pytest.raises(ValueError, match="uninitialized parameter"):
        torch.nn.init.zeros_(m.bias)


def test_a_state_dicts_tensors_are_detached_aliases_so_in_place_writes_need_no_no_grad():
    """GF304 drops `.data` with no `with` for `for n, p in m.state_dict().items(): p.data += d`:
    the entries require no grad, share the parameter's storage, and an in-place write on one
    records no graph (it bumps the version the parameter shares, as the `no_grad` form does)."""
    model = torch.nn.Linear(2, 2)
    entry = model.state_dict()["weight"]
    assert not entry.requires_grad and entry.grad_fn is None
    assert entry.data_ptr() == model.weight.data_ptr()
    before = model.weight._version
    entry += torch.ones(2, 2)  # outside no_grad
    assert not entry.requires_grad and entry.grad_fn is None
    assert torch.equal(model.weight.detach(), entry)
    assert model.weight._version == before + 1
    assert model.state_dict(keep_vars=True)["weight"] is model.weight  # keep_vars: the parameter itself


def test_values_computed_from_data_are_the_same_under_no_grad_and_carry_no_graph():
    """A pruning loop's mask, count and list entries built from `.data` (or a fresh tensor's
    item writes) are the same values, without history, whether the loop runs under `no_grad`
    or not: they may be read after a block that moved them under it."""
    w = torch.nn.Parameter(torch.tensor([0.5, -2.0, 3.0]))

    def pruning_step():
        mask = w.data.abs().clone().gt(1.0).float()
        keep = torch.zeros(3)
        keep[[0, 2]] = 1
        counted = 3 - torch.sum(mask)
        return mask, keep, counted, int(torch.sum(mask)), mask.sum() / float(w.numel())

    plain = pruning_step()
    with torch.no_grad():
        under = pruning_step()
    for a, b in zip(plain, under):
        if isinstance(a, torch.Tensor):
            assert torch.equal(a, b) and not a.requires_grad and a.grad_fn is None
        else:
            assert a == b
