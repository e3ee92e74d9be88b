"""GF201 global-grad-toggle."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from gradfix.lazy import cst

from gradfix.analysis.insertion import body_start
from gradfix.analysis.module_mode import switch_of
from gradfix.analysis.regions import records_no_graph
from gradfix.analysis.scripts import entry_point, generator_functions, standalone_script, under_main_guard
from gradfix.analysis.statements import handler_of, own_nodes, statement_block, torch_at_definition
from gradfix.analysis.toggles import Toggle, bare_toggle, hack_statements, own_toggles, saved_mode_names
from gradfix.facts import FileFacts, dotted_name
from gradfix.model import FixSafety, Span
from gradfix.rule import Invalid, Rule, Valid

_CONDITIONAL_PARENTS = (ast.If, ast.ExceptHandler, ast.match_case)
_HAND_MADE = "the function sets the mode by hand in `except`/`finally`"
# Decorators a grad decorator can safely sit under (it goes innermost, next to ``def``).
_PLAIN_DECORATORS = {"staticmethod", "classmethod"}
_HAND_MADE_CONTEXT_METHODS = {"__enter__", "__exit__", "__aenter__", "__aexit__"}
# Functions whose job is to set state for what runs after them (a loop's `reset`, a hook
# `on_train_start`, a constructor): a lone toggle there is meant to leak to the caller.
_STATE_SETTERS = re.compile(
    r"^(__init__|__post_init__|(re)?set(up)?|set_up|init\w*|configure\w*|prepare\w*|on_\w+|start\w*|begin\w*"
    r"|reset_\w+|setup_\w+|\w+_(start|begin|mode|setup))$"
)


@dataclass(frozen=True)
class _FixPlan:
    """What ``fix`` rebuilds (picklable)."""

    form: str  # "with" or "decorator"
    opener: Span  # the toggle statement that becomes a `with` / a decorator
    stop: Span | None  # the next toggle in the block (ends the segment), None: end of block
    closer: bool  # whether ``stop`` is removed with this fix (it ends this toggle)
    import_module: str | None  # ``from <module> import set_grad_enabled`` (to drop if unused)
    comments_to_next: bool = False  # the closer's own comments move to the statement after it
    keep_call: bool = False  # scope with the call itself: the name `torch` is taken in this file


class GlobalGradToggle(Rule):
    """
    ## What it does
    Finds `torch.set_grad_enabled(x)` called as a bare statement inside a function, the
    "global switch" style of the article's §2.1/§4.2 (`torch.set_grad_enabled(True)` at the
    top of `train_one_epoch`).

    ## Why is this bad?
    Called as a statement, `set_grad_enabled` flips the thread's global grad mode and never
    restores it: the mode leaks to the caller after the function returns (or raises), and the
    code after the call runs in a mode forced by this function rather than the one its caller
    chose. An evaluation function that leaves grad off makes the next training step fail
    with "element 0 of tensors does not require grad"; a training function that forces it on
    makes an enclosing `no_grad` block record graphs again. Scoped forms (`with`, decorator)
    restore the previous mode on exit, even on an exception (pinned in
    `tests/facts/test_gf201_facts.py`).

    ## Example
    ```python
    def train_one_epoch(model, loader, optimizer):
        model.train()
        torch.set_grad_enabled(True)
        for x, y in loader:
            ...

    def embed(encoder, batch):
        torch.set_grad_enabled(False)
        feats = encoder(batch)
        torch.set_grad_enabled(True)
        return feats
    ```

    ## Use instead
    ```python
    def train_one_epoch(model, loader, optimizer):
        model.train()
        with torch.enable_grad():
            for x, y in loader:
                ...

    def embed(encoder, batch):
        with torch.no_grad():
            feats = encoder(batch)
        return feats
    ```

    ## Fix safety
    Unsafe: the mode no longer leaks to the caller, and a later bare toggle no longer forces
    a mode the caller did not have. Code that relied on the leak (a caller that expects grad
    to be off after calling a "setup" function) changes behaviour.

    The fix works block by block. Each toggle scopes the statements after it, up to the next
    toggle in the same block or the end of the block. A literal `True` that directly follows
    another toggle closes it (the usual pair `set_grad_enabled(False)` …
    `set_grad_enabled(True)`) and is removed; the statements between become
    `with torch.no_grad():` (`False`), `with torch.enable_grad():` (`True`) or
    `with torch.set_grad_enabled(x):` (any other expression). A last toggle with nothing
    after it that closes an earlier one is removed as well. Literals always map to
    `no_grad`/`enable_grad` in every form (the decorator form of rules.md does the same);
    GF205 is the matching style rule for hand-written `with torch.set_grad_enabled(False)`.
    A single toggle that is the first statement of the function (after a docstring and
    statements that do the same in any grad mode: `device = torch.device(..)`), or a
    pair that spans the whole body (the closer is its last statement, with no comment to keep),
    with a literal argument, becomes a decorator `@torch.no_grad()` / `@torch.enable_grad()`
    instead of re-indenting the body; a
    non-literal one uses the `with` form instead, because a decorator argument is evaluated
    once, when the function is defined, not at each call. The file's spelling of torch is
    kept (`T.no_grad()`, `torch.autograd.no_grad()`).

    Module-level toggles that end with `set_grad_enabled(True)` (the module hands the default
    mode back) and those of a notebook or of a standalone script (nothing imports it; its top
    level is the program: a top-level loop or `with`, a call of a function or class the file
    defines, or, in a file that defines neither, a call made for its effect such as `print(...)`
    (torch's own configuration calls, `torch.manual_seed(0)`, do not count), and no
    `if __name__ == "__main__":` guard that would make it importable) are silent. Reported without a fix: other module-level toggles; toggles under `if`/`except`/`case`
    (conditional pairs); toggles in generators and `async def` (a `with` or decorator there
    scopes the mode differently across `yield`/`await`); functions that toggle in a
    `finally`/`except` (hand-made restore); a toggle that nothing follows in its block, or
    after which the function only switches module modes, prints or returns (`def eval(self):
    torch.set_grad_enabled(False); self.model.eval()`): its purpose is to set the mode for
    the caller; a lone toggle in a setup-like function
    (`__init__`, `reset`, `setup`, `configure_*`, `on_*` hooks, `*_start`), which sets the
    mode for the code that runs after it; and toggles in a nested block (a loop body,
    a `try`) whose last toggle is not a closing `set_grad_enabled(True)`, since code after
    the block would change too. Functions that save the mode with `torch.is_grad_enabled()`
    and restore it are correct and never reported, and neither are the toggles of the
    GF202 pattern (`True` … `False` inside a grad-disabled `with`) while GF202 is enabled
    (with GF202 ignored they are this rule's: the pair becomes `with torch.enable_grad():`). Nor are lone toggles in a
    script's entry point (`main`, `main_worker`, …, a module-level function the file uses only
    under its `if __name__ == "__main__":` guard): like a toggle under the guard itself, they
    set the mode of the whole program on purpose, and nothing runs after them to see the leak.
    """

    code = "GF201"
    name = "global-grad-toggle"
    summary = "Bare `torch.set_grad_enabled(x)` statement leaks the grad mode"
    fix_safety = FixSafety.UNSAFE
    triggers = ("set_grad_enabled",)

    VALID = [
        # Look-alikes: a with-item and a decorator are scoped.
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
            @torch.set_grad_enabled(False)
            def f(x):
                return g(x)
            """
        ),
        # A local name `torch` that is not the module.
        Valid(
            """
            def f(torch):
                torch.set_grad_enabled(False)
                return g()
            """
        ),
        # Saved and restored by hand: correct code.
        Valid(
            """
            import torch
            def f(x):
                prev = torch.is_grad_enabled()
                torch.set_grad_enabled(False)
                try:
                    return g(x)
                finally:
                    torch.set_grad_enabled(prev)
            """
        ),
        # The GF202 pattern belongs to GF202 while GF202 runs: tests/rules/test_deferral.py.
        # A script's global setting.
        Valid(
            """
            import torch
            if __name__ == '__main__':
                torch.set_grad_enabled(False)
                main()
            """
        ),
        # The script's entry point, run only from the `__main__` guard: the same global setting
        # (a sampling script that turns grad off for the whole process).
        Valid(
            """
            import torch
            def main(args):
                torch.manual_seed(args.seed)
                torch.set_grad_enabled(False)
                model = build(args)
                save(model(args.x))

            if __name__ == '__main__':
                main(parse())
            """
        ),
        # A standalone script (its top level runs the program; nothing imports it): the
        # toggle is the script's own setting, as in a notebook.
        Valid(
            """
            import torch
            torch.set_grad_enabled(False)

            class Net(torch.nn.Module):
                def forward(self, x):
                    return x * 2

            net = Net()
            y = net(torch.ones(2))
            """
        ),
        # A module-level pair that hands the default mode back (a tutorial showing the API):
        # nothing that imports the module sees a change.
        Valid(
            """
            import torch as t
            t.set_grad_enabled(False)  # demo: graphs are not recorded
            x = t.ones(1)
            w = t.rand(1, requires_grad=True)
            print((x * w).requires_grad)
            t.set_grad_enabled(True)
            """
        ),
        # Assigned, not a bare statement.
        Valid(
            """
            import torch
            def f():
                ctx = torch.set_grad_enabled(False)
                return ctx
            """
        ),
        # A hand-made context manager toggles on purpose.
        Valid(
            """
            import torch
            class Frozen:
                def __enter__(self):
                    self.prev = torch.is_grad_enabled()
                    torch.set_grad_enabled(False)
                def __exit__(self, *exc):
                    torch.set_grad_enabled(self.prev)
            """
        ),
        # Suppressed on the toggle's line, or on the closer's line (an anchor).
        Valid(
            """
            import torch
            def f(m, x):
                torch.set_grad_enabled(False)  # gradfix: ignore[GF201]
                return m(x)
            """
        ),
        Valid(
            """
            import torch
            def f(m, x):
                torch.set_grad_enabled(False)
                y = m(x)
                torch.set_grad_enabled(True)  # noqa: GF201
                return y
            """
        ),
    ]
    INVALID = [
        # Article §2.1: a lone toggle after other statements -> `with` around the rest.
        Invalid(
            """
            import torch

            def train_one_epoch(model, loader, opt):
                model.train()
                torch.set_grad_enabled(True)  # training
                for x in loader:
                    loss = model(x)
                    loss.backward()
            """,
            """
            import torch

            def train_one_epoch(model, loader, opt):
                model.train()
                with torch.enable_grad():  # training
                    for x in loader:
                        loss = model(x)
                        loss.backward()
            """,
        ),
        # First statement (after a docstring) -> decorator, alias kept.
        Invalid(
            '''
            import torch as T

            def predict(model, x):
                """Run."""
                T.set_grad_enabled(False)
                return model(x)
            ''',
            '''
            import torch as T

            @T.no_grad()
            def predict(model, x):
                """Run."""
                return model(x)
            ''',
        ),
        # Only grad-neutral statements before the toggle -> still the decorator (AST's `train()`).
        Invalid(
            """
            import torch

            def train(model, loader):
                device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
                print("running on " + str(device))
                torch.set_grad_enabled(True)
                for x in loader:
                    model(x.to(device)).sum().backward()
            """,
            """
            import torch

            @torch.enable_grad()
            def train(model, loader):
                device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
                print("running on " + str(device))
                for x in loader:
                    model(x.to(device)).sum().backward()
            """,
        ),
        # A pair that spans the whole body -> the decorator (EDSR's `test()` shape).
        Invalid(
            """
            import torch

            class Trainer:
                def test(self, loader):
                    torch.set_grad_enabled(False)
                    for x in loader:
                        self.log(self.model(x))
                    torch.set_grad_enabled(True)
            """,
            """
            import torch

            class Trainer:
                @torch.no_grad()
                def test(self, loader):
                    for x in loader:
                        self.log(self.model(x))
            """,
        ),
        # A pair -> `with torch.no_grad():` around the statements between.
        Invalid(
            """
            import torch

            def step(enc, dec, x):
                torch.set_grad_enabled(False)
                feats = enc(x)
                torch.set_grad_enabled(True)
                return dec(feats)
            """,
            """
            import torch

            def step(enc, dec, x):
                with torch.no_grad():
                    feats = enc(x)
                return dec(feats)
            """,
        ),
        # A non-literal first toggle: the with form (a decorator would read `train` too early).
        Invalid(
            """
            from torch.autograd import set_grad_enabled

            def run(model, x, train):
                set_grad_enabled(train)
                return model(x)
            """,
            """
            from torch.autograd import set_grad_enabled

            def run(model, x, train):
                with set_grad_enabled(train):
                    return model(x)
            """,
        ),
        # Conditional toggles and module-level toggles: reported, not fixed.
        Invalid(
            """
            import torch
            def run(model, x, train):
                if train:
                    torch.set_grad_enabled(True)
                else:
                    torch.set_grad_enabled(False)
                return model(x)
            """,
            None,
            count=2,
        ),
        Invalid(
            """
            import torch
            torch.set_grad_enabled(False)
            model = load()
            """,
            None,
        ),
        # True … False followed by evaluation: each toggle scopes its own statements.
        Invalid(
            """
            import torch
            def epoch(model):
                torch.set_grad_enabled(True)
                train(model)
                torch.set_grad_enabled(False)
                evaluate(model)
            """,
            """
            import torch
            def epoch(model):
                with torch.enable_grad():
                    train(model)
                with torch.no_grad():
                    evaluate(model)
            """,
            count=2,
        ),
        # A pair in a loop body ends with `True`: fixable; without the closer: reported only.
        Invalid(
            """
            import torch
            def fit(enc, loader):
                for x in loader:
                    torch.set_grad_enabled(False)
                    x = enc(x)
                    torch.set_grad_enabled(True)
                    step(x)
            """,
            """
            import torch
            def fit(enc, loader):
                for x in loader:
                    with torch.no_grad():
                        x = enc(x)
                    step(x)
            """,
        ),
        Invalid(
            """
            import torch
            def fit(enc, loader):
                for x in loader:
                    torch.set_grad_enabled(False)
                    x = enc(x)
                return x
            """,
            None,
        ),
        # Inside a grad `with` (not the GF202 pair): the rest of that block.
        Invalid(
            """
            import torch
            def f(m, x):
                with torch.no_grad():
                    a = m(x)
                    torch.set_grad_enabled(True)
                    b = m(a)
                return b
            """,
            """
            import torch
            def f(m, x):
                with torch.no_grad():
                    a = m(x)
                    with torch.enable_grad():
                        b = m(a)
                return b
            """,
        ),
        # `torch` names something else in this file: scope with the call itself.
        Invalid(
            """
            from torch import set_grad_enabled
            def f(m, x):
                set_grad_enabled(False)
                return m(x)
            def torch():
                pass
            """,
            """
            from torch import set_grad_enabled
            @set_grad_enabled(False)
            def f(m, x):
                return m(x)
            def torch():
                pass
            """,
        ),
        # CRLF and tab indentation survive (escaped strings: a triple-quoted block would lose the
        # exact bytes, and dedent does not strip tabs and spaces alike).
        Invalid(
            "import torch\r\ndef f(m, x):\r\n\tm.eval()\r\n\ttorch.set_grad_enabled(False)  # eval\r\n"
            "\treturn m(x)\r\n",
            "import torch\r\ndef f(m, x):\r\n\tm.eval()\r\n\twith torch.no_grad():  # eval\r\n"
            "\t\treturn m(x)\r\n",
        ),
        # A setup method (a loop's `reset`, a hook): the lone toggle is meant for what runs
        # after it, so a `with` around the rest would undo it: reported, not fixed.
        Invalid(
            """
            import torch
            class FitLoop:
                def reset(self):
                    torch.set_grad_enabled(True)
                    self.progress.reset()
                    if self.restarting:
                        self.progress.restart()
            """,
            None,
        ),
        # A method whose job is to set the caller's modes: after the toggle it only switches
        # the module, so a `with` would scope the toggle to nothing: reported, not fixed.
        Invalid(
            """
            import torch
            class Predictor:
                def eval(self):
                    \"\"\"Eval mode, no gradients.\"\"\"
                    torch.set_grad_enabled(False)
                    self.model.eval()
            """,
            None,
        ),
        # ... but a scoped pair in one is still fixed.
        Invalid(
            """
            import torch
            def setup(model, x):
                torch.set_grad_enabled(False)
                stats = model(x)
                torch.set_grad_enabled(True)
                return stats
            """,
            """
            import torch
            def setup(model, x):
                with torch.no_grad():
                    stats = model(x)
                return stats
            """,
        ),
        # `main` is also called by another function: its caller sees the leak, so it is fixed.
        Invalid(
            """
            import torch
            def main(args):
                torch.manual_seed(args.seed)
                torch.set_grad_enabled(False)
                return build(args)(args.x)

            def sweep(runs):
                return [main(a) for a in runs]

            if __name__ == '__main__':
                main(parse())
            """,
            """
            import torch
            def main(args):
                torch.manual_seed(args.seed)
                with torch.no_grad():
                    return build(args)(args.x)

            def sweep(runs):
                return [main(a) for a in runs]

            if __name__ == '__main__':
                main(parse())
            """,
        ),
        # A generator: diagnostic only.
        Invalid(
            """
            import torch
            def batches(model, loader):
                torch.set_grad_enabled(False)
                for x in loader:
                    yield model(x)
            """,
            None,
        ),
    ]

    # -- detection ------------------------------------------------------------------------
    def check(self, facts: FileFacts):
        by_block: dict[tuple[int, str], list[Toggle]] = {}
        owners: dict[tuple[int, str], tuple[ast.AST, list[ast.stmt]]] = {}
        for call in facts.calls:
            toggle = bare_toggle(facts, call)
            if toggle is None:
                continue
            where = statement_block(facts, toggle.stmt)
            if where is None:
                continue
            parent, field = where
            key = (id(parent), field)
            by_block.setdefault(key, []).append(toggle)
            owners[key] = (parent, getattr(parent, field))
        if not by_block:
            return
        generators = generator_functions(facts)
        # The toggle hack is GF202's while GF202 runs; with GF202 ignored it is a toggle like any other.
        hack = hack_statements(facts, [(t.stmt, t.mode) for ts in by_block.values() for t in ts])
        excluded = hack if self.defers_to("GF202") else set()
        function_verdict: dict[ast.AST, str | None] = {}
        for key, toggles in sorted(by_block.items(), key=lambda kv: kv[1][0].stmt.lineno):
            parent, block = owners[key]
            toggles = [t for t in toggles if t.stmt not in excluded]
            toggles.sort(key=lambda t: (t.stmt.lineno, t.stmt.col_offset))
            if not toggles:
                continue
            func = facts.enclosing_function(toggles[0].stmt)
            if func is None or isinstance(func, ast.Lambda):
                yield from self._report_module_level(facts, parent, toggles)
                continue
            if func not in function_verdict:
                function_verdict[func] = _function_verdict(facts, func, generators)
            verdict = function_verdict[func]
            if verdict == "silent":
                continue
            yield from self._check_block(facts, func, parent, key[1], block, toggles, verdict)

    def _report_module_level(self, facts, parent, toggles):
        if under_main_guard(facts, toggles[0].stmt):
            return
        if facts.path.endswith(".ipynb") or standalone_script(facts):
            return  # a notebook's or script's top level is the program itself: nothing imports it
        if len(toggles) > 1 and toggles[-1].mode is True:
            return  # `False` … `True`: the module hands the default mode back; no importer sees a change
        for t in toggles:
            yield self.report(
                facts,
                t.stmt,
                f"module-level `{facts.segment(t.call)}` changes the grad mode of every program that imports this module",
                fix=False,
            )

    def _check_block(self, facts, func, parent, field, block, toggles, verdict):
        reason = verdict or _block_reason(facts, func, parent, field, block, toggles)
        # Mark the closers: a literal True right after an opening toggle.
        for i, t in enumerate(toggles):
            t.restore = i > 0 and t.mode is True and not toggles[i - 1].restore
        positions = [block.index(t.stmt) for t in toggles]
        units: list[tuple[int, int | None]] = []  # (opener index, closer index or None)
        i = 0
        while i < len(toggles) and reason is None:
            if toggles[i].restore:
                reason = "internal: unpaired closer"
                break
            end = positions[i + 1] if i + 1 < len(toggles) else len(block)
            last = i + 1 == len(toggles)
            if end == positions[i] + 1 or (last and _nothing_runs_after(facts, func, toggles[i])):
                reason = "nothing after it runs under it, so it looks meant for the caller" if last else "another toggle follows it directly"
                break
            closer = None
            if i + 1 < len(toggles):
                nxt = toggles[i + 1]
                # a last toggle that ends the block (or after which nothing runs under it)
                # closes the opener, whatever mode it sets
                if nxt.restore or (i + 2 == len(toggles) and (len(block) == positions[i + 1] + 1 or _nothing_runs_after(facts, func, nxt))):
                    closer = i + 1
            units.append((i, closer))
            i = closer + 1 if closer is not None else i + 1
        if reason is None and units and all(closer is None for _, closer in units) and entry_point(facts, func):
            # The program's entry point (`main`, run only from the `__main__` guard): the mode
            # it sets is the whole script's on purpose, like a toggle under the guard itself.
            return
        if reason is None and _STATE_SETTERS.match(func.name) and any(closer is None for _, closer in units):
            reason = f"`{func.name}` looks like a setup method: the mode is meant for what runs after it"
        if reason is None and not _contained(facts, parent, field, block):
            last = units[-1] if units else None
            if last is None or last[1] is None or not toggles[last[1]].restore:
                reason = "the mode it sets reaches code after its nested block"
        if reason is not None:
            for t in toggles:
                message = _hand_made_message(facts, func, t) if reason == _HAND_MADE else None
                yield self.report(
                    facts,
                    t.stmt,
                    message or f"bare `{facts.segment(t.call)}` leaks the global grad mode to the caller",
                    no_fix=reason,
                )
            return
        import_module = facts.imported_from(toggles[0].call, "set_grad_enabled")
        for opener_index, closer_index in units:
            opener = toggles[opener_index]
            stop_index = opener_index + 1 if opener_index + 1 < len(toggles) else None
            # One toggle that starts the body, or a pair that spans it (its closer ends the body
            # and has no comment to keep): the function itself is the scope, a decorator.
            spans_body = len(toggles) == 1 or (
                (opener_index, closer_index) == (0, 1)
                and len(toggles) == 2
                and positions[1] == len(block) - 1
                and not _commented(facts, toggles[1].stmt)
            )
            decorator = (
                spans_body
                and block is func.body
                and _neutral_before(facts, block, opener.stmt)
                and opener.mode is not None
                and _decorator_ok(facts, func, opener.call)
                and torch_at_definition(facts, func)  # a decorator runs when the def does
            )
            keep_call = not isinstance(opener.call.func, ast.Attribute) and not facts.torch_name_writable()
            scoped = facts.segment(opener.call) if keep_call else _scoped_text(facts, opener)
            closer = toggles[closer_index] if closer_index is not None else None
            if decorator:
                target = f"`@{scoped}` on `{func.name}`"
            else:
                target = f"`with {scoped}:`"
            if closer:
                message = (
                    f"bare `{facts.segment(opener.call)}` … line {closer.stmt.lineno}: "
                    f"the closer forces {_mode_phrase(facts, closer)}, whatever mode the caller had"
                )
            else:
                message = f"bare `{facts.segment(opener.call)}` toggles the global grad mode: the mode leaks to the caller"
            plan = _FixPlan(
                "decorator" if decorator else "with",
                facts.span(opener.stmt),
                facts.span(toggles[stop_index].stmt) if stop_index is not None else None,
                closer is not None,
                import_module,
                closer_index is not None
                and positions[closer_index] + 1 < len(block)
                and (closer_index + 1 == len(toggles) or positions[closer_index + 1] != positions[closer_index] + 1),
                keep_call,
            )
            yield self.report(
                facts, opener.stmt, message, fix_title=f"Use {target}", anchors=[closer.stmt] if closer else [], data=plan
            )

    # -- fix --------------------------------------------------------------------------------
    def fix(self, finding, ctx):
        from gradfix.fixer import Edit, FixError

        plan: _FixPlan = finding.data
        opener = ctx.node_at(plan.opener, cst.SimpleStatementLine)
        if len(opener.body) != 1 or not isinstance(opener.body[0], cst.Expr):
            raise FixError("the toggle shares its line with other statements")
        call = opener.body[0].value
        if not isinstance(call, cst.Call):
            raise FixError("the toggle is not a call")
        block = ctx.parent(opener)
        if not isinstance(block, cst.IndentedBlock):
            raise FixError("the toggle is not in an indented block")
        stmts = list(block.body)
        start = stmts.index(opener)
        stop = len(stmts)
        if plan.stop is not None:
            stop_node = ctx.node_at(plan.stop, cst.SimpleStatementLine)
            stop = stmts.index(stop_node)
        segment = stmts[start + 1 : stop]
        if not segment:
            raise FixError("nothing to scope")
        closer = stmts[stop] if plan.closer and stop < len(stmts) else None
        scoped = self._scoped_expr(call, ctx, plan)

        if plan.form == "decorator":
            func = ctx.parent(block)
            if not isinstance(func, cst.FunctionDef):
                raise FixError("no function for the decorator")
            rest = list(segment)
            rest[0] = rest[0].with_changes(leading_lines=[*opener.leading_lines, *rest[0].leading_lines])
            after = stmts[stop + 1 :] if plan.closer else stmts[stop:]  # the closer goes with the pair
            new_body = block.with_changes(body=[*stmts[:start], *rest, *after])
            decorator = cst.Decorator(decorator=scoped, trailing_whitespace=opener.trailing_whitespace)
            return [Edit(func, func.with_changes(decorators=[*func.decorators, decorator], body=new_body))]

        first = segment[0]
        segment[0] = first.with_changes(leading_lines=_without_leading_blanks(first.leading_lines))
        # The closer's comment lines ("# back to training") stay above the code after it.
        footer: list[cst.EmptyLine] = []
        moved: list[Edit] = []
        if closer is not None and any(line.comment is not None for line in closer.leading_lines):
            if plan.comments_to_next and stop + 1 < len(stmts):
                after = stmts[stop + 1]
                lines = [*closer.leading_lines, *after.leading_lines]
                moved.append(Edit(after, after.with_changes(leading_lines=lines)))
            else:
                footer = list(closer.leading_lines)
                while footer and footer[-1].comment is None:
                    footer.pop()
        with_node = cst.With(
            items=[cst.WithItem(scoped)],
            body=cst.IndentedBlock(body=segment, header=opener.trailing_whitespace, footer=footer, indent=block.indent),
            leading_lines=opener.leading_lines,
        )
        edits = [Edit(opener, with_node)]
        edits += [Edit(s, cst.RemoveFromParent()) for s in stmts[start + 1 : stop]]
        if closer is not None:
            edits.append(Edit(closer, cst.RemoveFromParent()))
        return edits + moved

    def _scoped_expr(self, call: cst.Call, ctx, plan: _FixPlan) -> cst.BaseExpression:
        """``<prefix>.no_grad()`` / ``enable_grad()`` for a literal, the call itself otherwise."""
        mode = _cst_literal_bool(call)
        if mode is None or plan.keep_call:
            return call
        api = "enable_grad" if mode else "no_grad"
        if isinstance(call.func, cst.Attribute):
            prefix = ctx.code(call.func.value)
        else:
            prefix = ctx.torch_name()
            if plan.import_module and isinstance(call.func, cst.Name) and call.func.value == "set_grad_enabled":
                ctx.remove_import_if_unused(plan.import_module, "set_grad_enabled")
        return ctx.expr(f"{prefix}.{api}()")

    @staticmethod
    def contract():
        # gradfix verify: grad mode no longer leaks out of the call (what follows may change:
        # e.g. a training step after a leaky evaluation no longer crashes).
        from gradfix.verify.contract import Contract, GradModeKept

        return Contract(
            "grad mode no longer leaks to the caller",
            may_differ=("*: grad mode after", "exception"),
            expect=(GradModeKept(),),
            downstream=True,
        )


