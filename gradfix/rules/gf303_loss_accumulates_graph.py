"""GF303 loss-accumulates-graph."""

from __future__ import annotations

import ast

from gradfix.lazy import cst

from gradfix.facts import dotted_name
from gradfix.model import FixSafety
from gradfix.rule import Invalid, Option, Rule, Valid, attribute
from gradfix.analysis.flow import always_ran_before
from gradfix.analysis.statements import is_within

_LOOPS = (ast.For, ast.AsyncFor, ast.While)
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


def _loops_around(facts, stmt: ast.stmt) -> list[ast.stmt]:
    """Loops of the same function that hold ``stmt``, innermost first."""
    loops = []
    current = facts.parents.get(stmt)
    while current is not None and not isinstance(current, _SCOPES):
        if isinstance(current, _LOOPS):
            loops.append(current)
        current = facts.parents.get(current)
    return loops


def _backward_subject(receiver: ast.expr) -> tuple[str | None, bool]:
    """The name whose graph ``<receiver>.backward()`` walks, and whether it is provably a
    scalar (``.item()`` works on it): ``loss``, ``loss / k``, ``scaler.scale(loss)`` are;
    ``loss.sum()`` names ``loss`` but says nothing about its shape."""
    if isinstance(receiver, ast.Name):
        return receiver.id, True
    if isinstance(receiver, ast.BinOp) and isinstance(receiver.op, (ast.Div, ast.Mult)):
        if isinstance(receiver.left, ast.Name):
            return receiver.left.id, True
    if isinstance(receiver, ast.Call) and isinstance(receiver.func, ast.Attribute):
        if receiver.func.attr == "scale" and len(receiver.args) == 1 and not receiver.keywords:
            if isinstance(receiver.args[0], ast.Name):
                return receiver.args[0].id, True
        if not receiver.args and not receiver.keywords and isinstance(receiver.func.value, ast.Name):
            return receiver.func.value.id, False
    return None, False


def _accumulated(stmt: ast.stmt) -> tuple[str, ast.expr] | None:
    """``(acc, value)`` for ``acc += value`` / ``acc = acc + value`` / ``acc = value + acc``."""
    if isinstance(stmt, ast.AugAssign) and isinstance(stmt.op, ast.Add):
        acc = dotted_name(stmt.target)
        return (acc, stmt.value) if acc else None
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
        acc = dotted_name(stmt.targets[0])
        value = stmt.value
        if acc and isinstance(value, ast.BinOp) and isinstance(value.op, ast.Add):
            if dotted_name(value.left) == acc:
                return acc, value.right
            if dotted_name(value.right) == acc:
                return acc, value.left
    return None


def _operand_names(value: ast.expr) -> list[ast.Name]:
    """Names added as they are (``loss``) or scaled (``loss * x.size(0)``, ``loss / n``)."""
    if isinstance(value, ast.Name):
        return [value]
    if isinstance(value, ast.BinOp) and isinstance(value.op, (ast.Mult, ast.Div)):
        sides = [value.left] if isinstance(value.op, ast.Div) else [value.left, value.right]
        return [s for s in sides if isinstance(s, ast.Name)]
    return []


