"""GF203 save-in-grad-context."""

from __future__ import annotations

import ast

from gradfix.lazy import cst

from gradfix.analysis.regions import (
    droppable_grad_with,
    grad_with_regions,
    is_inert_save,
    is_neutral_statement,
    trailing_saves,
)
from gradfix.analysis.statements import unwrap_with
from gradfix.model import FixSafety
from gradfix.rule import GRAD_APIS, Invalid, Rule, Valid


class SaveInGradContext(Rule):
    """
    ## What it does
    Finds `torch.save(...)` as the trailing statement(s) of a grad-mode `with` block
    (`torch.no_grad()`, `torch.enable_grad()`, `torch.set_grad_enabled(...)`,
    `torch.inference_mode()`), when its arguments compute nothing (names, attributes,
    `.state_dict()`, dict/list literals of those, paths).

    ## Why is this bad?
    The grad mode does not change what `torch.save` writes: a state dict saved inside
    `no_grad` and outside it gives byte-identical files (pinned in
    `tests/facts/test_gf203_facts.py`). The article's §6.2 calls the block the "wrong way";
    it is harmless, but it suggests that saving depends on the grad mode. Hoisting the save
    is a clarity fix, not a bug fix.

    ## Example
    ```python
    with torch.no_grad():
        torch.save(model.state_dict(), "model.pth")
    ```

    ## Use instead
    ```python
    torch.save(model.state_dict(), "model.pth")
    ```

    ## Fix safety
    Safe: the trailing saves move right after the block, at its indentation; the block is
    dropped when nothing else is left in it, or when what is left does no tensor work (the
    statements GF204 accepts), so a second run finds nothing. Not fixed, only reported: a
    save followed by other statements in the block (moving it past them could change what
    is saved), a `with` that also holds another context manager (`open(...)`: the save would
    leave it), and a block that binds a name with `as` and would become empty. A save whose
    argument computes a tensor (`torch.save(model(x), f)`) is not reported: there the grad
    mode changes what is written.
    """

    code = "GF203"
    name = "save-in-grad-context"
    summary = "`torch.save` at the end of a grad-mode `with` block"
    fix_safety = FixSafety.SAFE
    triggers = ("save",)
    requires = (GRAD_APIS,)

    VALID = [
        Valid(
            """
            import torch
            torch.save(model.state_dict(), 'model.pth')
            """
        ),
        Valid(
            """
            import torch
            with torch.no_grad():
                torch.save(model(x), 'out.pt')
            """
        ),
        Valid(
            """
            import torch
            with open(p, 'wb') as fh:
                torch.save(sd, fh)
            """
        ),
        Valid(
            """
            import torch
            with torch.no_grad():
                save(sd, 'm.pth')
            """
        ),
        Valid(
            """
            def f(torch, sd):
                with torch.no_grad():
                    torch.save(sd, 'm.pth')
            """
        ),
        Valid(
            """
            import torch
            with torch.no_grad():
                if best:
                    torch.save(sd, 'm.pth')
            """
        ),
        Valid(  # GF101's
            """
            import torch
            with torch.no_grad:
                torch.save(sd, 'm.pth')
            """
        ),
        Valid(
            """
            import torch
            with torch.no_grad():  # gradfix: ignore[GF203]
                torch.save(sd, 'm.pth')
            """
        ),
        Valid(
            """
            import torch
            with torch.no_grad() if ema else contextlib.nullcontext():
                torch.save(sd, 'm.pth')
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            # 错误做法：可能在no_grad上下文中保存
            with torch.no_grad():
                torch.save(model.state_dict(), 'model.pth')
            """,
            """
            import torch
            # 错误做法：可能在no_grad上下文中保存
            torch.save(model.state_dict(), 'model.pth')
            """,
        ),
        Invalid(
            """
            from torch import save
            import torch as T
            def evaluate(model, opt, epoch):
                with T.no_grad():
                    acc = score(model)
                    # checkpoint
                    save({'model': model.state_dict(), 'opt': opt.state_dict(), 'acc': acc}, f'ckpt_{epoch}.pt')
                    save(acc, 'acc.pt')  # metric
                return acc
            """,
            """
            from torch import save
            import torch as T
            def evaluate(model, opt, epoch):
                with T.no_grad():
                    acc = score(model)
                # checkpoint
                save({'model': model.state_dict(), 'opt': opt.state_dict(), 'acc': acc}, f'ckpt_{epoch}.pt')
                save(acc, 'acc.pt')  # metric
                return acc
            """,
        ),
        Invalid(
            """
            import torch
            with torch.inference_mode():  # eval
                print('saving')
                torch.serialization.save(sd, path)
            """,
            """
            import torch
            # eval
            print('saving')
            torch.serialization.save(sd, path)
            """,
        ),
        Invalid(
            """
            import os
            import torch
            with torch.no_grad(): torch.save(sd, os.path.join(d, 'm.pth'))
            """,
            """
            import os
            import torch
            torch.save(sd, os.path.join(d, 'm.pth'))
            """,
        ),
        Invalid(
            """
            import torch
            with torch.no_grad():
                torch.save(sd, 'm.pth')
                model.load_state_dict(other)
            """,
            None,
        ),
        Invalid(
            """
            import torch
            with torch.no_grad(), open(p, 'wb') as fh:
                torch.save(sd, fh)
            """,
            None,
        ),
        Invalid(
            """
            import torch
            with torch.no_grad() as g:
                torch.save(sd, p)
            """,
            None,
        ),
    ]

    def check(self, facts):
        for node in facts.withs:
            if not isinstance(node, ast.With):
                continue
            regions = [r for r in grad_with_regions(facts, node) if r.api is not None and r.called]
            if not regions:
                continue
            what = facts.segment(regions[0].expr)
            count = trailing_saves(facts, node.body)
            for stmt in node.body[: len(node.body) - count]:
                if is_inert_save(facts, stmt):
                    yield self.report(
                        facts,
                        stmt,
                        f"`torch.save` inside `with {what}:` (line {node.lineno}) writes the same file in any grad mode",
                        no_fix="other statements follow it in the block",
                        anchors=[node],
                    )
            if not count:
                continue
            first = node.body[-count]
            mode, why = self._plan(facts, node, count)
            message = f"`torch.save` inside `with {what}:` (line {node.lineno}) writes the same file in any grad mode"
            title = "Remove the block, keep its statements" if mode == "unwrap" else "Move the save after the block"
            yield self.report(
                facts, first, message, fix=mode is not None, fix_title=title, anchors=[node], data=(facts.span(node), count, mode),
                no_fix=why or None,
            )

    @staticmethod
    def _plan(facts, node: ast.With, count: int) -> tuple[str | None, str]:
        if len(node.items) != 1:
            return None, "the `with` holds another context manager"
        rest = node.body[: len(node.body) - count]
        one_line = node.body[0].lineno == node.lineno
        if all(is_neutral_statement(facts, s) for s in rest):
            if droppable_grad_with(facts, node):
                return "unwrap", ""
            if not rest:
                return None, "the block binds `as` or computes its mode"
        if one_line:
            return None, "the block is written on one line"
        return "hoist", ""

    def fix(self, finding, ctx):
        from gradfix.fixer import Edit, FixError

        with_span, count, mode = finding.data
        node = ctx.node_at(with_span, cst.With)
        body = node.body
        if isinstance(body, cst.SimpleStatementSuite):
            if mode != "unwrap":
                raise FixError("one-line block")
            small = list(body.body)
            small[-1] = small[-1].with_changes(semicolon=cst.MaybeSentinel.DEFAULT)
            line = cst.SimpleStatementLine(
                body=small, leading_lines=node.leading_lines, trailing_whitespace=body.trailing_whitespace
            )
            return [Edit(node, line)]
        statements = list(body.body)
        if len(statements) < count:
            raise FixError("the block changed")
        if mode == "unwrap":
            return [Edit(node, cst.FlattenSentinel(unwrap_with(node, statements)))]
        kept, saves = statements[:-count], statements[-count:]
        new_with = node.with_changes(body=body.with_changes(body=kept))
        return [Edit(node, cst.FlattenSentinel([new_with, *saves]))]
