"""Torch facts GF201 (global-grad-toggle) relies on, checked on real torch (CPU)."""

from __future__ import annotations

import asyncio

import pytest

torch = pytest.importorskip("torch")


@pytest.fixture(autouse=True)
def _restore_grad_mode():
    before = torch.is_grad_enabled()
    torch.set_grad_enabled(True)
    yield
    torch.set_grad_enabled(before)


def _records_graph() -> bool:
    w = torch.ones(2, requires_grad=True)
    return (w * 2).grad_fn is not None


@pytest.mark.parametrize("mode", [False, True])
def test_bare_toggle_leaks_to_the_caller_after_return(mode):
    torch.set_grad_enabled(not mode)

    def evaluate():
        torch.set_grad_enabled(mode)
        return _records_graph()

    assert evaluate() is mode
    assert torch.is_grad_enabled() is mode  # the caller's mode was changed
    assert _records_graph() is mode


def test_bare_toggle_leaks_when_the_function_raises():
    def evaluate():
        torch.set_grad_enabled(False)
        raise ValueError

    with pytest.raises(ValueError):
        evaluate()
    assert torch.is_grad_enabled() is False


def test_closing_toggle_forces_a_mode_the_caller_did_not_have():
    def step():
        torch.set_grad_enabled(False)
        frozen = _records_graph()
        torch.set_grad_enabled(True)
        return frozen

    with torch.no_grad():
        assert step() is False
        assert torch.is_grad_enabled() is True  # the caller's no_grad is undone


@pytest.mark.parametrize(
    "decorator, inside",
    [(lambda: torch.no_grad(), False), (lambda: torch.enable_grad(), True)],
    ids=["no_grad", "enable_grad"],
)
@pytest.mark.parametrize("caller_mode", [False, True])
def test_decorator_form_scopes_the_mode_and_restores_the_caller(decorator, inside, caller_mode):
    @decorator()
    def fn():
        return torch.is_grad_enabled(), _records_graph()

    torch.set_grad_enabled(caller_mode)
    assert fn() == (inside, inside)
    assert torch.is_grad_enabled() is caller_mode


@pytest.mark.parametrize("caller_mode", [False, True])
def test_with_form_restores_the_caller_after_return_and_exception(caller_mode):
    def fn(fail):
        with torch.no_grad():
            if fail:
                raise ValueError
            return torch.is_grad_enabled()

    torch.set_grad_enabled(caller_mode)
    assert fn(False) is False
    assert torch.is_grad_enabled() is caller_mode
    with pytest.raises(ValueError):
        fn(True)
    assert torch.is_grad_enabled() is caller_mode


@pytest.mark.parametrize("mode", [False, True])
def test_set_grad_enabled_as_with_item_is_scoped(mode):
    """Look-alike that must not fire: ``with torch.set_grad_enabled(x):``."""
    torch.set_grad_enabled(not mode)
    with torch.set_grad_enabled(mode):
        assert torch.is_grad_enabled() is mode
        assert _records_graph() is mode
    assert torch.is_grad_enabled() is (not mode)


@pytest.mark.parametrize("mode", [False, True])
def test_set_grad_enabled_as_decorator_is_scoped(mode):
    """Look-alike that must not fire: ``@torch.set_grad_enabled(x)``; defining it leaks nothing."""
    torch.set_grad_enabled(not mode)

    @torch.set_grad_enabled(mode)
    def fn():
        return torch.is_grad_enabled()

    assert torch.is_grad_enabled() is (not mode)  # decorating did not change the mode
    assert fn() is mode
    assert torch.is_grad_enabled() is (not mode)


def test_decorator_argument_is_read_at_definition_not_at_call():
    """Why a non-literal toggle becomes ``with set_grad_enabled(x):``, never a decorator."""
    config = {"train": False}

    @torch.set_grad_enabled(config["train"])
    def fn():
        return torch.is_grad_enabled()

    config["train"] = True
    assert fn() is False  # still the value seen when ``def`` ran

    def fn_with(train):
        with torch.set_grad_enabled(train):
            return torch.is_grad_enabled()

    assert fn_with(config["train"]) is True


def test_generator_decorator_differs_from_a_bare_toggle():
    """Why generators get no fix: a decorator restores the consumer's mode at each yield."""

    def bare():
        torch.set_grad_enabled(False)
        yield torch.is_grad_enabled()

    @torch.no_grad()
    def decorated():
        yield torch.is_grad_enabled()

    gen = decorated()
    assert next(gen) is False
    assert torch.is_grad_enabled() is True  # consumer keeps its mode between yields
    gen = bare()
    assert next(gen) is False
    assert torch.is_grad_enabled() is False  # the bare toggle leaks to the consumer