class LossAccumulatesGraph(Rule):
    """
    ## What it does
    Finds `acc += loss` (or `acc = acc + loss`, `acc += loss * x.size(0)`) in a loop where
    `loss` is `.backward()`ed in that same loop and `acc` itself is never backpropagated.

    ## Why is this bad?
    `loss` is a tensor with a graph; adding it to `acc` records an add node whose inputs point
    back into every step's graph, so `acc.grad_fn` keeps the autograd nodes of all steps alive
    and the chain grows with every iteration (pinned in `tests/facts/test_gf303_facts.py`). The
    sum was only wanted for logging.

    ## Example
    ```python
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
        running_loss += loss
    ```

    ## Use instead
    ```python
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
        running_loss += loss.detach()
    ```

    ## Fix safety
    Safe by value with the default `style = "detach"`: `loss.detach()` has bitwise the same
    value, dtype and device, so `acc` stays a tensor with the same values; it only stops
    requiring grad and carrying a `grad_fn`. The rule does not fire when `acc` (or an
    expression of it, or a name assigned from it such as `avg = acc / n`) is `.backward()`ed
    or passed to `torch.autograd.grad` in the function (intentional accumulation), when a
    backward call uses `retain_graph`/`create_graph`, when `loss` is rebound between its
    backward and the accumulation (`loss = loss.item()`), when `acc` is reset on every
    iteration of the loop, or inside a `no_grad` region (no graph is recorded there). A reset
    under an `if` (`if i % 100 == 99: running = 0`) still lets the graphs pile up in between,
    so it is reported.

    Option `style = "item"` writes `loss.item()` instead: `acc` becomes a Python float, which
    changes its type (`acc.item()`, `acc.cpu()` later raise) and syncs with the GPU on every
    step, so that fix is unsafe. It is reported without a fix when `loss` is not provably a
    scalar (`loss.sum().backward()`).
    """

    code = "GF303"
    name = "loss-accumulates-graph"
    summary = "Loss accumulated with its graph: every step's graph stays alive"
    fix_safety = FixSafety.SAFE
    triggers = ("backward",)
    requires = ((attribute("backward", r"\("),),)  # a `.backward()` call: what the loss feeds
    options = (
        Option("style", ("detach", "item"), "`detach`: `loss.detach()` (safe); `item`: `loss.item()` (unsafe: a float)"),
    )

    VALID = [
        # Intentional accumulation: the sum is backpropagated.
        Valid(
            """
            def train(model, batches, opt):
                acc = 0
                for x in batches:
                    loss = model(x).mean()
                    acc += loss
                acc.backward()
                opt.step()
            """
        ),
        Valid(
            """
            def train(model, batches, opt, aux):
                acc = 0
                for x in batches:
                    loss = model(x).mean()
                    aux(x).backward()
                    acc = acc + loss
                (acc / len(batches)).backward()
            """
        ),
        # `loss` is a float returned by a helper: never backwarded here.
        Valid(
            """
            def fit(loader):
                loss_avg = 0
                for b in loader:
                    loss = train_step(b)
                    loss_avg += loss
            """
        ),
        Valid(
            """
            def fit(model, loader):
                total = 0
                for x in loader:
                    loss = model(x)
                    loss.backward()
                    total += loss.item()
            """
        ),
        Valid(
            """
            def fit(model, loader):
                total = 0
                for x in loader:
                    loss = model(x)
                    loss.backward()
                    total += loss.detach()
            """
        ),
        # Rebound to a float after backward.
        Valid(
            """
            def fit(model, loader):
                total = 0
                for x in loader:
                    loss = model(x)
                    loss.backward()
                    loss = loss.item()
                    total += loss
            """
        ),
        # Reset every iteration: no graph outlives the step.
        Valid(
            """
            def fit(model, loader):
                for x in loader:
                    total = 0
                    loss = model(x)
                    loss.backward()
                    total += loss
                    log(total)
            """
        ),
        # Not in a loop.
        Valid(
            """
            def step(model, x, total):
                loss = model(x)
                loss.backward()
                total += loss
                return total
            """
        ),
        # Under no_grad no graph is recorded.
        Valid(
            """
            import torch
            def fit(model, loader):
                total = 0
                for x in loader:
                    loss = model(x)
                    loss.backward()
                    with torch.no_grad():
                        total += loss
            """
        ),
        Valid(
            """
            def fit(model, loader):
                total = 0
                for x in loader:
                    loss = model(x)
                    loss.backward(retain_graph=True)
                    total += loss
            """
        ),
        # `loss` stays a float when the branch with the backward does not run: `.detach()` would raise.
        Valid(
            """
            def fit(model, loader, crit):
                total = 0.0
                for x, y in loader:
                    loss = 0.0
                    if y is not None:
                        loss = crit(model(x), y)
                        loss.backward()
                    total += loss
            """
        ),
        # The sum is backpropagated through an alias.
        Valid(
            """
            def fit(model, loader, aux):
                total = 0
                for x in loader:
                    loss = model(x)
                    aux(x).backward()
                    total = total + loss
                avg = total / len(loader)
                avg.backward()
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            def fit(model, loader, opt):
                running = 0.0
                for x, y in loader:
                    loss = model(x, y)
                    loss.backward()
                    opt.step()
                    running += loss  # for the log
                return running
            """,
            """
            def fit(model, loader, opt):
                running = 0.0
                for x, y in loader:
                    loss = model(x, y)
                    loss.backward()
                    opt.step()
                    running += loss.detach()  # for the log
                return running
            """,
        ),
        Invalid(
            """
            def fit(model, loader, opt):
                total = 0
                for x, y in loader:
                    loss = model(x, y)
                    (loss / 4).backward()
                    total = total + loss * x.size(0)
            """,
            """
            def fit(model, loader, opt):
                total = 0
                for x, y in loader:
                    loss = model(x, y)
                    (loss / 4).backward()
                    total = total + loss.detach() * x.size(0)
            """,
        ),
        Invalid(
            """
            def fit(self, loader):
                for x in loader:
                    loss = self.model(x)
                    self.scaler.scale(loss).backward()
                    self.epoch_loss += loss
            """,
            """
            def fit(self, loader):
                for x in loader:
                    loss = self.model(x)
                    self.scaler.scale(loss).backward()
                    self.epoch_loss += loss.item()
            """,
            options={"style": "item"},
        ),
        # Reset every 100 steps only (the PyTorch CIFAR tutorial's shape): up to 100 graphs alive.
        Invalid(
            """
            def fit(model, loader, opt):
                running = 0.0
                for i, x in enumerate(loader):
                    loss = model(x)
                    loss.backward()
                    opt.step()
                    running += loss
                    if i % 100 == 99:
                        print(running / 100)
                        running = 0.0
            """,
            """
            def fit(model, loader, opt):
                running = 0.0
                for i, x in enumerate(loader):
                    loss = model(x)
                    loss.backward()
                    opt.step()
                    running += loss.detach()
                    if i % 100 == 99:
                        print(running / 100)
                        running = 0.0
            """,
        ),
        # item style, loss not provably a scalar: reported, not fixed.
        Invalid(
            """
            def fit(model, loader):
                total = 0
                for x in loader:
                    loss = model(x)
                    loss.sum().backward()
                    total += loss
            """,
            None,
            options={"style": "item"},
        ),
        Invalid(
            """
            def fit(model, loader):
                total = 0
                for x in loader:
                    loss = model(x)
                    loss.sum().backward()
                    total += loss
            """,
            """
            def fit(model, loader):
                total = 0
                for x in loader:
                    loss = model(x)
                    loss.sum().backward()
                    total += loss.detach()
            """,
        ),
    ]

    def check(self, facts):
        backwards: dict = {}  # function -> [(call, subject, scalar)]
        for mc in facts.method_calls:
            if mc.method == "backward":
                func = facts.function_of.get(mc.call)
                subject, scalar = _backward_subject(mc.call.func.value)
                backwards.setdefault(func, []).append((mc.call, subject, scalar))
        if not backwards:
            return
        autograd_calls: dict = {}  # function -> calls of torch.autograd.grad/backward
        for call in facts.calls:
            if facts.call_qualname(call) in ("torch.autograd.grad", "torch.autograd.backward"):
                autograd_calls.setdefault(facts.function_of.get(call), []).append(call)
        for func in [None, *facts.functions]:
            calls = backwards.get(func)
            if not calls:
                continue
            if any(kw.arg in ("retain_graph", "create_graph") for call, _, _ in calls for kw in call.keywords):
                continue
            for stmt in facts.statements(func):
                finding = self._check_statement(facts, stmt, calls, autograd_calls.get(func, []))
                if finding is not None:
                    yield finding

    def _check_statement(self, facts, stmt, calls, autograd_calls):
        accumulated = _accumulated(stmt)
        if accumulated is None:
            return None
        acc, value = accumulated
        loops = _loops_around(facts, stmt)
        if not loops or facts.grad_mode_at(stmt) in ("disabled", "conditional"):
            return None
        differentiated = [c.func.value for c, _, _ in calls] + autograd_calls
        if self._acc_is_differentiated(acc, differentiated) or _flows_into_any(facts, stmt, acc, differentiated):
            return None
        for name in _operand_names(value):
            for loop in loops:
                matches = [(c, scalar) for c, subject, scalar in calls if subject == name.id and is_within(facts, c, loop)]
                if not matches:
                    continue
                # the backwards of the very value accumulated: none rebinds the name in between
                # (a GAN step backwards `loss` twice, each accumulated into its own sum)
                matches = [(c, scalar) for c, scalar in matches if not _rebound_between(loop, name.id, c, stmt)]
                if not matches or _reset_every_iteration(facts, loops[0], acc, stmt):
                    return None
                call, scalar = min(matches, key=lambda m: _position(m[0]))
                if not any(always_ran_before(facts.parents, loop.body, c, stmt) for c, _ in matches) and _bound_to_plain_value(facts, stmt, name.id):
                    # `loss = 0.0` ... `if cond: loss = crit(..); loss.backward()` ... `acc += loss`:
                    # `loss` may still be a float here, and `0.0.detach()` would raise.
                    return None
                return self._report(facts, stmt, acc, name, scalar)
        return None

    @staticmethod
    def _acc_is_differentiated(acc, exprs) -> bool:
        """Whether ``acc`` appears in a ``.backward()`` receiver or an ``autograd.grad`` call."""
        for expr in exprs:
            for node in ast.walk(expr):
                if isinstance(node, (ast.Name, ast.Attribute)) and dotted_name(node) == acc:
                    return True
        return False

    def _report(self, facts, stmt, acc, name, scalar):
        style = self.opts.get("style", "detach")
        loss = name.id
        message = f"`{acc}` accumulates `{loss}` with its graph: every step's graph stays alive"
        if style == "item":
            fix = FixSafety.UNSAFE if scalar else False
            title = f"Write `{loss}.item()` (`{acc}` becomes a Python float)"
            if not scalar:
                message += f" (`{loss}` may not be a scalar: use `{loss}.detach()`)"
        else:
            fix, title = True, f"Write `{loss}.detach()` (same value, no graph)"
        return self.report(facts, stmt, message, fix=fix, fix_title=title, data=(facts.span(name), style))

    def fix(self, finding, ctx):
        from gradfix.fixer import Edit

        span, style = finding.data
        node = ctx.node_at(span, cst.Name)
        method = "item" if style == "item" else "detach"
        return [Edit(node, cst.Call(func=cst.Attribute(value=node, attr=cst.Name(method))))]

    @staticmethod
    def contract():
        # gradfix verify: "safe by value": the accumulator keeps its value but no graph
        # (detach); with style=item it becomes a Python float (summed in float64).
        from gradfix.verify.contract import Contract, NoGraphReturned, SameValues

        return {
            "detach": Contract(
                "same values; the accumulator holds no graph",
                may_differ=("*: returned*.requires_grad",),
                expect=(NoGraphReturned("train"),),
            ),
            "item": Contract(
                "the accumulator becomes a float (rtol 1e-6)",
                may_differ=("*: returned*",),
                expect=(SameValues("train", 1e-6),),
            ),
        }


