"""Torch facts GF205 (prefer-specific-grad-api) relies on: the rewrite is behaviour-equal."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

PAIRS = {
    False: (lambda: torch.set_grad_enabled(False), lambda: torch.no_grad()),
    True: (lambda: torch.set_grad_enabled(True), lambda: torch.enable_grad()),
}


@pytest.fixture(autouse=True)
def _restore_grad_mode():
    before = torch.is_grad_enabled()
    yield
    torch.set_grad_enabled(before)


def _observe_with(make, caller_mode, fail=False):
    torch.set_grad_enabled(caller_mode)
    seen = {}
    try:
        with make() as bound:
            seen["bound"] = bound
            seen["inside"] = torch.is_grad_enabled()
            w = torch.ones(2, requires_grad=True)
            seen["graph"] = (w * 3).grad_fn is not None
            if fail:
                raise KeyError("boom")
    except KeyError:
        seen["raised"] = True
    seen["after"] = torch.is_grad_enabled()
    return seen


@pytest.mark.parametrize("mode", [False, True])
@pytest.mark.parametrize("caller_mode", [False, True])
@pytest.mark.parametrize("fail", [False, True])
def test_with_item_rewrite_is_behaviour_equal(mode, caller_mode, fail):
    generic, specific = PAIRS[mode]
    before = _observe_with(generic, caller_mode, fail)
    after = _observe_with(specific, caller_mode, fail)
    assert before == after
    assert before["inside"] is mode and before["after"] is caller_mode


def _observe_decorator(make, caller_mode):
    torch.set_grad_enabled(caller_mode)

    @make()
    def fn(x):
        return torch.is_grad_enabled(), (x * 2).grad_fn is not None

    @make()
    def gen():
        yield torch.is_grad_enabled()
        yield torch.is_grad_enabled()

    at_definition = torch.is_grad_enabled()
    result = fn(torch.ones(1, requires_grad=True))
    after_call = torch.is_grad_enabled()
    g = gen()
    first = next(g)
    between = torch.is_grad_enabled()
    second = next(g)
    return at_definition, result, after_call, first, between, second, torch.is_grad_enabled()


@pytest.mark.parametrize("mode", [False, True])
@pytest.mark.parametrize("caller_mode", [False, True])
def test_decorator_rewrite_is_behaviour_equal(mode, caller_mode):
    generic, specific = PAIRS[mode]
    before = _observe_decorator(generic, caller_mode)
    after = _observe_decorator(specific, caller_mode)
    assert before == after
    assert before[1] == (mode, mode) and before[2] is caller_mode


def test_nested_with_items_equal():
    """``with A(), set_grad_enabled(False):`` — items enter in order either way."""
    torch.set_grad_enabled(True)
    with torch.enable_grad(), torch.set_grad_enabled(False):
        generic = torch.is_grad_enabled()
    with torch.enable_grad(), torch.no_grad():
        specific = torch.is_grad_enabled()
    assert generic == specific


def test_an_uncalled_set_grad_enabled_is_left_to_gf101():
    # `with torch.set_grad_enabled:` has no mode to read: GF205 says nothing (and does not fail).
    from gradfix import Settings, check

    code = "import torch\nwith torch.set_grad_enabled:\n    y = f(x)\n"
    assert [(f.code, f.span.line, f.span.col) for f in check(code, settings=Settings(select=("GF205", "GF101")))] == [("GF101", 2, 5)]


def test_the_finding_names_the_short_spelling_in_message_and_title():
    from gradfix import Settings, check

    [finding] = check("import torch as T\nwith T.set_grad_enabled(False):\n    y = f(x)\n", settings=Settings(select=("GF205",)))
    assert (finding.span.line, finding.span.col, finding.span.end_col) == (2, 5, 30)
    assert finding.message == "`T.set_grad_enabled(False)` has a constant mode: `T.no_grad()` says the same by name"
    assert finding.fix_title == "Write `T.no_grad()`"