# -- helpers ------------------------------------------------------------------------------
def _function_verdict(facts: FileFacts, func, generators: set) -> str | None:
    """"silent", a reason to report without a fix, or None (fixable)."""
    if func.name in _HAND_MADE_CONTEXT_METHODS:
        return "silent"  # a context manager's enter/exit sets the mode on purpose
    toggles = own_toggles(facts, func)
    saved_modes = saved_mode_names(facts)
    for t in toggles:
        if dotted_name(t.arg) in saved_modes:
            return "silent"  # the mode saved with torch.is_grad_enabled() is restored by hand
    if isinstance(func, ast.AsyncFunctionDef):
        return "in an `async def` the mode would be scoped across `await`s differently"
    if func in generators:
        return "in a generator a `with` or decorator scopes the mode differently across `yield`s"
    if any(handler_of(facts, func, t.stmt) for t in toggles):
        return _HAND_MADE
    return None


def _hand_made_message(facts: FileFacts, func, t: Toggle) -> str | None:
    """What a toggle of a function that sets the mode in `finally`/`except` does, exactly: the
    last one, in a handler, hands the caller its mode; one that such a toggle follows directly
    holds until it. None for the others (the plain message)."""
    text = facts.segment(t.call)
    where = handler_of(facts, func, t.stmt)
    toggles = own_toggles(facts, func)
    later = [h for h in toggles if (h.stmt.lineno, h.stmt.col_offset) > (t.stmt.lineno, t.stmt.col_offset)]
    if where is not None and not later:
        after = "" if where == "finally" else " after an error"
        return f"`{text}` in `{where}` hands the caller {_mode_phrase(facts, t)}{after}, whatever mode it had"
    if where is not None or not later or not handler_of(facts, func, later[0].stmt):
        return None  # something else sets the mode after it: the plain reason
    h = later[0]
    mode = _mode_phrase(facts, h)
    if handler_of(facts, func, h.stmt) == "finally":
        return f"bare `{text}` … `finally` (line {h.stmt.lineno}): the caller always gets {mode}, whatever it had"
    return f"bare `{text}` leaks to the caller; on an error `except` (line {h.stmt.lineno}) sets {mode}"


