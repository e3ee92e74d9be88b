"""GF202 nested-toggle-hack."""

from __future__ import annotations

from gradfix.lazy import cst

from gradfix.analysis.extract import Extraction, helper_name, helper_placement, identifiers, plan_extraction
from gradfix.analysis.regions import grad_with_regions, is_neutral_statement, trailing_saves
from gradfix.analysis.statements import alone_on_its_line, comment_lines, torch_reachable
from gradfix.analysis.toggles import toggle_pairs
from gradfix.model import FixSafety
from gradfix.rule import Invalid, Option, Rule, Valid


def _anchor(ctx, block, placement: str, with_line: int):
    """The CST statement the helper goes before: the top-level statement, or the ``with``."""
    from gradfix.fixer import FixError

    node = block
    while node is not None:
        parent = ctx.parent(node)
        if placement == "module" and isinstance(parent, cst.Module):
            return node
        if placement == "before" and isinstance(node, cst.With) and ctx.span_of(node).line == with_line:
            return node
        node = parent
    raise FixError("the block moved")


def _replacer(replaced: dict):
    """A transformer that swaps the given original statements (``RemoveFromParent`` drops one)."""

    class Replace(cst.CSTTransformer):
        def on_leave(self, original_node, updated_node):
            return replaced.get(original_node, updated_node)

    return Replace()


