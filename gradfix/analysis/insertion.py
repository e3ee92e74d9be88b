"""Inserting statements for a fix: where they go, and names that do not clash.

``model.eval()``/``model.train()`` (GF104, GF105: :func:`insert_before`), and where a
``no_grad`` goes (GF302, GF304: :func:`plan_no_grad`): one ``with`` around the smallest loop or
block that holds every statement that needs it, or ``@torch.no_grad()`` on the function when its
whole body would be wrapped, never one ``with`` per statement.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Callable, Sequence

from gradfix.lazy import cst

from gradfix.analysis.provenance import UNKNOWN, reaching_definitions
from gradfix.analysis.regions import integer_valued, is_inert, same_under_no_grad
from gradfix.analysis.statements import around_run, can_wrap, is_elif, is_within, own_nodes, statement_block, torch_at_definition
from gradfix.facts import FileFacts


def body_start(stmts: list[ast.stmt]) -> ast.stmt:
    """The first statement of a body after its docstring (the body itself if only a docstring)."""
    first = stmts[0]
    if (
        len(stmts) > 1
        and isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
    ):
        return stmts[1]
    return first


def insert_before(ctx, target: cst.BaseStatement, new: list[cst.BaseStatement]):
    """Edits that put ``new`` right before ``target`` (touching the smallest statement)."""
    from gradfix.fixer import Edit, FixError

    parent = ctx.parent(target)
    if not isinstance(parent, (cst.IndentedBlock, cst.Module)):
        raise FixError("the statement is not in an indented block")
    body = list(parent.body)
    index = next(i for i, s in enumerate(body) if s is target)
    if index > 0 and isinstance(body[index - 1], cst.SimpleStatementLine):
        previous = body[index - 1]
        return [Edit(previous, cst.FlattenSentinel([previous, *new]))]
    return [Edit(target, cst.FlattenSentinel([*new, target]))]


def statement_at(ctx, span) -> cst.BaseStatement:
    return ctx.node_at(span, cst.BaseStatement)


def unused_name(facts: FileFacts, func, base: str) -> str:
    taken = set(facts.scope_of_node[func].locals) if func in facts.scope_of_node else set()
    taken |= {n.id for n in ast.walk(func) if isinstance(n, ast.Name)}
    name, i = base, 1
    while name in taken:
        i += 1
        name = f"{base}_{i}"
    return name


# -- where a ``no_grad`` goes ---------------------------------------------------------------------
_COMPOUND = (ast.If, ast.For, ast.While)
_LOOPS = (ast.For, ast.While)
_TRIES = (ast.Try, ast.TryStar) if hasattr(ast, "TryStar") else (ast.Try,)


@dataclass(frozen=True)
class NoGradPlan:
    """``decorate``: ``@torch.no_grad()`` on the function; else one ``with`` around each run
    (consecutive statements of one block), in source order."""

    decorate: bool
    runs: tuple[tuple[ast.stmt, ...], ...] = ()


def plan_no_grad(
    facts: FileFacts,
    func,
    groups: Sequence[Sequence[ast.stmt]],
    *,
    joins: Callable[[ast.stmt], bool],
    header_ok: Callable[[ast.stmt], bool],
    outside_ok: Callable[[list[ast.stmt], list[ast.stmt]], bool],
    private: bool = False,
) -> NoGradPlan:
    """Where the ``no_grad`` for ``groups`` (runs of statements of ``func`` that must run
    without grad) goes. The rule says which other statements may run under it too:

    - ``joins(stmt)``: a simple statement (``if``/``for``/``while`` are judged here: their
      header by ``header_ok``, their bodies statement by statement);
    - ``outside_ok(before, after)``: the statements of the body a block would leave out may
      run under a decorator as well;
    - ``private``: what joined statements bind must not be read outside the block (GF304: an
      assignment moved under ``no_grad`` may compute a tensor without history).

    An ``if`` whose branches hold only such statements goes in whole (``if/elif`` in a weight
    init loop: one block, not one per branch), and so does the loop that holds them, with every
    loop around it whose body holds nothing else;
    blocks of one body separated only by joined statements become one (two consecutive loops:
    one ``with`` around both). When that widening, carried through every enclosing loop, covers
    the function body but what ``outside_ok`` accepts, the function is decorated instead.
    """
    def joinable(stmt: ast.stmt) -> bool:
        return joinable_statement(stmt, joins, header_ok)

    original = {s for g in groups for s in g}
    suspends = func is not None and any(isinstance(n, (ast.Yield, ast.YieldFrom, ast.Await)) for n in own_nodes(func))
    for may_join in (joinable, lambda s: joinable(s) and not _binds(s)):
        widest = _widen(facts, func, groups, may_join, header_ok, through_loops=True)
        if len(widest) == 1 and not suspends and torch_at_definition(facts, func):
            outside = around_run(func, widest[0])
            if outside is not None and outside_ok(*outside):
                return NoGradPlan(True)
        # A loop whose body holds only the block's statements goes in whole, and so does one
        # around it (`for i: for j: w.data[i, j] = ..` is entered once, not once per `i`); an
        # `if` goes in only on the way to such a loop or to join blocks (`if c: for p: ..` in a
        # training loop keeps the `with` inside the `if`).
        innermost = _widen(facts, func, groups, may_join, header_ok, through_loops=False)
        runs = []
        for run in widest:
            if any(isinstance(s, _LOOPS) for s in run):
                runs.append(run)
                continue
            # an `if` around the loops: each loop it holds goes in whole (`if self.true_wd:
            # for group in ..: for p in ..:` gets one `with` around the `for group`, not one
            # per inner loop), the widening having gone through them already
            for part in (i for i in innermost if _inside(facts, i, run)):
                part = _outermost_loop(facts, part, run)
                if not any(part[0] is r[0] for r in runs):
                    runs.append(part)
        if not private or not any(_leaks(facts, func, run, original) for run in runs):
            return NoGradPlan(False, tuple(tuple(r) for r in runs))
    return NoGradPlan(False, tuple(tuple(g) for g in groups))


def _outermost_loop(facts, part: list[ast.stmt], run: Sequence[ast.stmt]) -> list[ast.stmt]:
    """The outermost loop around ``part`` that still lies inside ``run``, as a run of its own;
    ``part`` itself when there is none."""
    found, node = None, facts.parents.get(part[0])
    while node is not None and any(is_within(facts, node, s) for s in run):
        if isinstance(node, _LOOPS):
            found = node
        node = facts.parents.get(node)
    return [found] if found is not None else part


def _inside(facts, run: Sequence[ast.stmt], outer: Sequence[ast.stmt]) -> bool:
    return any(run[0] is s or is_within(facts, run[0], s) for s in outer)


def joinable_statement(stmt: ast.stmt, joins, header_ok) -> bool:
    """``stmt`` may join a ``no_grad`` block: a simple statement ``joins`` accepts, an
    ``if``/``for``/``while`` whose header ``header_ok`` accepts and whose statements all may,
    or a ``try`` whose statements (handlers included) all may."""
    # Module level, not a closure calling itself: that closure would be a reference cycle
    # holding the rule's callbacks, and through them the file's facts and whole tree, until
    # the cyclic collector came by.
    if isinstance(stmt, _COMPOUND):
        if isinstance(stmt, _LOOPS) and stmt.orelse:
            return False
        return header_ok(stmt) and all(joinable_statement(c, joins, header_ok) for c in _children(stmt))
    if isinstance(stmt, _TRIES):  # `try: bn = int(block["batch_normalize"]) except: bn = 0`
        blocks = [stmt.body, *(h.body for h in stmt.handlers), stmt.orelse, stmt.finalbody]
        return all(joinable_statement(c, joins, header_ok) for b in blocks for c in b)
    return joins(stmt)


def _children(stmt: ast.stmt) -> list[ast.stmt]:
    return [*stmt.body, *(stmt.orelse if isinstance(stmt, ast.If) else ())]


def _binds(stmt: ast.stmt) -> bool:
    return any(isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load) for n in ast.walk(stmt))


def _widen(facts, func, groups, joinable, header_ok, through_loops: bool) -> list[list[ast.stmt]]:
    """The runs that hold ``groups`` once every enclosing ``if``/loop whose other statements
    may join goes in whole (loops go in, but only ``through_loops`` beyond them)."""
    chosen = {s for g in groups for s in g}
    formed: dict[ast.stmt, set[ast.stmt]] = {}  # a statement that went in whole -> what it replaced
    changed = True
    while changed:
        changed = False
        for stmt in sorted(chosen, key=lambda s: -s.lineno):
            if stmt not in chosen or (isinstance(stmt, _LOOPS) and not through_loops):
                continue
            parent = facts.parents.get(stmt)
            if parent is None or parent is func or not isinstance(parent, _COMPOUND) or parent in chosen:
                continue
            if isinstance(parent, _LOOPS) and parent.orelse:
                continue
            children = _children(parent)
            if not all(c in chosen or joinable(c) for c in children):
                continue
            if not header_ok(parent) or not (is_elif(facts, parent) or can_wrap(facts, [parent])):
                continue
            # every chosen statement inside, not only its children: one the rule accepts as
            # joinable too may sit in an `if` that went in as joinable, not as formed
            inner = {s for s in chosen if is_within(facts, s, parent)}
            formed[parent] = inner
            chosen -= inner
            chosen.add(parent)
            changed = True
    # An `elif` only goes in with the `if` it belongs to: where that did not happen, its own
    # pieces are wrapped instead.
    while elifs := [s for s in chosen if is_elif(facts, s)]:
        for stmt in elifs:
            chosen.discard(stmt)
            chosen |= formed.get(stmt, set())
    by_block: dict[tuple[int, str], tuple[list[ast.stmt], list[int]]] = {}
    for stmt in chosen:
        where = statement_block(facts, stmt)
        if where is None:
            continue
        body = getattr(*where)
        by_block.setdefault((id(where[0]), where[1]), (body, []))[1].append(next(i for i, s in enumerate(body) if s is stmt))
    runs: list[list[ast.stmt]] = []
    for body, indexes in by_block.values():
        indexes.sort()
        start = end = indexes[0]
        for i in indexes[1:]:
            if all(joinable(s) for s in body[end + 1 : i]) and can_wrap(facts, body[start : i + 1]):
                end = i
            else:
                runs.append(body[start : end + 1])
                start = end = i
        runs.append(body[start : end + 1])
    return sorted(runs, key=lambda r: (r[0].lineno, r[0].col_offset))


def _leaks(facts, func, run: Sequence[ast.stmt], original: set[ast.stmt]) -> bool:
    """Whether a value that a joined statement of ``run`` computes (not a constant, a name or an
    attribute; not a loop target; not one of the ``original`` statements) may be read outside ``run``: a read there that an assignment
    inside may reach (:class:`~gradfix.analysis.provenance.ReachingDefinitions`)."""
    joined = [
        node
        for stmt in run
        for node in ast.walk(stmt)
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.NamedExpr))
        and not any(is_within(facts, node, o) for o in original)
        and not (isinstance(node, (ast.Assign, ast.AnnAssign)) and is_inert(facts, node.value))  # `found = False`
        # the same value either way: `b = torch.randn(2)`, `ptr += n` on an int offset
        and not (isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None and same_under_no_grad(facts, node.value))
        and not (isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name) and integer_valued(facts, node.target))
    ]
    if not joined:
        return False
    flow = reaching_definitions(facts, func)
    for read, definitions in flow.reaching.items():
        if any(is_within(facts, read, s) for s in run):
            continue
        for definition in definitions:
            if definition is UNKNOWN:
                continue
            binder = definition.node if isinstance(definition.node, ast.stmt) else facts.parents.get(definition.node)
            while binder is not None and not isinstance(binder, (ast.stmt, ast.NamedExpr)):
                binder = facts.parents.get(binder)
            if binder is not None and any(binder is j or is_within(facts, binder, j) for j in joined):
                return True
    return False