def _nothing_runs_after(facts: FileFacts, func, toggle: Toggle) -> bool:
    """Nothing ``func`` does after ``toggle`` computes: it only switches modes (`self.model.eval()`,
    more toggles), prints or returns a name or constant. Such a function (`def eval(self):
    torch.set_grad_enabled(False); self.model.eval()`) sets the mode for its caller; a `with`
    or decorator would scope it to nothing."""
    end = (toggle.stmt.end_lineno, toggle.stmt.end_col_offset)
    for node in own_nodes(func):
        if not isinstance(node, (ast.stmt, ast.expr)) or (node.lineno, node.col_offset) < end:
            continue
        if isinstance(node, ast.Call):
            if not (switch_of(node) or bare_toggle(facts, node) or (isinstance(node.func, ast.Name) and node.func.id == "print")):
                return False
        elif isinstance(node, (ast.BinOp, ast.UnaryOp, ast.Subscript, ast.Compare, ast.BoolOp, ast.Lambda, ast.IfExp)):
            return False
    return True


def _mode_phrase(facts: FileFacts, t: Toggle) -> str:
    if t.mode is None:
        return f"the mode `{facts.segment(t.arg)}`"
    return "grad on" if t.mode else "grad off"


def _block_reason(facts: FileFacts, func, parent, field, block, toggles) -> str | None:
    if field != "body":
        return "it runs only under a condition (`else`/`finally`)"
    # (under a `finally` it never gets here: the function's verdict is the hand-made restore)
    child, node = block[0], parent
    while node is not None and node is not func:
        if isinstance(node, _CONDITIONAL_PARENTS) or (statement_block(facts, child) or (None, None))[1] == "orelse":
            return "it runs only under a condition"
        child, node = node, facts.parents.get(node)
    stmts_by_line: dict[int, int] = {}
    for stmt in block:
        for line in {stmt.lineno, stmt.end_lineno or stmt.lineno}:
            stmts_by_line[line] = stmts_by_line.get(line, 0) + 1
    for t in toggles:
        if stmts_by_line.get(t.stmt.lineno, 0) > 1 or (
            not isinstance(parent, ast.Module) and t.stmt.lineno == parent.lineno
        ):
            return "it shares its line with other code"
    return None