def _position(node: ast.AST) -> tuple[int, int]:
    return node.lineno, node.col_offset


def _rebound_between(loop: ast.AST, name: str, a: ast.AST, b: ast.AST) -> bool:
    """Whether ``name`` is bound (or deleted) inside ``loop`` between ``a`` and ``b``."""
    lo, hi = sorted((_position(a), _position(b)))
    for node in ast.walk(loop):
        if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, (ast.Store, ast.Del)):
            if lo < _position(node) < hi:
                return True
    return False


_BRANCHES = (ast.If, ast.IfExp, ast.For, ast.AsyncFor, ast.While, ast.ExceptHandler, ast.comprehension, *_SCOPES)
if hasattr(ast, "match_case"):
    _BRANCHES = (*_BRANCHES, ast.match_case)


def _reset_every_iteration(facts, loop: ast.AST, acc: str, stmt: ast.stmt) -> bool:
    """Whether ``acc`` is (re)bound by another statement that runs on every iteration of
    ``loop`` (not under an ``if``, a nested loop or an ``except``): then no graph outlives
    an iteration. A reset under ``if i % 100 == 99:`` still lets up to 100 graphs pile up."""
    own = stmt.target if isinstance(stmt, ast.AugAssign) else stmt.targets[0]
    for node in ast.walk(loop):
        if isinstance(node, (ast.Name, ast.Attribute)) and isinstance(node.ctx, (ast.Store, ast.Del)):
            if node is own or dotted_name(node) != acc:
                continue
            current = facts.parents.get(node)
            while current is not None and current is not loop and not isinstance(current, _BRANCHES):
                current = facts.parents.get(current)
            if current is loop:
                return True
    return False