class NestedToggleHack(Rule):
    """
    ## What it does
    Finds the "toggle hack" of the article's §3.2: inside a grad-disabled `with` block
    (`torch.no_grad()`, `torch.set_grad_enabled(False)`, `torch.inference_mode()`), a bare
    `torch.set_grad_enabled(True)` statement and the bare `torch.set_grad_enabled(False)` that
    ends it, to compute something with gradients in between.

    ## Why is this bad?
    It is built on a false claim (§3.1): an inner `with torch.enable_grad():` (or
    `set_grad_enabled(True)`) *does* record graphs inside `no_grad` (pinned in
    `tests/facts/test_gf202_facts.py`). The toggles flip a thread-global switch by hand; it
    works only because the outer `with` restores the mode on exit, and one forgotten or
    skipped `set_grad_enabled(False)` leaves the rest of the block recording graphs.

    ## Example
    ```python
    def refine(model, x):
        with torch.no_grad():
            feats = model.encoder(x)
            torch.set_grad_enabled(True)
            feats.requires_grad_(True)
            score = model.head(feats).sum()
            torch.set_grad_enabled(False)
            return score, feats
    ```

    ## Use instead
    ```python
    @torch.enable_grad()
    def _score_with_grad(feats, model):
        feats.requires_grad_(True)
        score = model.head(feats).sum()
        return score


    def refine(model, x):
        with torch.no_grad():
            feats = model.encoder(x)
            score = _score_with_grad(feats, model)
            return score, feats
    ```
    With `style = "block"` (option of GF202), or where a helper cannot be extracted:
    ```python
            with torch.enable_grad():
                feats.requires_grad_(True)
                score = model.head(feats).sum()
    ```

    ## Fix safety
    Safe: both forms enable grad for exactly those statements and end with the mode off,
    as the toggles did; an exception leaves the outer `with` either way, which restores the
    caller's mode. The default `function` style moves the statements into a helper decorated
    with `@torch.enable_grad()`, as the article advises (a function boundary), defined outside
    the grad-disabled block: at module level, just before the top-level statement that holds
    the block, when the statements need nothing from the enclosing function but what the
    helper is passed (their other names are globals or builtins); just before the `with`
    when they read a closure variable of an outer function, or a private `__name` that the
    class would mangle. It takes the variables they read that the function assigned before
    (or its parameters) and returns the variables they assign that are read anywhere else in
    the function; it is named for the last variable it returns (`_score_with_grad`), else for
    the last call it makes (`_backward_with_grad`). It falls back to `block` style when the
    statements `return`, `yield`, `await`, `break`/`continue` an outer loop, use
    `global`/`nonlocal`, `del` a variable, define a function, class or generator expression
    (a closure would capture the helper's variables), call `locals()`/`super()`…, may read a
    variable before it is assigned, or assign a returned variable only on some paths; and at
    module level or in a class body (every name bound there is an attribute any code may
    read). When the statements between the toggles do no tensor work (GF204's statements),
    the toggles are simply removed; trailing `torch.save` calls go after the new block
    (GF203). Only the pair is claimed: a lone `torch.set_grad_enabled(True)` in the block, or a
    pair after another toggle, is left to GF201. Comments of the removed toggles are kept.
    """

    code = "GF202"
    name = "nested-toggle-hack"
    summary = "`set_grad_enabled(True)` … `set_grad_enabled(False)` toggles inside a grad-disabled `with`"
    fix_safety = FixSafety.SAFE
    triggers = ("set_grad_enabled",)
    options = (
        Option(
            "style",
            ("function", "block"),
            "`function`: move the statements into a helper decorated with `@torch.enable_grad()`; "
            "`block`: wrap them in `with torch.enable_grad():`",
        ),
    )

    VALID = [
        # A pair outside any grad-disabled `with` is GF201's.
        Valid(
            """
            import torch
            def f(x):
                torch.set_grad_enabled(True)
                y = x * 2
                torch.set_grad_enabled(False)
            """
        ),
        Valid(
            """
            import torch
            with torch.no_grad():
                with torch.set_grad_enabled(True):
                    y = x * 2
            """
        ),
        Valid(
            """
            import torch
            with torch.no_grad():
                torch.set_grad_enabled(True)
                y = x * 2
            """
        ),
        Valid(
            """
            import torch
            with torch.enable_grad():
                torch.set_grad_enabled(True)
                y = x * 2
                torch.set_grad_enabled(False)
            """
        ),
        Valid(
            """
            import torch
            with torch.no_grad():
                torch.set_grad_enabled(mode)
                y = x * 2
                torch.set_grad_enabled(False)
            """
        ),
        Valid(
            """
            import torch
            with torch.no_grad() if frozen else contextlib.nullcontext():
                torch.set_grad_enabled(True)
                y = x * 2
                torch.set_grad_enabled(False)
            """
        ),
        Valid(
            """
            def f(torch, x):
                with torch.no_grad():
                    torch.set_grad_enabled(True)
                    y = x * 2
                    torch.set_grad_enabled(False)
            """
        ),
        # Under a `try` the handler would run with grad on: not claimed (GF201's).
        Valid(
            """
            import torch
            with torch.no_grad():
                try:
                    torch.set_grad_enabled(True)
                    y = x * 2
                    torch.set_grad_enabled(False)
                except RuntimeError:
                    y = None
            """
        ),
        # A nested pair that can `continue` past its closing toggle leaks into the next step.
        Valid(
            """
            import torch
            with torch.no_grad():
                for x in xs:
                    torch.set_grad_enabled(True)
                    if x is None:
                        continue
                    y = x * 2
                    torch.set_grad_enabled(False)
            """
        ),
        Valid(
            """
            import torch
            with torch.no_grad():  # noqa: GF202
                torch.set_grad_enabled(True)
                y = x * 2
                torch.set_grad_enabled(False)
            """
        ),
        # After a lone True the mode at the next True is not off: not claimed.
        Valid(
            """
            import torch
            with torch.no_grad():
                torch.set_grad_enabled(True)
                a = 1
                torch.set_grad_enabled(True)
                y = x * 2
                torch.set_grad_enabled(False)
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            def refine(model, x):
                with torch.no_grad():
                    feats = model.encoder(x)
                    torch.set_grad_enabled(True)  # need grads here
                    feats.requires_grad_(True)
                    score = model.head(feats).sum()
                    torch.set_grad_enabled(False)
                    return score, feats
            """,
            """
            import torch


            @torch.enable_grad()  # need grads here
            def _score_with_grad(feats, model):
                feats.requires_grad_(True)
                score = model.head(feats).sum()
                return score


            def refine(model, x):
                with torch.no_grad():
                    feats = model.encoder(x)
                    score = _score_with_grad(feats, model)
                    return score, feats
            """,
        ),
        Invalid(
            """
            import torch
            def refine(model, x):
                with torch.no_grad():
                    feats = model.encoder(x)
                    torch.set_grad_enabled(True)
                    score = model.head(feats).sum()
                    # back off
                    torch.set_grad_enabled(False)  # restore
                    return score
            """,
            """
            import torch
            def refine(model, x):
                with torch.no_grad():
                    feats = model.encoder(x)
                    with torch.enable_grad():
                        score = model.head(feats).sum()
                    # back off
                    # restore
                    return score
            """,
            options={"style": "block"},
        ),
        Invalid(
            """
            from torch import no_grad, set_grad_enabled
            def loop(xs, w):
                total = 0
                with no_grad():
                    for x in xs:
                        pass
                    set_grad_enabled(True)
                    for x in xs:
                        if x is None:
                            break
                        total += (x * w).sum()
                    set_grad_enabled(False)
                return total
            """,
            """
            import torch
            from torch import no_grad, set_grad_enabled


            @torch.enable_grad()
            def _total_with_grad(xs, total, w):
                for x in xs:
                    if x is None:
                        break
                    total += (x * w).sum()
                return total


            def loop(xs, w):
                total = 0
                with no_grad():
                    for x in xs:
                        pass
                    total = _total_with_grad(xs, total, w)
                return total
            """,
        ),
        Invalid(  # reads a closure variable of an outer function: the helper goes before the `with`
            """
            import torch
            def make_step(scale):
                def step(model, x):
                    with torch.no_grad():
                        feats = model.encoder(x)

                        torch.set_grad_enabled(True)
                        loss = (model.head(feats) * scale).sum()
                        loss.backward()
                        torch.set_grad_enabled(False)
                    return feats
                return step
            """,
            """
            import torch
            def make_step(scale):
                def step(model, x):
                    @torch.enable_grad()
                    def _backward_with_grad(model, feats):
                        loss = (model.head(feats) * scale).sum()
                        loss.backward()

                    with torch.no_grad():
                        feats = model.encoder(x)

                        _backward_with_grad(model, feats)
                    return feats
                return step
            """,
        ),
        Invalid(  # `return` between the toggles: block style
            """
            import torch as T
            def f(x):
                with T.inference_mode():
                    T.set_grad_enabled(True)
                    if x is None:
                        return None
                    y = x * 2
                    T.set_grad_enabled(False)
                return y
            """,
            """
            import torch as T
            def f(x):
                with T.inference_mode():
                    with T.enable_grad():
                        if x is None:
                            return None
                        y = x * 2
                return y
            """,
        ),
        Invalid(  # nothing grad-dependent between the toggles: they just go
            """
            import torch
            with torch.set_grad_enabled(False):
                torch.set_grad_enabled(True)  # on
                print('hello')
                torch.set_grad_enabled(False)  # off
                y = x * 2
            """,
            """
            import torch
            with torch.set_grad_enabled(False):
                # on
                print('hello')
                # off
                y = x * 2
            """,
        ),
        Invalid(  # toggle line shared with another statement: reported, not fixed
            """
            import torch
            with torch.no_grad():
                a = 1; torch.set_grad_enabled(True)
                y = x * 2
                torch.set_grad_enabled(False)
            """,
            None,
        ),
    ]

    def check(self, facts):
        taken = identifiers(facts.tree)
        for pair in toggle_pairs(facts):
            node = pair.with_node
            enable, disable = pair.block[pair.start], pair.block[pair.end]
            what = facts.segment(grad_with_regions(facts, node)[-1].expr)
            message = f"toggle hack inside `with {what}:` (line {node.lineno}): it flips the global grad mode by hand"
            fixable = (
                alone_on_its_line(facts, enable)
                and alone_on_its_line(facts, disable)
                and torch_reachable(facts, node)
            )
            moved = pair.moved
            hoisted = trailing_saves(facts, moved)
            extraction, placement = Extraction(), ""
            if all(is_neutral_statement(facts, s) for s in moved[: len(moved) - hoisted]):
                style, title = "remove", "Remove the toggles: nothing between them needs grad"
            elif self.opts.get("style") == "block":
                style, title = "block", "Use `with torch.enable_grad():` instead of the toggles"
            else:
                extraction = plan_extraction(facts, pair.with_node, pair.moved, pair.block[pair.start].end_lineno, pair.block[pair.end].lineno)
                if extraction.reason:
                    style = "block"
                    title = f"Use `with torch.enable_grad():` instead of the toggles (no helper: {extraction.reason})"
                else:
                    style, placement = "function", helper_placement(facts, pair.with_node, pair.moved, extraction)
            helper = ""
            if style == "function":
                helper = helper_name(moved, extraction.returns, taken)
                taken.add(helper)
                where = "at module level" if placement == "module" else "before the `with`"
                title = f"Move the statements into a helper `{helper}` decorated `@torch.enable_grad()`, {where}"
            if fixable and style == "remove" and disable is pair.block[-1]:
                # The closing toggle's comments would have no statement to stay with.
                if moved:
                    first = moved[-1].end_lineno + 1
                else:
                    first = pair.block[pair.start - 1].end_lineno + 1 if pair.start else enable.lineno
                fixable = not any("#" in facts.line_text(n) for n in range(first, disable.lineno + 1))
            if not fixable:
                message += " (not auto-fixable here)"
            line = facts.line_text(enable.lineno)
            indent = line[: len(line) - len(line.lstrip())]
            data = (
                facts.span(enable),
                enable.lineno,
                disable.lineno,
                style,
                helper,
                extraction.params,
                extraction.returns,
                hoisted if style == "block" else 0,
                indent,
                (placement, node.lineno),
            )
            yield self.report(facts, enable, message, fix=fixable, fix_title=title, anchors=[node, disable], data=data)

    def fix(self, finding, ctx):
        from gradfix.fixer import Edit, FixError

        enable_span, enable_line, disable_line, style, helper, params, returns, hoisted, indent, where = finding.data
        block = ctx.parent(ctx.node_at(enable_span, cst.SimpleStatementLine))
        if not isinstance(block, cst.IndentedBlock):
            raise FixError("one-line block")
        lines = [ctx.span_of(s).line for s in block.body]
        try:
            start, end = lines.index(enable_line), lines.index(disable_line)
        except ValueError:
            raise FixError("the toggles moved") from None
        enable, disable = block.body[start], block.body[end]
        moved = list(block.body[start + 1 : end])
        edits = [Edit(s, cst.RemoveFromParent()) for s in moved]

        if style == "remove":
            edits = []
            if moved:
                first = moved[0]
                edits.append(Edit(first, first.with_changes(leading_lines=[*comment_lines(enable), *first.leading_lines])))
                pending = comment_lines(disable)
            else:
                pending = [*comment_lines(enable), *comment_lines(disable)]
            edits += [Edit(enable, cst.RemoveFromParent()), Edit(disable, cst.RemoveFromParent())]
            if pending:
                if end + 1 >= len(block.body):
                    if any(line.comment is not None for line in pending):
                        raise FixError("the toggles' comments have no place to go")
                else:
                    after = block.body[end + 1]
                    edits.append(Edit(after, after.with_changes(leading_lines=[*pending, *after.leading_lines])))
            return edits

        torch_name = ctx.torch_name()
        if style == "block":
            inside, after = moved[: len(moved) - hoisted], moved[len(moved) - hoisted :]
            new_block = cst.IndentedBlock(body=inside, header=enable.trailing_whitespace, indent=block.indent)
            if after:
                # Hoisted saves stay in place, right after the new block; the closing
                # toggle's comments go before them.
                edits = [Edit(s, cst.RemoveFromParent()) for s in inside]
                first = after[0]
                edits.append(Edit(first, first.with_changes(leading_lines=[*comment_lines(disable), *first.leading_lines])))
            else:
                # The closing toggle's comments stay where they were, at the outer indentation.
                new_block = new_block.with_changes(footer=comment_lines(disable, indent))
            with_stmt = ctx.statement(f"with {torch_name}.enable_grad():\n    pass\n")
            with_stmt = with_stmt.with_changes(leading_lines=enable.leading_lines, body=new_block)
            edits += [Edit(enable, with_stmt), Edit(disable, cst.RemoveFromParent())]
            return edits

        # function style: the helper goes before the top-level statement or before the `with`
        placement, with_line = where
        signature = ", ".join(params)
        helper_def = ctx.statement(f"@{torch_name}.enable_grad()\ndef {helper}({signature}):\n    pass\n")
        body = list(moved)
        if returns:
            body.append(ctx.statement(f"return {', '.join(returns)}"))
        decorator = helper_def.decorators[0].with_changes(trailing_whitespace=enable.trailing_whitespace)
        helper_def = helper_def.with_changes(decorators=[decorator], body=cst.IndentedBlock(body=body))
        call = f"{helper}({signature})"
        if returns:
            call = f"{', '.join(returns)} = {call}"
        call_stmt = ctx.statement(call).with_changes(
            leading_lines=[*enable.leading_lines, *disable.leading_lines], trailing_whitespace=disable.trailing_whitespace
        )
        anchor = _anchor(ctx, block, placement, with_line)
        replaced = {enable: call_stmt, **{s: cst.RemoveFromParent() for s in [*moved, disable]}}
        new_anchor = anchor.visit(_replacer(replaced))
        lines = list(anchor.leading_lines)
        blank = 0
        while blank < len(lines) and lines[blank].comment is None:
            blank += 1
        gap = [cst.EmptyLine(indent=False)] * (2 if placement == "module" else 1)
        first = placement == "module" and not lines[:blank]
        helper_def = helper_def.with_changes(leading_lines=gap if first else lines[:blank])
        new_anchor = new_anchor.with_changes(leading_lines=[*gap, *lines[blank:]])
        return [Edit(anchor, cst.FlattenSentinel([helper_def, new_anchor]))]
