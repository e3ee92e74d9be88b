"""A forward data flow over one function's statements (stdlib ast), joined at every merge.

The state at a point is the set of facts that can hold there on *some* path (a may-analysis:
the join is set union, and the empty set means "no path reaches it"). The walk follows the
structure of the code, which for Python is its control-flow graph: both branches of an `if`
join after it; a loop body runs from the join of the loop's entry, the end of its body and
every `continue`, until that join stops growing (the sets are small and finite), and the loop
is left from what an iteration hands on (the test failing) and from every `break`: a loop is
taken to run at least once (`for epoch in range(epochs)` with no epochs is no path an expert
weighs; the first iteration still starts from what came before the loop) unless the caller
asks for ``loops_may_skip``; `return`
and `raise` end their path (a `return` inside `try` goes through its `finally` first); a `try`
handler or `finally` can start from any state inside the `try` body. A `while True:` loop is
left by its `break`s only. Nested `def`/`class`/`lambda` bodies do not run where they are
written. Not modelled: `break`/`continue` through a `finally`, exceptions a `with` swallows.

What the facts are and how a statement changes them is the caller's: ``effect(stmt, state)``
gives the state after ``stmt``'s own expressions run (its header for a compound statement),
``before`` maps a statement to the state that a planned insertion right before it sets.
``refine(test, state, truth)``, when given, is what an `if` test tells on each branch (the body
runs where it held, the `else` where it failed): :func:`not_instance_at` uses it for
`isinstance` narrowing.
"""

from __future__ import annotations

import ast
from typing import Callable, Mapping

State = frozenset
NOWHERE: State = frozenset()

_SKIPPED = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_TRY = (ast.Try, *((ast.TryStar,) if hasattr(ast, "TryStar") else ()))


class ForwardFlow:
    """Run once over ``body``; :attr:`at` maps ``id(stmt)`` to the state on entry to it."""

    def __init__(
        self,
        body: list[ast.stmt],
        entry: State,
        effect: Callable[[ast.stmt, State], State],
        before: Mapping[int, State] | None = None,
        loops_may_skip: bool = False,
        refine: Callable[[ast.expr, State, bool], State] | None = None,
    ):
        self.effect = effect
        self.refine = refine
        self.before = before or {}
        self.loops_may_skip = loops_may_skip  # also leave a loop from its entry (no iteration)
        self.at: dict[int, State] = {}
        self.returns: State = NOWHERE  # joined over `return` statements
        self._loops: list[tuple[list[State], list[State]]] = []  # (breaks, continues)
        self._inside_try: list[list[State]] = []  # states seen in each enclosing `try` body
        self._pending: list[list[State]] = []  # `return` states waiting for each enclosing `finally`
        end = self._block(body, entry)
        self.exit = self.returns | end  # leaving the body without raising

    def _block(self, stmts: list[ast.stmt], state: State) -> State:
        for stmt in stmts:
            state = self._stmt(stmt, state)
        return state

    def _record(self, stmt: ast.stmt, state: State) -> None:
        self.at[id(stmt)] = self.at.get(id(stmt), NOWHERE) | state
        for seen in self._inside_try:
            seen.append(state)

    def _stmt(self, stmt: ast.stmt, state: State) -> State:
        if state and id(stmt) in self.before:
            state = self.before[id(stmt)]
        self._record(stmt, state)
        if not state:
            return state
        if isinstance(stmt, _SKIPPED):
            return state
        after = self.effect(stmt, state)  # the statement's own expressions (a header)
        for seen in self._inside_try:
            seen.append(after)
        if isinstance(stmt, ast.If):
            if self.refine is None:
                return self._block(stmt.body, after) | self._block(stmt.orelse, after)
            taken, failed = self.refine(stmt.test, after, True), self.refine(stmt.test, after, False)
            return self._block(stmt.body, taken) | self._block(stmt.orelse, failed)
        if isinstance(stmt, (ast.For, ast.AsyncFor, ast.While)):
            return self._loop(stmt, after)
        if isinstance(stmt, (ast.With, ast.AsyncWith)):
            return self._block(stmt.body, after)
        if isinstance(stmt, _TRY):
            return self._try(stmt, after)
        if isinstance(stmt, ast.Match):
            out = after  # no case may match
            for case in stmt.cases:
                out |= self._block(case.body, after)
            return out
        if isinstance(stmt, ast.Return):
            self._return(after)
            return NOWHERE
        if isinstance(stmt, ast.Raise):
            return NOWHERE
        if isinstance(stmt, (ast.Break, ast.Continue)) and self._loops:
            self._loops[-1][0 if isinstance(stmt, ast.Break) else 1].append(after)
            return NOWHERE
        return after

    def _loop(self, loop: ast.For | ast.AsyncFor | ast.While, entry: State) -> State:
        head = entry
        while True:
            self._loops.append(([], []))
            end = self._block(loop.body, head)
            breaks, continues = self._loops.pop()
            again = end.union(*continues)  # what an iteration hands to the next one
            if head | again == head:
                break
            head |= again
        forever = isinstance(loop, ast.While) and isinstance(loop.test, ast.Constant) and bool(loop.test.value)
        normal = NOWHERE if forever else self._block(loop.orelse, head if self.loops_may_skip else again)
        return normal.union(*breaks)

    def _return(self, state: State) -> None:
        if self._pending:
            self._pending[-1].append(state)  # the `finally` runs first
        else:
            self.returns |= state

    def _try(self, node: ast.Try, entry: State) -> State:
        seen: list[State] = [entry]
        returning: list[State] = []
        if node.finalbody:
            self._pending.append(returning)
        self._inside_try.append(seen)
        out = self._block(node.body, entry)
        self._inside_try.pop()
        raised = NOWHERE.union(*seen)  # an exception may leave the body at any statement
        out = self._block(node.orelse, out)
        for handler in node.handlers:
            out |= self._block(handler.body, raised)
        if not node.finalbody:
            return out
        self._pending.pop()
        self._block(node.finalbody, raised)  # the exceptional way through `finally` (re-raises)
        if returning:
            self._return(self._block(node.finalbody, NOWHERE.union(*returning)))
        return self._block(node.finalbody, out)


