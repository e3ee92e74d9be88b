"""GF203 save-in-grad-context."""

from __future__ import annotations

import ast

from gradfix.lazy import cst

from gradfix.model import FixSafety
from gradfix.rule import Invalid, Rule, Valid
from gradfix.rules.gf204_empty_grad_context import (
    droppable_grad_with,
    grad_with_regions,
    is_inert,
    is_neutral_statement,
    unwrap_with,
)


def is_inert_save(facts, stmt: ast.stmt) -> bool:
    """A bare ``torch.save(...)`` statement whose arguments compute nothing.

    ``torch.save(model(x), f)`` is not: the argument is evaluated under the block's grad mode
    and saves a different tensor outside it (pinned in tests/facts/test_gf203_facts.py).
    """
    if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)):
        return False
    call = stmt.value
    if facts.call_qualname(call) != "torch.save":
        return False
    return all(is_inert(facts, a) for a in call.args) and all(is_inert(facts, k.value) for k in call.keywords)


def trailing_saves(facts, body: list[ast.stmt]) -> int:
    """How many statements at the end of ``body`` are inert ``torch.save`` calls."""
    count = 0
    for stmt in reversed(body):
        if not is_inert_save(facts, stmt):
            break
        count += 1
    return count


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

    VALID = [
        Valid("import torch\ntorch.save(model.state_dict(), 'model.pth')\n"),
        Valid("import torch\nwith torch.no_grad():\n    torch.save(model(x), 'out.pt')\n"),
        Valid("import torch\nwith open(p, 'wb') as fh:\n    torch.save(sd, fh)\n"),
        Valid("import torch\nwith torch.no_grad():\n    save(sd, 'm.pth')\n"),
        Valid("def f(torch, sd):\n    with torch.no_grad():\n        torch.save(sd, 'm.pth')\n"),
        Valid("import torch\nwith torch.no_grad():\n    if best:\n        torch.save(sd, 'm.pth')\n"),
        Valid("import torch\nwith torch.no_grad:\n    torch.save(sd, 'm.pth')\n"),  # GF101's
        Valid("import torch\nwith torch.no_grad():  # gradfix: ignore[GF203]\n    torch.save(sd, 'm.pth')\n"),
        Valid("import torch\nwith torch.no_grad() if ema else contextlib.nullcontext():\n    torch.save(sd, 'm.pth')\n"),
    ]
    INVALID = [
        Invalid(
            "import torch\n"
            "# 错误做法：可能在no_grad上下文中保存\n"
            "with torch.no_grad():\n"
            "    torch.save(model.state_dict(), 'model.pth')\n",
            "import torch\n"
            "# 错误做法：可能在no_grad上下文中保存\n"
            "torch.save(model.state_dict(), 'model.pth')\n",
        ),
        Invalid(
            "from torch import save\nimport torch as T\n"
            "def evaluate(model, opt, epoch):\n"
            "    with T.no_grad():\n"
            "        acc = score(model)\n"
            "        # checkpoint\n"
            "        save({'model': model.state_dict(), 'opt': opt.state_dict(), 'acc': acc}, f'ckpt_{epoch}.pt')\n"
            "        save(acc, 'acc.pt')  # metric\n"
            "    return acc\n",
            "from torch import save\nimport torch as T\n"
            "def evaluate(model, opt, epoch):\n"
            "    with T.no_grad():\n"
            "        acc = score(model)\n"
            "    # checkpoint\n"
            "    save({'model': model.state_dict(), 'opt': opt.state_dict(), 'acc': acc}, f'ckpt_{epoch}.pt')\n"
            "    save(acc, 'acc.pt')  # metric\n"
            "    return acc\n",
        ),
        Invalid(
            "import torch\nwith torch.inference_mode():  # eval\n"
            "    print('saving')\n"
            "    torch.serialization.save(sd, path)\n",
            "import torch\n# eval\n"
            "print('saving')\n"
            "torch.serialization.save(sd, path)\n",
        ),
        Invalid(
            "import os\nimport torch\nwith torch.no_grad(): torch.save(sd, os.path.join(d, 'm.pth'))\n",
            "import os\nimport torch\ntorch.save(sd, os.path.join(d, 'm.pth'))\n",
        ),
        Invalid(
            "import torch\nwith torch.no_grad():\n    torch.save(sd, 'm.pth')\n    model.load_state_dict(other)\n",
            None,
        ),
        Invalid("import torch\nwith torch.no_grad(), open(p, 'wb') as fh:\n    torch.save(sd, fh)\n", None),
        Invalid("import torch\nwith torch.no_grad() as g:\n    torch.save(sd, p)\n", None),
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
                        f"`torch.save` inside `with {what}:`: the grad mode does not change what is saved; "
                        "it is followed by other statements, so it is not moved automatically "
                        "(moving it past them could change what is saved)",
                        fix=False,
                        anchors=[node],
                    )
            if not count:
                continue
            first = node.body[-count]
            mode, why = self._plan(facts, node, count)
            message = f"`torch.save` inside `with {what}:`: the grad mode does not change what is saved; save after the block"
            if why:
                message += f" (not fixed automatically: {why})"
            yield self.report(facts, first, message, fix=mode is not None, anchors=[node], data=(facts.span(node), count, mode))

    @staticmethod
    def _plan(facts, node: ast.With, count: int) -> tuple[str | None, str]:
        if len(node.items) != 1:
            return None, "the `with` holds another context manager that the save would leave"
        rest = node.body[: len(node.body) - count]
        one_line = node.body[0].lineno == node.lineno
        if all(is_neutral_statement(facts, s) for s in rest):
            if droppable_grad_with(facts, node):
                return "unwrap", ""
            if not rest:
                return None, "the block binds a name with `as` or evaluates a mode expression"
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
