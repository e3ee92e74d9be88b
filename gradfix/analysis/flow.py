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
        last_iteration: frozenset[int] = frozenset(),
        iteration: Callable[[ast.stmt, State], State] | None = None,
    ):
        self.effect = effect
        # what a loop's header does again before each later iteration: a `for` binds its target
        # anew, a `while` evaluates its test again (default: the header's whole ``effect``)
        self.iteration = iteration or effect
        self.refine = refine
        # ids of the `if` statements that end a loop's body and hold only on its last iteration
        # (:func:`last_iteration_ifs`): their body hands nothing to a next iteration
        self.last_iteration = last_iteration
        self.before = before or {}
        self.loops_may_skip = loops_may_skip  # also leave a loop from its entry (no iteration)
        self.at: dict[int, State] = {}
        self.returns: State = NOWHERE  # joined over `return` statements
        self._loops: list[tuple[list[State], list[State], list[State]]] = []  # (breaks, continues, last iteration)
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
            taken, failed = after, after
            if self.refine is not None:
                taken, failed = self.refine(stmt.test, after, True), self.refine(stmt.test, after, False)
            if id(stmt) in self.last_iteration and self._loops:
                self._loops[-1][2].append(self._block(stmt.body, taken))
                return self._block(stmt.orelse, failed)
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
            self._loops.append(([], [], []))
            end = self._block(loop.body, head)
            breaks, continues, last = self._loops.pop()
            handed = end.union(*continues)  # what an iteration hands to the next one
            again = self.iteration(loop, handed) if handed else handed
            if head | again == head:
                break
            head |= again
        forever = isinstance(loop, ast.While) and isinstance(loop.test, ast.Constant) and bool(loop.test.value)
        # an exhausted `for` binds nothing more; a `while` evaluates its test once more to leave
        done = again if isinstance(loop, ast.While) else handed
        normal = NOWHERE if forever else self._block(loop.orelse, (head if self.loops_may_skip else done).union(*last))
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


def last_iteration_ifs(body: list[ast.stmt]) -> frozenset[int]:
    """The ``if`` statements in ``body`` that end a ``for`` loop's body and test that the loop
    is in its last iteration: `for i, b in enumerate(S):` or `for i in range(len(S)):` ending in
    `if i == len(S) - 1:` (or `i + 1 == len(S)`, either way round), where ``S`` is what the loop
    iterates, directly or through a name bound only to values that hold it (`steps =
    list(enumerate(loader)); for i, b in tqdm(steps): ... if i == len(steps) - 1:`)."""
    nodes = [n for stmt in body for n in ast.walk(stmt)]
    bound: dict[str, list[ast.expr]] = {}
    for node in nodes:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    bound.setdefault(target.id, []).append(node.value)
    found = set()
    for loop in nodes:
        if not (isinstance(loop, ast.For) and loop.body and isinstance(loop.body[-1], ast.If)):
            continue
        target = loop.target.elts[0] if isinstance(loop.target, ast.Tuple) and loop.target.elts else loop.target
        sized = _last_index_test(loop.body[-1].test, target.id) if isinstance(target, ast.Name) else None
        if sized is not None and _iterates(loop.iter, sized, bound):
            found.add(id(loop.body[-1]))
    return frozenset(found)


def _last_index_test(test: ast.expr, index: str) -> str | None:
    """``S`` for a test `index == len(S) - 1` / `index + 1 == len(S)` (either way round)."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
        return None
    for a, b in ((test.left, test.comparators[0]), (test.comparators[0], test.left)):
        plus_one = isinstance(a, ast.BinOp) and isinstance(a.op, ast.Add) and _is_one(a.right)
        minus_one = isinstance(b, ast.BinOp) and isinstance(b.op, ast.Sub) and _is_one(b.right)
        if plus_one and isinstance(a.left, ast.Name) and a.left.id == index:
            size = b
        elif minus_one and isinstance(a, ast.Name) and a.id == index:
            size = b.left
        else:
            continue
        if isinstance(size, ast.Call) and isinstance(size.func, ast.Name) and size.func.id == "len" and len(size.args) == 1:
            return _dotted(size.args[0])
    return None


def _is_one(expr: ast.expr) -> bool:
    return isinstance(expr, ast.Constant) and expr.value == 1


def _iterates(expr: ast.expr, sized: str, bound: dict[str, list[ast.expr]], depth: int = 0) -> bool:
    """``expr`` (a loop's iterable) holds ``sized``, or a name bound only to values that do."""
    names = {_dotted(n) for n in ast.walk(expr) if isinstance(n, (ast.Name, ast.Attribute))}
    if sized in names:
        return True
    return depth < 2 and any(
        name in bound and all(_iterates(v, sized, bound, depth + 1) for v in bound[name]) for name in names if name
    )


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

    refine = InstanceTests(tested, lambda state: frozenset({"instance"}), lambda state: NOT_INSTANCE)
    return ForwardFlow(body, frozenset({"maybe"}), effect, refine=refine)


class InstanceTests:
    """A :class:`ForwardFlow` ``refine`` for `isinstance` tests: where ``tested(test)`` is true
    for a test, the branch it holds on starts from ``held(state)`` and the one it fails on from
    ``failed(state)``; `not`, `and`, `or` are followed (`a and b` held: both held; `a or b`
    failed: both failed; otherwise nothing is known). A class, not a closure calling itself: a
    flow memoised in the facts would tie them into a reference cycle."""

    def __init__(self, tested: Callable[[ast.expr], object], held: Callable[[State], State], failed: Callable[[State], State]):
        self.tested, self.held, self.failed = tested, held, failed

    def __call__(self, test: ast.expr, state: State, truth: bool) -> State:
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            return self(test.operand, state, not truth)
        if isinstance(test, ast.BoolOp):
            if isinstance(test.op, ast.And) == truth:
                for value in test.values:
                    state = self(value, state, truth)
            return state
        if not state or not self.tested(test):
            return state
        return self.held(state) if truth else self.failed(state)


def _dotted(expr: ast.AST) -> str | None:
    parts = []
    while isinstance(expr, ast.Attribute):
        parts.append(expr.attr)
        expr = expr.value
    if not isinstance(expr, ast.Name):
        return None
    return ".".join([expr.id, *reversed(parts)])