def _bound_to_plain_value(facts, stmt: ast.stmt, name: str) -> bool:
    """Whether the function binds ``name`` to a number or ``None`` somewhere (``loss = 0.0``)."""
    for other in facts.statements(facts.enclosing_function(stmt)):
        if isinstance(other, (ast.Assign, ast.AnnAssign)) and isinstance(other.value, ast.Constant):
            targets = other.targets if isinstance(other, ast.Assign) else [other.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                return True
    return False


def _flows_into_any(facts, stmt: ast.stmt, acc: str, exprs) -> bool:
    """Whether a name assigned from ``acc`` in the function (``avg = acc / n``), directly or
    through other assignments, is read by one of ``exprs`` (backward receivers,
    ``autograd.grad`` calls): the sum is backpropagated through an alias."""
    func = facts.enclosing_function(stmt)
    tainted: set[str] = set()
    for other in facts.statements(func):
        if other is stmt or not isinstance(other, (ast.Assign, ast.AnnAssign, ast.AugAssign)) or other.value is None:
            continue
        if any(isinstance(n, (ast.Name, ast.Attribute)) and dotted_name(n) == acc for n in ast.walk(other.value)):
            targets = other.targets if isinstance(other, ast.Assign) else [other.target]
            tainted |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    if not tainted:
        return False
    read = {n.id for e in exprs for n in ast.walk(e) if isinstance(n, ast.Name)}
    return any(facts.flows_into(func, tainted, r) for r in read)  # a tainted name reaches itself
