"""GF101 context-manager-not-called."""

from __future__ import annotations

from gradfix.lazy import cst

from gradfix.model import FixSafety
from gradfix.rule import GRAD_APIS, Invalid, Rule, Valid


class ContextManagerNotCalled(Rule):
    """
    ## What it does
    Finds `with torch.no_grad:` (and `enable_grad`, `inference_mode`, `set_grad_enabled`)
    used as a with-item without calling it.

    ## Why is this bad?
    The class itself is not a context manager: the `with` statement raises
    `TypeError: 'type' object does not support the context manager protocol` (pinned in
    `tests/facts/test_gf101_facts.py`). The code has never run.

    ## Example
    ```python
    with torch.no_grad:
        preds = model(x)
    ```

    ## Use instead
    ```python
    with torch.no_grad():
        preds = model(x)
    ```

    ## Fix safety
    Safe: the code raises `TypeError` today; adding `()` makes it do what it says.
    `set_grad_enabled` needs a mode argument, so it is reported without a fix.
    A bare decorator (`@torch.no_grad`) works on current torch and is not reported.
    """

    code = "GF101"
    name = "context-manager-not-called"
    summary = "Grad context manager used in `with` without calling it"
    fix_safety = FixSafety.SAFE
    fix_title = "Call the context manager: add `()`"
    triggers = GRAD_APIS

    VALID = [
        Valid(
            """
            import torch
            with torch.no_grad():
                y = f(x)
            """
        ),
        Valid(
            """
            import torch
            @torch.no_grad
            def f(x):
                return x
            """
        ),
        Valid(
            """
            import torch
            ctx = torch.no_grad
            with ctx():
                pass
            """
        ),
        Valid(
            """
            def f(torch):
                with torch.no_grad:
                    pass
            """
        ),
        Valid(
            """
            import torch
            with torch.set_grad_enabled(False):
                pass
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            with torch.no_grad:  # eval
                y = f(x)
            """,
            """
            import torch
            with torch.no_grad():  # eval
                y = f(x)
            """,
        ),
        Invalid(
            """
            import torch as T
            with T.inference_mode, open(p) as fh:
                pass
            """,
            """
            import torch as T
            with T.inference_mode(), open(p) as fh:
                pass
            """,
        ),
        Invalid(
            """
            from torch.autograd.grad_mode import enable_grad
            with enable_grad:
                pass
            """,
            """
            from torch.autograd.grad_mode import enable_grad
            with enable_grad():
                pass
            """,
        ),
        Invalid(
            """
            import torch
            with torch.set_grad_enabled:
                pass
            """,
            None,
        ),
    ]

    def check(self, facts):
        for region in facts.regions:
            if region.kind == "with" and not region.called:
                fixable = region.api != "torch.set_grad_enabled"
                what = facts.segment(region.expr)
                yield self.report(
                    facts,
                    region.expr,
                    f"`{what}` is not called: `with {what}:` raises TypeError"
                    + ("" if fixable else " (it needs a mode)"),
                    fix=fixable,
                    anchors=[region.owner],
                )

    def fix(self, finding, ctx):
        from gradfix.fixer import Edit

        node = ctx.node_at(finding.span, cst.BaseExpression)
        return [Edit(node, cst.Call(func=node))]

    @staticmethod
    def contract():
        # gradfix verify: the TypeError disappears; the code after it now runs.
        from gradfix.verify.contract import Contract, ExceptionFixed

        return Contract(
            "the TypeError disappears", ("exception",), (ExceptionFixed("TypeError", "context manager"),), downstream=True
        )
