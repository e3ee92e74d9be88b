"""GF205 prefer-specific-grad-api."""

from __future__ import annotations

import ast
from dataclasses import dataclass

from gradfix.lazy import cst

from gradfix.facts import FileFacts, literal_bool
from gradfix.model import FixSafety
from gradfix.rule import Invalid, Rule, Valid


@dataclass(frozen=True)
class _Plan:
    api: str  # "no_grad" or "enable_grad"
    import_module: str | None  # ``from <module> import set_grad_enabled``: drop it if unused


class PreferSpecificGradApi(Rule):
    """
    ## What it does
    Finds `with torch.set_grad_enabled(False):` / `(True)` (and the decorator
    `@torch.set_grad_enabled(False)`) whose argument is a literal, and suggests
    `torch.no_grad()` / `torch.enable_grad()`.

    ## Why is this bad?
    It is not a bug: with a literal argument the mode is fixed, and the specific API says so
    in its name. `set_grad_enabled` is the tool for a mode known only at run time
    (`torch.set_grad_enabled(is_training)`); seeing it with a constant makes readers look
    for a condition that is not there. This rule is **off by default**: the article this
    project started from recommends the opposite team convention ("always use
    `set_grad_enabled`"), and either choice is fine. Enable it with
    `--extend-select GF205` (or `select = ["GF205"]` in the config).

    ## Example
    ```python
    with torch.set_grad_enabled(False):
        preds = model(x)

    @T.set_grad_enabled(True)
    def finetune_step(batch): ...
    ```

    ## Use instead
    ```python
    with torch.no_grad():
        preds = model(x)

    @T.enable_grad()
    def finetune_step(batch): ...
    ```

    ## Fix safety
    Safe: inside the block (or decorated function) the grad mode is the same, the previous
    mode is restored on exit and on exceptions, `as` binds `None` in both cases, and
    generator functions are wrapped the same way (pinned in
    `tests/facts/test_gf205_facts.py`). The file's spelling of torch is kept
    (`T.set_grad_enabled(False)` -> `T.no_grad()`, `torch.autograd.set_grad_enabled` ->
    `torch.autograd.no_grad`); after `from torch import set_grad_enabled` the fix writes
    `torch.no_grad()`, adds `import torch` if needed and drops the `from` import when nothing
    uses it any more. A non-literal argument (`set_grad_enabled(train)`) is never reported,
    nor is a bare `set_grad_enabled(False)` statement (that is GF201).
    """

    code = "GF205"
    name = "prefer-specific-grad-api"
    summary = "`set_grad_enabled` with a literal mode: use `no_grad()` / `enable_grad()`"
    fix_safety = FixSafety.SAFE
    default_enabled = False
    triggers = ("set_grad_enabled",)

    VALID = [
        Valid(
            """
            import torch
            def f(x, train):
                with torch.set_grad_enabled(train):
                    return g(x)
            """
        ),
        Valid(
            """
            import torch
            @torch.set_grad_enabled(mode=is_training)
            def f(x):
                return g(x)
            """
        ),
        Valid(
            """
            import torch
            with torch.no_grad():
                y = g(x)
            """
        ),
        Valid(
            """
            def f(torch, x):
                with torch.set_grad_enabled(False):
                    return g(x)
            """
        ),
        Valid(
            """
            import torch
            def f(x):
                torch.set_grad_enabled(False)
                return g(x)
            """
        ),
        Valid(
            """
            import torch
            with torch.set_grad_enabled(False) if frozen else nullcontext():
                y = g(x)
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            with torch.set_grad_enabled(False):  # eval
                y = model(x)
            """,
            """
            import torch
            with torch.no_grad():  # eval
                y = model(x)
            """,
        ),
        Invalid(
            """
            import torch as T

            @T.set_grad_enabled(True)
            def step(batch):
                return loss(batch)
            """,
            """
            import torch as T

            @T.enable_grad()
            def step(batch):
                return loss(batch)
            """,
        ),
        Invalid(
            """
            import torch
            with open(p) as fh, torch.autograd.set_grad_enabled(mode=False):
                pass
            """,
            """
            import torch
            with open(p) as fh, torch.autograd.no_grad():
                pass
            """,
        ),
        Invalid(
            """
            from torch import set_grad_enabled

            with set_grad_enabled(False):
                y = model(x)
            """,
            """
            import torch

            with torch.no_grad():
                y = model(x)
            """,
        ),
    ]

    def check(self, facts: FileFacts):
        for region in facts.regions:
            if region.api != "torch.set_grad_enabled" or not isinstance(region.expr, ast.Call):
                continue
            call = region.expr
            if len(call.args) + len(call.keywords) != 1:
                continue
            arg = call.args[0] if call.args else (call.keywords[0].value if call.keywords[0].arg == "mode" else None)
            mode = literal_bool(arg)
            if mode is None:
                continue
            api = "enable_grad" if mode else "no_grad"
            func = call.func
            if not isinstance(func, ast.Attribute) and not facts.torch_name_writable():
                continue  # `torch` names something else here: no short spelling to offer
            prefix = facts.segment(func.value) if isinstance(func, ast.Attribute) else "torch"
            yield self.report(
                facts,
                call,
                f"`{facts.segment(call)}` has a constant mode: `{prefix}.{api}()` says the same by name",
                fix_title=f"Write `{prefix}.{api}()`",
                anchors=[region.owner],
                data=_Plan(api, facts.imported_from(call, "set_grad_enabled")),
            )

    def fix(self, finding, ctx):
        from gradfix.fixer import Edit

        plan: _Plan = finding.data
        call = ctx.node_at(finding.span, cst.Call)
        if isinstance(call.func, cst.Attribute):
            prefix = ctx.code(call.func.value)
        else:
            prefix = ctx.torch_name()
            if plan.import_module is not None:
                ctx.remove_import_if_unused(plan.import_module, "set_grad_enabled")
        new = ctx.expr(f"{prefix}.{plan.api}()")
        return [Edit(call, new)]