def innermost_statement(parents: Mapping[ast.AST, ast.AST], node: ast.AST) -> ast.stmt | None:
    """The statement ``node`` belongs to (itself when it is one)."""
    current = node
    while current is not None and not isinstance(current, ast.stmt):
        current = parents.get(current)
    return current


def always_ran_before(parents: Mapping[ast.AST, ast.AST], body: list[ast.stmt], node: ast.AST, point: ast.stmt) -> bool:
    """Whether every path through ``body`` that reaches ``point`` ran ``node`` first: its
    statement ran, and ``node`` is not under a conditional expression (`a and f()`, `f() if c
    else g`) in it. Loops inside ``body`` may run no iteration; ``body`` itself runs once."""
    stmt = innermost_statement(parents, node)
    current = parents.get(node)
    while current is not None and current is not stmt:
        if isinstance(current, (ast.IfExp, ast.BoolOp, ast.Lambda)):
            return False
        current = parents.get(current)
    ran = frozenset({True})

    def effect(s: ast.stmt, state: State) -> State:
        return ran if s is stmt else state

    flow = ForwardFlow(body, frozenset({False}), effect, loops_may_skip=True)
    return flow.at.get(id(point), NOWHERE) == ran


NOT_INSTANCE: State = frozenset({"other"})


def not_instance_at(
    parents: Mapping[ast.AST, ast.AST],
    body: list[ast.stmt],
    name: str,
    point: ast.AST,
    is_class: Callable[[ast.expr], bool],
) -> bool:
    """Whether on every path through ``body`` to ``point`` the name ``name`` failed an
    `isinstance(name, C)` test (``is_class(C)``, or a tuple holding such a C) since it was last
    bound: the `else` of `if isinstance(net, nn.Module):`, the body of `if not isinstance(...)`,
    the code after `if isinstance(net, nn.Module): ... return`. `and`/`or`/`not` are followed."""
    stmt = innermost_statement(parents, point)
    return stmt is not None and not_instance_flow(body, name, is_class).at.get(id(stmt)) == NOT_INSTANCE


def not_instance_flow(body: list[ast.stmt], name: str, is_class: Callable[[ast.expr], bool]) -> ForwardFlow:
    """The flow behind :func:`not_instance_at`: its state at a statement is
    :data:`NOT_INSTANCE` where ``name`` is known to have failed the test."""

    def tested(test: ast.expr) -> bool | None:
        """True: the test is `isinstance(name, C)`; None: something else."""
        if not (isinstance(test, ast.Call) and isinstance(test.func, ast.Name) and test.func.id == "isinstance"):
            return None
        if len(test.args) != 2 or _dotted(test.args[0]) != name:
            return None
        kinds = test.args[1].elts if isinstance(test.args[1], ast.Tuple) else [test.args[1]]
        return True if any(is_class(k) for k in kinds) else None

    def refine(test: ast.expr, state: State, truth: bool) -> State:
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            return refine(test.operand, state, not truth)
        if isinstance(test, ast.BoolOp):
            # `a and b` held: both held; `a or b` failed: both failed. Otherwise nothing is known.
            if isinstance(test.op, ast.And) == truth:
                for value in test.values:
                    state = refine(value, state, truth)
            return state
        if tested(test) is None or not state:
            return state
        return frozenset({"instance" if truth else "other"})

    def effect(stmt: ast.stmt, state: State) -> State:
        if isinstance(stmt, (ast.For, ast.AsyncFor)):
            header = [stmt.target]
        elif isinstance(stmt, (ast.With, ast.AsyncWith)):
            header = [i.optional_vars for i in stmt.items if i.optional_vars is not None]
        elif isinstance(stmt, (ast.If, ast.While, ast.Match, *_TRY)):
            header = []
        else:
            header = [stmt]
        for part in header:
            if any(isinstance(n, ast.Name) and n.id == name and not isinstance(n.ctx, ast.Load) for n in ast.walk(part)):
                return frozenset({"maybe"})  # bound again: another value
        return state

    return ForwardFlow(body, frozenset({"maybe"}), effect, refine=refine)


def _dotted(expr: ast.AST) -> str | None:
    parts = []
    while isinstance(expr, ast.Attribute):
        parts.append(expr.attr)
        expr = expr.value
    if not isinstance(expr, ast.Name):
        return None
    return ".".join([expr.id, *reversed(parts)])
