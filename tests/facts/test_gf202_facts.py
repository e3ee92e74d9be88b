"""PyTorch facts GF202 (nested-toggle-hack) relies on, checked on real torch."""

import pytest

torch = pytest.importorskip("torch")


def test_nested_enabling_with_records_a_graph():
    # The article's §3.1 claim ("the inner set_grad_enabled(True) cannot override the outer
    # False") is false: the inner block records graphs, so the §3.2 toggle hack is never needed.
    with torch.set_grad_enabled(False):
        with torch.set_grad_enabled(True):
            x = torch.randn(3, requires_grad=True)
            y = x * 2
        assert torch.is_grad_enabled() is False
    assert y.grad_fn is not None
    with torch.no_grad():
        with torch.enable_grad():
            z = x * 3
    assert z.grad_fn is not None


def test_toggle_hack_works_and_the_outer_with_restores_the_mode():
    assert torch.is_grad_enabled()
    with torch.set_grad_enabled(False):
        torch.set_grad_enabled(True)
        x = torch.randn(3, requires_grad=True)
        y = x * 2
        torch.set_grad_enabled(False)
        assert torch.is_grad_enabled() is False
    assert y.grad_fn is not None
    assert torch.is_grad_enabled()


def test_outer_with_restores_the_mode_after_an_exception_inside_the_toggle_pair():
    assert torch.is_grad_enabled()
    with pytest.raises(ZeroDivisionError):
        with torch.no_grad():
            torch.set_grad_enabled(True)
            1 / 0
            torch.set_grad_enabled(False)  # never reached
    assert torch.is_grad_enabled()
    with torch.no_grad():
        with pytest.raises(ZeroDivisionError):
            with torch.no_grad():
                torch.set_grad_enabled(True)
                1 / 0
        assert torch.is_grad_enabled() is False  # restored to the outer no_grad's mode


def _toggle_hack(x):
    with torch.no_grad():
        torch.set_grad_enabled(True)
        y = (x * x).sum()
        torch.set_grad_enabled(False)
        after = torch.is_grad_enabled()
    return y, after


def _block_style(x):
    with torch.no_grad():
        with torch.enable_grad():
            y = (x * x).sum()
        after = torch.is_grad_enabled()
    return y, after


def _function_style(x):
    with torch.no_grad():

        @torch.enable_grad()
        def _with_grad(x):
            y = (x * x).sum()
            return y

        y = _with_grad(x)
        after = torch.is_grad_enabled()
    return y, after


@pytest.mark.parametrize("rewrite", [_block_style, _function_style])
def test_rewrites_give_identical_values_grads_and_mode(rewrite):
    x1 = torch.arange(4.0, requires_grad=True)
    x2 = torch.arange(4.0, requires_grad=True)
    y1, after1 = _toggle_hack(x1)
    y2, after2 = rewrite(x2)
    assert after1 is after2 is False
    assert torch.equal(y1, y2)
    assert (y1.grad_fn is None) == (y2.grad_fn is None) == False  # noqa: E712
    y1.backward()
    y2.backward()
    assert torch.equal(x1.grad, x2.grad)
    assert torch.is_grad_enabled()


def test_toggle_and_enable_grad_agree_inside_inference_mode():
    # GF202 also treats inference_mode as grad-disabled: the toggle and enable_grad() set the
    # same grad-mode flag there, so the rewrite keeps whatever torch does (inference tensors).
    x = torch.ones(2, requires_grad=True)
    with torch.inference_mode():
        torch.set_grad_enabled(True)
        a = x * 2
        mode_a = torch.is_grad_enabled()
        torch.set_grad_enabled(False)
        with torch.enable_grad():
            b = x * 2
            mode_b = torch.is_grad_enabled()
        after = torch.is_grad_enabled()
    assert mode_a is mode_b is True
    assert after is False
    assert torch.is_inference(a) == torch.is_inference(b)
    assert (a.grad_fn is None) == (b.grad_fn is None)
    assert a.requires_grad == b.requires_grad


# What the rule reports and rewrites where scripts/mutate.py found nothing pinned: the fix
# titles, a comment before the closing toggle, a captured `torch`, the hoisted saves of the
# block style, the helper's place among the comments above the statement it goes before.
def _run(code: str, **options):
    from gradfix import Settings, check, fix

    settings = Settings(select=("GF202",), unsafe_fixes=True, rule_options={"GF202": options})
    return check(code, settings=settings), fix(code, settings=settings)


NOT_FIXABLE = "toggle hack inside `with torch.no_grad():` (line 2): it flips the global grad mode by hand (not auto-fixable here)"


