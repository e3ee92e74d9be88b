"""GF204 empty-grad-context."""

from __future__ import annotations

import libcst as cst

from gradfix.analysis.regions import droppable_grad_with, is_inert_save, is_neutral_statement
from gradfix.analysis.statements import unwrap_with
from gradfix.model import FixSafety
from gradfix.rule import Invalid, Rule, Valid


class EmptyGradContext(Rule):
    """
    ## What it does
    Finds a grad-mode `with` block (`torch.no_grad()`, `torch.enable_grad()`,
    `torch.set_grad_enabled(...)`, `torch.inference_mode()`) whose body runs no tensor
    computation: only `del`, `pass`, `gc.collect()`, `torch.cuda.empty_cache()`, and
    `print(...)`/logging calls whose arguments compute nothing (names, constants, `.item()`,
    f-strings of those).

    ## Why is this bad?
    The grad mode only matters while autograd could record operations. Deleting references,
    collecting garbage, emptying the CUDA cache or printing already computed values do the
    same in every grad mode (pinned in `tests/facts/test_gf204_facts.py`), so the block
    suggests an effect it does not have (the article's §5.3 "release memory" block).

    ## Example
    ```python
    with torch.set_grad_enabled(False):
        del outputs, loss
        torch.cuda.empty_cache()
    ```

    ## Use instead
    ```python
    del outputs, loss
    torch.cuda.empty_cache()
    ```

    ## Fix safety
    Safe: the statements run unchanged, outside the block; comments are kept. Any other call
    (or an argument that computes a tensor, whose printed `grad_fn` would differ), a `with`
    that also holds another context manager or binds a name with `as`, or a mode argument
    that is not a plain name or constant keeps the rule silent. A block that holds a
    `torch.save(...)` is GF203's while GF203 is enabled; with GF203 ignored, a save whose
    arguments compute nothing counts as grad-neutral here (it writes the same file in any mode).
    """

    code = "GF204"
    name = "empty-grad-context"
    summary = "Grad-mode `with` block whose body does no tensor computation"
    fix_safety = FixSafety.SAFE
    triggers = ("grad", "inference_mode")

    VALID = [
        Valid("import torch\nwith torch.no_grad():\n    y = model(x)\n    del x\n"),
        Valid("import torch\nwith torch.no_grad():\n    print(model(x))\n"),
        # A block holding `torch.save` is GF203's while GF203 runs: tests/rules/test_deferral.py.
        Valid("import torch\nwith torch.no_grad(), open(p) as fh:\n    pass\n"),
        Valid("import torch\nwith torch.no_grad() as ctx:\n    pass\n"),
        Valid("import torch\nwith torch.no_grad():\n    cleanup(x)\n"),
        Valid("def f(torch, x):\n    with torch.no_grad():\n        del x\n"),
        Valid("import torch\nprint = log_to_tensorboard\nwith torch.no_grad():\n    print(x)\n"),
        Valid("import torch\nwith torch.no_grad():\n    if x:\n        del x\n"),
        Valid("import torch\nwith torch.no_grad:\n    pass\n"),  # GF101
        Valid("import torch\nwith torch.no_grad():  # gradfix: ignore\n    del x\n"),
        Valid("import torch\nwith torch.set_grad_enabled(next(modes)):\n    del x\n"),
    ]
    INVALID = [
        Invalid(
            "import torch\n\n"
            "# free memory\n"
            "with torch.set_grad_enabled(False):  # no graph\n"
            "    del outputs, loss  # drop refs\n"
            "    torch.cuda.empty_cache()\n"
            "x = 1\n",
            "import torch\n\n"
            "# free memory\n"
            "# no graph\n"
            "del outputs, loss  # drop refs\n"
            "torch.cuda.empty_cache()\n"
            "x = 1\n",
        ),
        Invalid(
            "import gc\nimport logging\nimport torch as T\nlogger = logging.getLogger(__name__)\n"
            "def step(x, loss):\n"
            "    with T.no_grad():\n"
            "        logger.info('loss %.3f', loss.item())\n"
            "        print(f'step {x.shape}')\n"
            "        gc.collect()\n"
            "    return x\n",
            "import gc\nimport logging\nimport torch as T\nlogger = logging.getLogger(__name__)\n"
            "def step(x, loss):\n"
            "    logger.info('loss %.3f', loss.item())\n"
            "    print(f'step {x.shape}')\n"
            "    gc.collect()\n"
            "    return x\n",
        ),
        Invalid(
            "from torch.autograd.grad_mode import inference_mode\n"
            "for b in batches:\n"
            "    with inference_mode(): del b\n",
            "from torch.autograd.grad_mode import inference_mode\n"
            "for b in batches:\n"
            "    del b\n",
        ),
        Invalid(
            "import torch\ndef f(training):\n    with torch.set_grad_enabled(training):\n        pass\n",
            "import torch\ndef f(training):\n    pass\n",
        ),
    ]

    def check(self, facts):
        # A `torch.save` of computed-nothing arguments is grad-neutral too (GF203's facts); a
        # block holding one is GF203's while GF203 runs.
        saves_are_mine = not self.defers_to("GF203")
        for node in facts.withs:
            if not droppable_grad_with(facts, node) or not node.body:
                continue
            if all(
                is_neutral_statement(facts, stmt) or (saves_are_mine and is_inert_save(facts, stmt)) for stmt in node.body
            ):
                what = facts.segment(node.items[0].context_expr)
                yield self.report(
                    facts,
                    node,
                    f"`with {what}:` wraps no tensor computation (only del/pass/cleanup/logging)",
                    fix_title="Remove the block, keep its statements",
                    anchors=[node],
                )

    def fix(self, finding, ctx):
        from gradfix.fixer import Edit

        node = ctx.node_at(finding.span, cst.With)
        body = node.body
        if isinstance(body, cst.SimpleStatementSuite):
            line = cst.SimpleStatementLine(
                body=body.body, leading_lines=node.leading_lines, trailing_whitespace=body.trailing_whitespace
            )
            return [Edit(node, line)]
        return [Edit(node, cst.FlattenSentinel(unwrap_with(node, list(body.body))))]
