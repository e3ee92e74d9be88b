"""GF401 variable-volatile."""

from __future__ import annotations

import ast

from gradfix.analysis.variable import (
    fix_variable_call,
    plan_rewrite,
    raises_value_error,
    report_rewrites,
    volatile_loop,
    truthiness,
    variable_calls,
)
from gradfix.model import FixSafety
from gradfix.rule import Invalid, Option, Rule, Valid


def negatable(expr: ast.expr, text: str) -> str:
    """``text`` ready to follow ``not`` (parenthesized unless it is a name or attribute)."""
    return text if isinstance(expr, (ast.Name, ast.Attribute, ast.Call)) else f"({text})"


class VariableVolatile(Rule):
    """
    ## What it does
    Finds `Variable(x, volatile=...)` (`torch.autograd.Variable`, however imported) with any
    value: a literal, or a name such as `volatile=evaluation`.

    ## Why is this bad?
    Before PyTorch 0.4, `volatile=True` meant "record no graph for anything computed from
    this input": the inference mode of its day. The argument was removed in 0.4: today it
    only warns ("volatile was removed and now has no effect. Use `with torch.no_grad():`
    instead.") and the call returns `x.detach()`, exactly like `Variable(x)` (pinned in
    `tests/facts/test_gf401_facts.py`). The evaluation code it guards now builds a full
    graph for every batch, and the reader still believes it does not.

    ## Example
    ```python
    data = Variable(data, volatile=True)
    output = model(data)
    ```

    ## Use instead
    ```python
    data = data.detach()
    output = model(data)
    ```
    and, to get back what `volatile` meant, compute under `torch.no_grad()`:
    ```python
    with torch.no_grad():
        output = model(data)
    ```

    ## Fix safety
    The call is rewritten as GF402 rewrites `Variable(x)`: the wrapper goes where `x` surely
    needs no grad (a fresh tensor, `.data`, `.detach()`, or a local name that every assignment
    reaching the call binds to one, when nothing else can see the object: GF402 explains the
    provenance query), `Variable(h.data, volatile=True)` becomes
    `h.detach()`, a batch a `for` loop takes from a data loader loses the wrapper (unsafe:
    it assumes the batch needs no grad), and anything else becomes `x.detach()` (with
    `.requires_grad_(flag)` when the call passes a true or unknown `requires_grad=`), which is
    what the call returns today; only the deprecation warning goes. `style = "exact"`
    (option of GF401) always writes `x.detach()`, and adds no `no_grad` (elsewhere wrapping the
    forward pass in `torch.no_grad()` is only suggested in the fix title: where the loop is not
    known to need no graph, it would change what autograd records). A call that passes both a true
    `volatile` and a true `requires_grad` raises `ValueError` today ("Variable can't be
    volatile and require_grad at the same time!"); when either flag is not a literal and
    the other may be true, the call is reported without a fix, as are calls with
    `**kwargs`. A `volatile` value that is not an int-like (`None`) raises `TypeError`
    today; the rewrite no longer evaluates it.

    A `volatile=True` call in a loop that needs no graph (an evaluation loop: nothing in it, nor
    in a function of the file it calls, calls `.backward()`, steps an optimizer, takes
    `torch.autograd.grad` or touches `.grad`/`requires_grad`; no grad-mode region around it; no
    bare `set_grad_enabled` toggle in the file) gets what `volatile` meant: the innermost such
    loop goes into `with torch.no_grad():` along with the rewrite. That fix is unsafe: the
    outputs no longer require grad, as they did not before PyTorch 0.4.
    """

    code = "GF401"
    name = "variable-volatile"
    summary = "`Variable(x, volatile=...)`: volatile has no effect since PyTorch 0.4"
    fix_safety = FixSafety.SAFE
    options = (
        Option(
            "style",
            ("idiomatic", "exact"),
            "`idiomatic`: write what GF402 writes for the same call; `exact`: always `x.detach()`",
        ),
    )
    triggers = ("Variable",)  # the positional form `Variable(x, False, True)` has no "volatile"
    uses_project = True  # `Variable` from `from utils import *`: what the project module imports

    VALID = [
        Valid(
            """
            import torch
            with torch.no_grad():
                y = model(x)
            """
        ),
        Valid(
            """
            from torch.autograd import Variable
            v = Variable(x)
            """
        ),
        Valid(
            """
            from tensorflow import Variable
            v = Variable(x, volatile=True)
            """
        ),
        Valid(
            """
            class Variable:
                def __init__(self, x, volatile=False):
                    pass

            v = Variable(3, volatile=True)
            """
        ),
        Valid(
            """
            import torch
            buf = Buffer(x, volatile=True)
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            from torch.autograd import Variable

            def test(model, data):
                data = Variable(data, volatile=True)  # inference
                return model(data)
            """,
            """
            import torch

            def test(model, data):
                data = data.detach()  # inference
                return model(data)
            """,
        ),
        Invalid(
            """
            import torch

            def batch(source, i, evaluation=False):
                return torch.autograd.Variable(source[i:i + 35], volatile = evaluation)
            """,
            """
            import torch

            def batch(source, i, evaluation=False):
                return source[i:i + 35].detach()
            """,
        ),
        Invalid(
            """
            from torch.autograd import Variable, grad
            x, y = Variable(a, volatile=True), Variable(b)
            """,
            """
            from torch.autograd import Variable, grad
            x, y = a.detach(), Variable(b)
            """,
        ),
        Invalid(
            """
            import torch.autograd as ag
            w = ag.Variable(a * 2, volatile=False, requires_grad=True)
            """,
            """
            import torch.autograd as ag
            w = (a * 2).detach().requires_grad_()
            """,
        ),
        Invalid(
            """
            from torch.autograd.variable import Variable
            w = Variable(x, False, True)
            """,
            """
            w = x.detach()
            """,
        ),
        # Propagated volatility (`x.volatile` is always False today): no set_grad_enabled hint.
        Invalid(
            """
            import torch
            from torch.autograd import Variable

            def forward(self, x):
                zeros = Variable(torch.zeros(x.size()), volatile=x.volatile)
                return self.logstd(zeros)
            """,
            """
            import torch

            def forward(self, x):
                zeros = torch.zeros(x.size())
                return self.logstd(zeros)
            """,
        ),
        # A name bound to a fresh tensor: the line that would read `x = x` goes.
        Invalid(
            """
            import torch
            from torch.autograd import Variable
            def evaluate(model, n):
                x = torch.zeros(n, 3)
                x = Variable(x, volatile=True)
                return model(x)
            """,
            """
            import torch
            def evaluate(model, n):
                x = torch.zeros(n, 3)
                return model(x)
            """,
        ),
        # Raises ValueError today (volatile and requires_grad both true): report only.
        Invalid(
            """
            from torch.autograd import Variable
            w = Variable(x, requires_grad=True, volatile=True)
            """,
            None,
        ),
        Invalid(
            """
            from torch.autograd import Variable
            w = Variable(x, requires_grad=train, volatile=not train)
            """,
            None,
        ),
        Invalid(
            """
            from torch.autograd import Variable
            w = Variable(x, volatile=True, **kw)
            """,
            None,
        ),
        # A test batch from the loader in a loop that needs no graph: the loop goes under
        # `no_grad`, which is what `volatile=True` meant, and the wrapper goes (unsafe).
        Invalid(
            """
            from torch.autograd import Variable

            def test(model, test_loader):
                for data, target in test_loader:
                    output = model(Variable(data.cuda(), volatile=True))
            """,
            """
            import torch

            def test(model, test_loader):
                with torch.no_grad():
                    for data, target in test_loader:
                        output = model(data.cuda())
            """,
        ),
        # ...but a loop that also trains keeps recording: only the wrapper goes.
        Invalid(
            """
            from torch.autograd import Variable

            def fit(model, loader, opt):
                for data, target in loader:
                    probe = model(Variable(data, volatile=True))
                    model(data).sum().backward()
                    opt.step()
            """,
            """
            def fit(model, loader, opt):
                for data, target in loader:
                    probe = model(data)
                    model(data).sum().backward()
                    opt.step()
            """,
        ),
        Invalid(
            """
            import torch
            from torch.autograd import Variable
            h = Variable(torch.zeros(2), volatile=True)
            """,
            """
            import torch
            h = torch.zeros(2).detach()
            """,
            options={"style": "exact"},
        ),
    ]

    def check(self, facts):
        exact = self.opts.get("style") == "exact"
        planned = []
        for found in variable_calls(facts):
            if found.volatile is None:
                continue
            volatile = truthiness(found.volatile)
            requires_grad = truthiness(found.requires_grad)
            vol_text = facts.segment(found.volatile)
            hint = ""
            if volatile is False:
                why = f"`volatile={vol_text}` has had no effect since PyTorch 0.4"
            elif isinstance(found.volatile, ast.Attribute) and found.volatile.attr == "volatile":
                # `volatile=x.volatile` passed volatility on; `x.volatile` is always False now,
                # and a caller's `torch.no_grad()` covers this code without any help.
                why = f"`volatile={vol_text}` was removed in PyTorch 0.4 (`{vol_text}` is always False)"
                hint = "; grad mode propagates by itself: nothing to wrap"
            else:
                why = "`volatile` was removed in PyTorch 0.4: it only warns, and the forward pass records a graph"
                mode = "torch.no_grad()" if volatile is True else (
                    f"torch.set_grad_enabled(not {negatable(found.volatile, vol_text)})"
                )
                hint = f"; to record no graph, wrap the forward pass in `with {mode}:`"
            if found.blocker is not None:
                yield self.report(facts, found.call, why, no_fix=found.blocker)
                continue
            if raises_value_error(found):
                when = "" if (volatile, requires_grad) == (True, True) else " when both are true"
                yield self.report(
                    facts,
                    found.call,
                    f"`volatile` with `requires_grad` raises ValueError{when} (can't be volatile and require grad)",
                    fix=False,
                )
                continue
            plan = plan_rewrite(facts, found, exact)
            loop = volatile_loop(facts, found.call) if volatile is True and not exact else None
            planned.append((found, plan, why, hint, loop))
        yield from report_rewrites(self, facts, planned, exact)

    def fix(self, finding, ctx):
        return fix_variable_call(finding, ctx)
