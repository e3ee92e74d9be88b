"""GF204 empty-grad-context."""

from __future__ import annotations

from gradfix.lazy import cst

from gradfix.analysis.regions import droppable_grad_with, is_inert_save, is_neutral_statement
from gradfix.analysis.statements import unwrap_with
from gradfix.model import FixSafety
from gradfix.rule import GRAD_APIS, Invalid, Rule, Valid


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
    triggers = GRAD_APIS

    VALID = [
        Valid(
            """
            import torch
            with torch.no_grad():
                y = model(x)
                del x
            """
        ),
        Valid(
            """
            import torch
            with torch.no_grad():
                print(model(x))
            """
        ),
        # A block holding `torch.save` is GF203's while GF203 runs: tests/rules/test_deferral.py.
        Valid(
            """
            import torch
            with torch.no_grad(), open(p) as fh:
                pass
            """
        ),
        Valid(
            """
            import torch
            with torch.no_grad() as ctx:
                pass
            """
        ),
        Valid(
            """
            import torch
            with torch.no_grad():
                cleanup(x)
            """
        ),
        Valid(
            """
            def f(torch, x):
                with torch.no_grad():
                    del x
            """
        ),
        Valid(
            """
            import torch
            print = log_to_tensorboard
            with torch.no_grad():
                print(x)
            """
        ),
        Valid(
            """
            import torch
            with torch.no_grad():
                if x:
                    del x
            """
        ),
        Valid(  # GF101
            """
            import torch
            with torch.no_grad:
                pass
            """
        ),
        Valid(
            """
            import torch
            with torch.no_grad():  # gradfix: ignore
                del x
            """
        ),
        Valid(
            """
            import torch
            with torch.set_grad_enabled(next(modes)):
                del x
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch

            # free memory
            with torch.set_grad_enabled(False):  # no graph
                del outputs, loss  # drop refs
                torch.cuda.empty_cache()
            x = 1
            """,
            """
            import torch

            # free memory
            # no graph
            del outputs, loss  # drop refs
            torch.cuda.empty_cache()
            x = 1
            """,
        ),
        Invalid(
            """
            import gc
            import logging
            import torch as T
            logger = logging.getLogger(__name__)
            def step(x, loss):
                with T.no_grad():
                    logger.info('loss %.3f', loss.item())
                    print(f'step {x.shape}')
                    gc.collect()
                return x
            """,
            """
            import gc
            import logging
            import torch as T
            logger = logging.getLogger(__name__)
            def step(x, loss):
                logger.info('loss %.3f', loss.item())
                print(f'step {x.shape}')
                gc.collect()
                return x
            """,
        ),
        Invalid(
            """
            from torch.autograd.grad_mode import inference_mode
            for b in batches:
                with inference_mode(): del b
            """,
            """
            from torch.autograd.grad_mode import inference_mode
            for b in batches:
                del b
            """,
        ),
        Invalid(
            """
            import torch
            def f(training):
                with torch.set_grad_enabled(training):
                    pass
            """,
            """
            import torch
            def f(training):
                pass
            """,
        ),
    ]

    def check(self, facts):
        # A `torch.save` of computed-nothing arguments is grad-neutral too (GF203's facts); a
        # block holding one is GF203's while GF203 runs.
        saves_are_mine = not self.defers_to("GF203")
        for node in facts.withs:
            if not droppable_grad_with(facts, node):  # a `with` body is never empty
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