def test_toggles_around_a_save_only_are_removed():
    code = "import torch\nwith torch.no_grad():\n    torch.set_grad_enabled(True)\n    torch.save(sd, p)\n\n    torch.set_grad_enabled(False)\n"
    [finding], fixed = _run(code)
    assert (finding.span.line, finding.span.col) == (3, 4)
    assert finding.fix_title == "Remove the toggles: nothing between them needs grad"
    assert fixed == "import torch\nwith torch.no_grad():\n    torch.save(sd, p)\n"


def test_a_comment_right_before_a_closing_toggle_that_ends_the_block_is_not_lost():
    # Removing the toggles would leave the comment with no statement after it.
    code = "import torch\nwith torch.no_grad():\n    torch.set_grad_enabled(True)\n    torch.save(sd, p)\n    # keep me\n    torch.set_grad_enabled(False)\n"
    [finding], fixed = _run(code)
    assert finding.message == NOT_FIXABLE
    assert finding.fix is None and fixed == code


def test_a_parameter_named_torch_makes_the_fix_impossible():
    # The fix writes `torch.enable_grad()`: here `torch` is the parameter, not the module.
    code = (
        "from torch import no_grad, set_grad_enabled\ndef f(torch, x):\n    with no_grad():\n"
        "        set_grad_enabled(True)\n        y = x * 2\n        set_grad_enabled(False)\n        z = y + 1\n    return z\n"
    )
    [finding], fixed = _run(code)
    assert (finding.span.line, finding.span.col) == (4, 8)
    assert finding.message.endswith("(not auto-fixable here)") and finding.fix is None
    assert fixed == code


def test_block_style_leaves_trailing_saves_after_the_new_block():
    code = (
        "import torch\nwith torch.no_grad():\n    torch.set_grad_enabled(True)\n    y = model(x)\n"
        "    torch.save(sd, p)\n    torch.set_grad_enabled(False)\n    z = y\n"
    )
    [finding], fixed = _run(code, style="block")
    assert finding.fix_title == "Use `with torch.enable_grad():` instead of the toggles"
    assert fixed == (
        "import torch\nwith torch.no_grad():\n    with torch.enable_grad():\n        y = model(x)\n"
        "    torch.save(sd, p)\n    z = y\n"
    )


def test_at_module_level_the_block_style_is_used_and_the_title_says_why():
    code = "import torch\nwith torch.no_grad():\n    torch.set_grad_enabled(True)\n    n = f(1)\n    torch.set_grad_enabled(False)\n"
    [finding], fixed = _run(code)
    assert finding.fix_title == (
        "Use `with torch.enable_grad():` instead of the toggles (no helper: at module level every name it binds"
        " is a global that any code may read)"
    )
    assert fixed == "import torch\nwith torch.no_grad():\n    with torch.enable_grad():\n        n = f(1)\n"


def test_the_helper_goes_after_the_blank_line_and_before_the_comments_of_the_function():
    code = (
        "import torch\n\n# helper below\n\n# about f\ndef f(x):\n    with torch.no_grad():\n        torch.set_grad_enabled(True)\n"
        "        y = x * 2\n        torch.set_grad_enabled(False)\n        z = y + 1\n    return z\n"
    )
    [finding], fixed = _run(code)
    assert finding.fix_title == "Move the statements into a helper `_y_with_grad` decorated `@torch.enable_grad()`, at module level"
    assert fixed == (
        "import torch\n\n@torch.enable_grad()\ndef _y_with_grad(x):\n    y = x * 2\n    return y\n\n\n# helper below\n\n# about f\n"
        "def f(x):\n    with torch.no_grad():\n        y = _y_with_grad(x)\n        z = y + 1\n    return z\n"
    )


def test_a_helper_that_needs_a_closure_variable_goes_before_the_with():
    code = (
        "import torch\ndef outer(w):\n    def f(x):\n        with torch.no_grad():\n            torch.set_grad_enabled(True)\n"
        "            y = x * w\n            torch.set_grad_enabled(False)\n            z = y + 1\n        return z\n    return f\n"
    )
    [finding], fixed = _run(code)
    assert finding.fix_title.endswith("decorated `@torch.enable_grad()`, before the `with`")
    assert fixed == (
        "import torch\ndef outer(w):\n    def f(x):\n        @torch.enable_grad()\n        def _y_with_grad(x):\n"
        "            y = x * w\n            return y\n\n        with torch.no_grad():\n            y = _y_with_grad(x)\n"
        "            z = y + 1\n        return z\n    return f\n"
    )