def test_decorator_on_async_def_does_not_scope_the_coroutine_body():
    """Why ``async def`` gets no fix: the decorator returns before the body runs."""

    @torch.no_grad()
    async def fn():
        return torch.is_grad_enabled()

    assert asyncio.run(fn()) is True


def test_alias_spellings_are_the_same_objects():
    """The fix keeps the file's prefix: ``torch.autograd.no_grad`` etc. must exist."""
    assert torch.autograd.set_grad_enabled is torch.set_grad_enabled
    assert torch.autograd.no_grad is torch.no_grad
    assert torch.autograd.enable_grad is torch.enable_grad
    assert torch.autograd.grad_mode.no_grad is torch.no_grad
    assert torch.autograd.grad_mode.enable_grad is torch.enable_grad


# -- findings without a fix (mutation testing): the reason each one gives -----------------------

_HAND_MADE = "no fix: the function sets the mode by hand in `except`/`finally`"


def _gf201(code):
    from gradfix import Settings, check, fix

    settings = Settings(select=("GF201",), unsafe_fixes=True)
    found = [(f.span.line, f.span.col, f.message, f.fix_title or f.no_fix and f"no fix: {f.no_fix}") for f in check(code, settings=settings)]
    return found, fix(code, settings=settings)


def test_a_toggle_in_a_loop_body_closed_by_a_non_literal_mode_reaches_past_the_loop():
    code = (
        "import torch\ndef f(model, loader, mode):\n    for x in loader:\n        torch.set_grad_enabled(False)\n        out = model(x)\n"
        "        torch.set_grad_enabled(mode)\n    return out\n"
    )
    why = "no fix: the mode it sets reaches code after its nested block"
    assert _gf201(code) == (
        [
            (4, 8, "bare `torch.set_grad_enabled(False)` leaks the global grad mode to the caller", why),
            (6, 8, "bare `torch.set_grad_enabled(mode)` leaks the global grad mode to the caller", why),
        ],
        code,
    )


def test_a_mode_restored_in_finally_is_not_rewritten():
    code = (
        "import torch\ndef f(model, x):\n    torch.set_grad_enabled(False)\n    try:\n        return model(x)\n    finally:\n"
        "        torch.set_grad_enabled(True)\n"
    )
    # The literal in `finally` forces grad on: the caller gets it whatever mode it had.
    why = "no fix: the function sets the mode by hand in `except`/`finally`"
    assert _gf201(code) == (
        [
            (3, 4, "bare `torch.set_grad_enabled(False)` … `finally` (line 7): the caller always gets grad on, whatever it had", why),
            (7, 8, "`torch.set_grad_enabled(True)` in `finally` hands the caller grad on, whatever mode it had", why),
        ],
        code,
    )


def test_a_mode_forced_in_except_is_not_rewritten_and_says_when_it_runs():
    code = (
        "import torch as T\ndef f(model, x):\n    T.set_grad_enabled(False)\n    try:\n        out = model(x)\n"
        "    except RuntimeError:\n        T.set_grad_enabled(True)\n        raise\n    return out\n"
    )
    assert _gf201(code) == (
        [
            (3, 4, "bare `T.set_grad_enabled(False)` leaks to the caller; on an error `except` (line 7) sets grad on", _HAND_MADE),
            (7, 8, "`T.set_grad_enabled(True)` in `except` hands the caller grad on after an error, whatever mode it had", _HAND_MADE),
        ],
        code,
    )


def test_a_toggle_after_the_hand_made_restore_keeps_the_plain_reason():
    code = (
        "import torch\ndef f(model, x, flag):\n    try:\n        out = model(x)\n    finally:\n        torch.set_grad_enabled(flag)\n"
        "    torch.set_grad_enabled(False)\n    return out\n"
    )
    found, fixed = _gf201(code)
    assert [(m, title) for _, _, m, title in found] == [
        ("bare `torch.set_grad_enabled(flag)` leaks the global grad mode to the caller", _HAND_MADE),
        ("bare `torch.set_grad_enabled(False)` leaks the global grad mode to the caller", _HAND_MADE),
    ]
    assert fixed == code