def _contained(facts: FileFacts, parent, field, block) -> bool:
    """Whether the block's end restores the mode anyway: a function body or a grad ``with``."""
    if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return True
    if isinstance(parent, (ast.With, ast.AsyncWith)):
        return any(r.owner is parent for r in facts.regions)
    return False


def _commented(facts: FileFacts, stmt: ast.stmt) -> bool:
    """A comment stands on ``stmt``'s line or on the lines right above it."""
    if "#" in facts.line_text(stmt.end_lineno)[len(facts.segment(stmt).splitlines()[-1]) :]:
        return True
    line = stmt.lineno - 1
    while line >= 1 and (not (text := facts.line_text(line).strip()) or text.startswith("#")):
        if text.startswith("#"):
            return True
        line -= 1
    return False


def _decorator_ok(facts: FileFacts, func, call: ast.Call) -> bool:
    for dec in func.decorator_list:
        if not (isinstance(dec, ast.Name) and dec.id in _PLAIN_DECORATORS):
            return False
    head = call.func
    while isinstance(head, ast.Attribute):
        head = head.value
    if not isinstance(head, ast.Name):
        return False
    # The decorator is evaluated where the function is defined: the name must mean the same.
    return facts.resolve_name(head.id, func) == facts.resolve_name(head.id, call)


def _scoped_text(facts: FileFacts, t: Toggle) -> str:
    if t.mode is None:
        return facts.segment(t.call)
    func = t.call.func
    if isinstance(func, ast.Attribute):
        prefix = facts.segment(func.value)
    else:
        prefix = min(facts.torch_module_names(), default="torch")
    return f"{prefix}.{'enable_grad' if t.mode else 'no_grad'}()"


def _cst_literal_bool(call: cst.Call) -> bool | None:
    if len(call.args) != 1:
        return None
    value = call.args[0].value
    if isinstance(value, cst.Name) and value.value in ("True", "False"):
        return value.value == "True"
    return None


def _without_leading_blanks(lines) -> list:
    lines = list(lines)
    while lines and lines[0].comment is None:
        lines.pop(0)
    return lines


def _neutral_before(facts: FileFacts, block: list[ast.stmt], stmt: ast.stmt) -> bool:
    """``stmt`` starts the function's body (after its docstring), or only statements that do
    the same in any grad mode come before it (`device = torch.device(..)`, `print(..)`): the
    function itself is then the toggle's scope."""
    start = body_start(block)
    if start is None or stmt not in block:
        return False
    before = block[block.index(start) : block.index(stmt)]
    return all(records_no_graph(facts, s) for s in before)
