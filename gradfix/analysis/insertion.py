"""Inserting statements for a fix (``model.eval()``, ``model.train()``): where they go, and
names that do not clash. Shared by GF104 and GF105."""

from __future__ import annotations

import ast

from gradfix.lazy import cst

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