def test_a_mode_restored_in_the_finally_of_try_except_star_is_not_rewritten():
    code = (
        "import torch\ndef f(model, x):\n    torch.set_grad_enabled(False)\n    try:\n        return model(x)\n    except* ValueError:\n"
        "        pass\n    finally:\n        torch.set_grad_enabled(True)\n"
    )
    found, fixed = _gf201(code)
    why = "no fix: the function sets the mode by hand in `except`/`finally`"
    assert [(line, col, title) for line, col, _, title in found] == [(3, 4, why), (9, 8, why)]
    assert [m for _, _, m, _ in found] == [
        "bare `torch.set_grad_enabled(False)` … `finally` (line 9): the caller always gets grad on, whatever it had",
        "`torch.set_grad_enabled(True)` in `finally` hands the caller grad on, whatever mode it had",
    ]
    assert fixed == code


def _pair(mode: str, end: int) -> str:
    forced = {"True": "grad on", "False": "grad off"}.get(mode, f"the mode `{mode}`")
    return f"bare `torch.set_grad_enabled(False)` … line {end}: the closer forces {forced}, whatever mode the caller had"


@pytest.mark.parametrize(
    "code, closers, fixed",
    [
        # A literal True closer before the function's last statement.
        (
            "import torch\ndef f(model, x):\n    torch.set_grad_enabled(False)\n    out = model(x)\n    torch.set_grad_enabled(True)\n    return out\n",
            [(3, "True", 5)],
            "import torch\ndef f(model, x):\n    with torch.no_grad():\n        out = model(x)\n    return out\n",
        ),
        # Two pairs in one function: each becomes its own block.
        (
            "import torch\ndef f(model, x, y):\n    torch.set_grad_enabled(False)\n    a = model(x)\n    torch.set_grad_enabled(True)\n"
            "    b = model(y)\n    torch.set_grad_enabled(False)\n    c = model(a + b)\n    torch.set_grad_enabled(True)\n    return c\n",
            [(3, "True", 5), (7, "True", 9)],
            "import torch\ndef f(model, x, y):\n    with torch.no_grad():\n        a = model(x)\n    b = model(y)\n"
            "    with torch.no_grad():\n        c = model(a + b)\n    return c\n",
        ),
        # A non-literal last toggle ending the function closes the block too (here the pair
        # spans the body: the decorator).
        (
            "import torch\ndef f(model, x, mode):\n    torch.set_grad_enabled(False)\n    out = model(x)\n    torch.set_grad_enabled(mode)\n",
            [(3, "mode", 5)],
            "import torch\n@torch.no_grad()\ndef f(model, x, mode):\n    out = model(x)\n",
        ),
        # The closer's comment stays, at the end of the new block, without the blank line under it.
        (
            "import torch\ndef f(model, x):\n    torch.set_grad_enabled(False)\n    out = model(x)\n    # back on\n\n    torch.set_grad_enabled(True)\n",
            [(3, "True", 7)],
            "import torch\ndef f(model, x):\n    with torch.no_grad():\n        out = model(x)\n        # back on\n",
        ),
    ],
    ids=["closer_before_return", "two_pairs", "non_literal_closer", "closer_comment"],
)
def test_paired_toggles_become_with_blocks(code, closers, fixed):
    found, got = _gf201(code)
    assert found == [
        (
            line, 4,
            _pair(mode, end),
            "Use `@torch.no_grad()` on `f`" if fixed.startswith("import torch\n@") else "Use `with torch.no_grad():`",
        )
        for line, mode, end in closers
    ]
    assert got == fixed


def test_a_module_level_pair_in_an_importable_module_hands_the_default_back():
    # importable: it defines a function (a file without definitions that prints is a script)
    pair = (
        "import torch\ntorch.set_grad_enabled(False)\nTABLE = torch.ones(3) * 2\ntorch.set_grad_enabled(True)\n\n"
        "def lookup(i):\n    return TABLE[i]\n"
    )
    assert _gf201(pair) == ([], pair)
    # a lone module-level `True` is no hand-back: it forces grad on for every importer
    lone = "import torch\ntorch.set_grad_enabled(True)\n\ndef lookup(i):\n    return i\n"
    found, _ = _gf201(lone)
    assert [(line, m) for line, _, m, _ in found] == [
        (2, "module-level `torch.set_grad_enabled(True)` changes the grad mode of every program that imports this module")
    ]


def test_a_toggle_that_another_follows_directly_is_not_rewritten():
    # nothing between them to scope: the first only sets the mode the second overrides
    code = "import torch\ndef f(model, x):\n    torch.set_grad_enabled(False)\n    torch.set_grad_enabled(True)\n    return model(x)\n"
    why = "no fix: another toggle follows it directly"
    assert _gf201(code) == (
        [
            (3, 4, "bare `torch.set_grad_enabled(False)` leaks the global grad mode to the caller", why),
            (4, 4, "bare `torch.set_grad_enabled(True)` leaks the global grad mode to the caller", why),
        ],
        code,
    )
