"""Statements and blocks, for the fixes that move, wrap or unwrap them.

Where a statement sits (:func:`statement_block`), the smallest run of statements that holds
some nodes (:func:`smallest_run`), whether a run can move into an indented block
(:func:`can_wrap`), and the LibCST edits that wrap a run in ``with torch.no_grad():`` or
unwrap a ``with`` while keeping every comment.
"""

from __future__ import annotations

import ast
import re
from typing import Callable, Sequence

from gradfix.lazy import cst

from gradfix.facts import FileFacts, descendants, dotted_name, module_level
from gradfix.model import Span


def header_comment_lines(with_node: cst.With) -> list[cst.EmptyLine]:
    """The ``with …:  # comment`` trailing comment as an own-line comment (or nothing)."""
    body = with_node.body
    if isinstance(body, cst.IndentedBlock) and body.header.comment is not None:
        return [cst.EmptyLine(comment=body.header.comment)]
    return []


def unwrap_with(with_node: cst.With, statements: list[cst.BaseStatement]) -> list[cst.BaseStatement]:
    """``statements`` (from the ``with`` body) ready to stand in place of ``with_node``.

    The first one takes the ``with``'s leading lines and its header comment; a body footer
    holding comments has no place to go, so it stops the fix.
    """
    from gradfix.fixer import FixError

    body = with_node.body
    if isinstance(body, cst.IndentedBlock) and any(line.comment is not None for line in body.footer):
        raise FixError("comments after the last statement of the block have no place to go")
    if not statements:
        return []
    first = statements[0]
    lead = [*with_node.leading_lines, *header_comment_lines(with_node), *first.leading_lines]
    return [first.with_changes(leading_lines=lead), *statements[1:]]


def torch_reachable(facts: FileFacts, node: ast.AST, api: str | None = None) -> bool:
    """Whether the name the fixer will write for torch (``FixContext.torch_name``: a
    module-level ``import torch [as T]``, else an added ``import torch``) means the module at
    ``node``: a parameter or local named ``torch`` there would capture ``torch.no_grad()``.
    With ``api``, where the file imports it by name (``from torch import no_grad``: the fixer
    writes ``no_grad()``, see ``FixContext.grad_api``), whether that name means it at ``node``."""
    alias = facts.grad_api_alias(api) if api else None
    if alias is not None:
        return facts.resolve_name(alias, node) == facts.resolve_name(alias, facts.tree)
    names = facts.torch_module_names()
    if names:
        return all(facts.resolve_name(n, node) == "torch" for n in names)
    scopes = [facts.scope_of_node[f] for f in facts.enclosing_functions(node)] + [facts.scope_of_node[facts.tree]]
    return all("torch" not in scope.locals and "torch" not in scope.imports for scope in scopes)


def torch_at_definition(facts: FileFacts, func) -> bool:
    """Whether ``@torch.no_grad()`` (or the file's own ``no_grad`` name) on ``func`` finds its
    name bound when the ``def`` runs: every module-level import that binds it sits outside any
    ``if``/``try``/``with``, or in a block that holds ``func`` too (`if is_torch_available():
    import torch` above a class defined either way would raise NameError where a ``with`` in
    the body would not); with no such import the fixer adds one at the top."""
    alias = facts.grad_api_alias("no_grad")
    names = {alias} if alias else facts.torch_module_names() or {"torch"}
    for stmt in _module_level_statements(facts):
        bound = [(a.asname or a.name).split(".")[0] for a in stmt.names] if isinstance(stmt, (ast.Import, ast.ImportFrom)) else []
        if not names & set(bound):
            continue
        block = facts.parents.get(stmt)
        if block is not facts.tree and not is_within(facts, func, block):
            return False
    return True


def _module_level_statements(facts: FileFacts) -> list[ast.stmt]:
    """The module-level statements the fixer reads imports from (not the ``__main__`` block)."""
    return facts.memo(("statements.module_level",), lambda: list(module_level(facts.tree.body)))


def is_within(facts: FileFacts, node: ast.AST, root: ast.AST) -> bool:
    while node is not None:
        if node is root:
            return True
        node = facts.parents.get(node)
    return False


def own_nodes(func) -> list[ast.AST]:
    """Nodes of ``func``'s body, not descending into nested functions, lambdas or classes."""
    out: list[ast.AST] = []
    todo = list(func.body)
    push, pop, AST = todo.append, todo.pop, ast.AST
    while todo:
        node = pop()
        out.append(node)
        if isinstance(node, _NESTED):
            continue
        for name in node._fields:  # ast.iter_child_nodes, without its two generators per node
            value = getattr(node, name, None)
            if isinstance(value, AST):
                push(value)
            elif type(value) is list:
                for item in value:
                    if isinstance(item, AST):
                        push(item)
    return out


_NESTED = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


def statement_block(facts: FileFacts, stmt: ast.stmt) -> tuple[ast.AST, str] | None:
    """The (parent node, field) whose statement list holds ``stmt``."""
    parent = facts.parents.get(stmt)
    for field in ("body", "orelse", "finalbody"):
        body = getattr(parent, field, None)
        if isinstance(body, list) and any(s is stmt for s in body):
            return parent, field
    return None


def handler_of(facts: FileFacts, stop, stmt: ast.stmt) -> str | None:
    """``"finally"`` / ``"except"`` when ``stmt`` runs in a ``finally`` or ``except`` block
    below ``stop`` (a function, say), else None."""
    node, parent = stmt, facts.parents.get(stmt)
    while parent is not None and parent is not stop:
        if isinstance(parent, ast.ExceptHandler):
            return "except"
        if isinstance(parent, (ast.Try, getattr(ast, "TryStar", ast.Try))) and node in parent.finalbody:
            return "finally"
        node, parent = parent, facts.parents.get(parent)
    return None


def caught(facts: FileFacts, node: ast.AST, exception: str) -> bool:
    """``node`` runs in the body of a ``try`` of its own function whose handlers name
    ``exception`` (``except RuntimeError as e:``, ``except (ValueError, RuntimeError):``): the
    code expects the error there (a tutorial showing it, a probe for a feature). A bare
    ``except:`` or ``except Exception:`` is general error handling, not that."""
    child, parent = node, facts.parents.get(node)
    while parent is not None and not isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
        if isinstance(parent, (ast.Try, getattr(ast, "TryStar", ast.Try))) and any(child is s for s in parent.body):
            for handler in parent.handlers:
                kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
                if any(k is not None and dotted_name(k) in (exception, f"builtins.{exception}") for k in kinds):
                    return True
        child, parent = parent, facts.parents.get(parent)
    return False


def alone_on_its_lines(facts: FileFacts, first: ast.stmt, last: ast.stmt) -> bool:
    """No other statement shares a line with the run ``first``..``last`` (no ``;``, no
    ``if x: stmt`` one-liner), so the run can move into an indented block."""
    before = facts.line_text(first.lineno).encode("utf-8")[: first.col_offset]
    after = facts.line_text(last.end_lineno).encode("utf-8")[last.end_col_offset :].strip()
    return not before.strip() and (not after or after.startswith(b"#"))


def one_line_if(facts: FileFacts, stmt: ast.stmt) -> ast.If | None:
    """The ``if`` whose whole body is ``stmt`` written on the header's line (``if m.bias is not
    None: m.bias.data.zero_()``), with no ``else`` and no other statement on its line: the unit
    that moves into a block when ``stmt`` must; None otherwise."""
    parent = facts.parents.get(stmt)
    if not (isinstance(parent, ast.If) and parent.body == [stmt] and not parent.orelse):
        return None
    if parent.lineno != stmt.lineno or not alone_on_its_lines(facts, parent, parent):
        return None
    return parent


def alone_on_its_line(facts: FileFacts, stmt: ast.stmt) -> bool:
    """``stmt`` is one line that it fills, apart from indentation and a trailing comment."""
    return stmt.lineno == stmt.end_lineno and alone_on_its_lines(facts, stmt, stmt)


def can_wrap(facts: FileFacts, run: Sequence[ast.stmt]) -> bool:
    """Whether ``run`` (consecutive statements of one block) can move into a ``with`` body.

    Not when it suspends (``yield``/``await``: the grad mode would leak to the consumer while
    suspended) or defines functions/classes (decorator positions differ between parsers).
    """
    if not alone_on_its_lines(facts, run[0], run[-1]):
        return False
    if any(facts.line_text(s.lineno).encode("utf-8")[: s.col_offset].strip() for s in run):
        return False
    if crosses_notebook_cell(facts, run[0], run[-1]) or any(is_elif(facts, s) for s in run):
        return False
    for stmt in run:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return False
        for node in descendants(stmt):
            if isinstance(node, (ast.Yield, ast.YieldFrom, ast.Await)):
                return False
    return True


def is_elif(facts: FileFacts, stmt: ast.stmt) -> bool:
    """An ``elif`` (the ``if`` that the ast puts alone in its parent's ``orelse``): it cannot
    move into a block of its own, that would make it a separate ``if``."""
    if not isinstance(stmt, ast.If):
        return False
    return facts.line_text(stmt.lineno).encode("utf-8")[stmt.col_offset :].startswith(b"elif")


# The marker line `gradfix.notebook.VirtualModule.marker` puts before each cell of a notebook.
_CELL_MARKER = re.compile(r"^# gradfix-notebook-cell \S+ \d+$")


def is_cell_marker(line: str) -> bool:
    """Whether ``line`` is the marker a notebook's virtual module puts before a cell."""
    return bool(_CELL_MARKER.match(line))


def crosses_notebook_cell(facts: FileFacts, first: ast.stmt, last: ast.stmt) -> bool:
    """Whether the run ``first``..``last`` of a notebook's virtual module spans two cells: one
    block cannot hold statements of two cells."""
    if not facts.path.endswith(".ipynb"):
        return False
    return any(is_cell_marker(facts.line_text(n)) for n in range(first.lineno + 1, last.end_lineno + 1))


def wrap_in_no_grad(
    ctx,
    spans: Sequence[Span],
    transform: Callable[[cst.BaseStatement], cst.BaseStatement] | None = None,
) -> list:
    """Edits that put the consecutive statements at ``spans`` into one ``with torch.no_grad():``.

    The first statement becomes the ``with`` (keeping its leading comments and blank lines
    above the ``with``), the others are removed from their place; ``transform`` may rewrite
    each statement on the way in. Comments between the statements move with them. A lone
    ``with`` statement, or the ``with`` whose whole body the statements are, takes
    ``torch.no_grad()`` as its first item instead (``with torch.no_grad(),
    gpytorch.settings.fast_pred_var():``, as one writes it by hand): entered first, as the outer
    block would be, and its body stays where it is.
    """
    from gradfix.fixer import Edit

    stmts = [ctx.node_at(span, cst.BaseStatement) for span in spans]
    block = ctx.parent(stmts[0])
    outer = ctx.parent(block) if isinstance(block, cst.IndentedBlock) else None
    if isinstance(outer, cst.With) and list(block.body) == stmts:
        only = outer  # the whole body of a `with`: that `with` takes the item
    else:
        only = stmts[0] if len(stmts) == 1 else None
    if isinstance(only, cst.With) and only.asynchronous is None:
        stmt = transform(only) if transform else only
        api = cst.WithItem(ctx.expr(f"{ctx.grad_api('no_grad')}()"), comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        return [Edit(only, stmt.with_changes(items=[api, *stmt.items]))]
    moved = [transform(s) if transform else s for s in stmts]
    joined = _join_neighbour_block(ctx, block, stmts, moved)
    if joined is not None:
        return joined
    wrapper = grad_with(ctx, "no_grad", moved, own_indent(ctx, stmts[0]))
    return [Edit(stmts[0], wrapper)] + [Edit(s, cst.RemoveFromParent()) for s in stmts[1:]]


def _join_neighbour_block(ctx, block, stmts: list, moved: list) -> list | None:
    """Edits that move the statements into a ``with torch.no_grad():`` right before or after
    them (nothing between), as one writes it by hand instead of a second block beside the
    first; None when no such neighbour. The statements' comments move in with them; the blank
    lines above the first one stay above the block."""
    from gradfix.fixer import Edit

    if not isinstance(block, cst.IndentedBlock):
        return None
    body = list(block.body)
    first, last = body.index(stmts[0]), body.index(stmts[-1])
    wanted = f"{ctx.grad_api('no_grad')}()"

    def no_grad_block(stmt) -> bool:
        return (
            isinstance(stmt, cst.With) and stmt.asynchronous is None and len(stmt.items) == 1
            and stmt.items[0].asname is None and isinstance(stmt.body, cst.IndentedBlock)
            and ctx.code(stmt.items[0].item) == wanted
        )

    indent = own_indent(ctx, stmts[0])
    removed = [Edit(s, cst.RemoveFromParent()) for s in stmts]
    after = body[last + 1] if last + 1 < len(body) else None
    if no_grad_block(after):
        inner = [indented_deeper(s, after.body.indent or indent or ctx.module.default_indent) for s in moved]
        lead = list(inner[0].leading_lines)
        blank = 0
        while blank < len(lead) and lead[blank].comment is None:
            blank += 1
        inner[0] = inner[0].with_changes(leading_lines=lead[blank:])
        old = list(after.body.body)  # what stood above the block now stands above its old first line
        old[0] = old[0].with_changes(leading_lines=[*after.leading_lines, *old[0].leading_lines])
        joined = after.with_changes(leading_lines=stmts[0].leading_lines[:blank], body=after.body.with_changes(body=[*inner, *old]))
        return removed + [Edit(after, joined)]
    before = body[first - 1] if first > 0 else None
    if no_grad_block(before):
        inner = [indented_deeper(s, before.body.indent or indent or ctx.module.default_indent) for s in moved]
        return removed + [Edit(before, before.with_changes(body=before.body.with_changes(body=[*before.body.body, *inner])))]
    return None


def grad_with(ctx, api: str, stmts: list[cst.BaseStatement], indent: str | None = None) -> cst.With:
    """``with torch.<api>():`` around ``stmts`` (the first one's leading comments and blank
    lines go above the ``with``)."""
    body = [indented_deeper(s, indent or ctx.module.default_indent) for s in stmts]
    body[0] = body[0].with_changes(leading_lines=())
    header = ctx.statement(f"with {ctx.grad_api(api)}():\n    pass\n")
    block = header.body.with_changes(body=body, indent=indent)
    return header.with_changes(body=block, leading_lines=stmts[0].leading_lines)


def own_indent(ctx, stmt: cst.BaseStatement) -> str | None:
    """The indentation step of the block holding ``stmt``, for a block nested in it (None:
    the module's default, as LibCST reads it from the file's first indented block). A file
    whose class bodies step 8 spaces and function bodies 4 gets 4 under a function's code."""
    parent = ctx.parent(stmt)
    return parent.indent if isinstance(parent, cst.IndentedBlock) else None


def indented_deeper(stmt: cst.BaseStatement, step: str) -> cst.BaseStatement:
    """``stmt`` ready to move into a block one level (``step``) deeper: its blank lines stay
    blank (LibCST writes a blank line of the module's top level with the indentation of the
    block it is in, so a moved statement would otherwise get whitespace-only lines), and the
    lines a backslash continues move with it (LibCST keeps them as written: ``x = a \\`` /
    ``else b`` would end up left of its statement)."""
    class Deeper(cst.CSTTransformer):  # defined here: report mode never loads LibCST
        def leave_EmptyLine(self, original_node, updated_node):
            if updated_node.indent and updated_node.comment is None and not updated_node.whitespace.value:
                return updated_node.with_changes(indent=False)
            return updated_node

        def leave_SimpleWhitespace(self, original_node, updated_node):
            if "\\" not in updated_node.value:
                return updated_node
            return updated_node.with_changes(value=_CONTINUED.sub(lambda m: m.group(0) + step, updated_node.value))

    return stmt.visit(Deeper())


_CONTINUED = re.compile(r"\\\r?\n")  # a backslash ending a line


def body_without_docstring(func) -> list[ast.stmt]:
    body = list(func.body)
    first = body[0] if body else None
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        body = body[1:]
    return body


def innermost_loop(facts: FileFacts, func, stmts: Sequence[ast.stmt]) -> ast.stmt | None:
    """The innermost ``for``/``while`` loop of ``func`` whose body holds all of ``stmts``
    (not one of ``stmts`` itself), or None."""
    node = facts.parents.get(stmts[0])
    while node is not None and node is not func and not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
        if isinstance(node, (ast.For, ast.While)) and not node.orelse:
            if all(any(is_within(facts, s, b) for b in node.body) for s in stmts):
                return node
        node = facts.parents.get(node)
    return None


def around_run(func, run: Sequence[ast.stmt]) -> tuple[list[ast.stmt], list[ast.stmt]] | None:
    """The statements of ``func``'s body (docstring aside) before and after ``run``, when
    ``run`` is a piece of that body; else None. A rule that would wrap ``run`` decorates the
    function instead when nothing that matters is left outside."""
    if not isinstance(func, ast.FunctionDef) or not run:
        return None
    body = body_without_docstring(func)
    index = next((i for i, s in enumerate(body) if s is run[0]), None)
    if index is None or body[index : index + len(run)] != list(run):
        return None
    return body[:index], body[index + len(run) :]


def decorate_with_no_grad(ctx, first_body_span: Span, transform=None) -> list:
    """Edits that put ``@torch.no_grad()`` on the function whose body starts at
    ``first_body_span`` (closest to the ``def``, under ``@staticmethod`` and friends);
    ``transform`` may rewrite each body statement."""
    from gradfix.fixer import Edit, FixError

    stmt = ctx.node_at(first_body_span, cst.BaseStatement)
    block = ctx.parent(stmt)
    func = ctx.parent(block) if isinstance(block, cst.IndentedBlock) else None
    if not isinstance(func, cst.FunctionDef):
        raise FixError("the function changed")
    decorator = cst.Decorator(decorator=ctx.expr(f"{ctx.grad_api('no_grad')}()"))
    body = block.with_changes(body=[transform(s) if transform else s for s in block.body])
    return [Edit(func, func.with_changes(decorators=[*func.decorators, decorator], body=body))]


def smallest_run(facts: FileFacts, func, nodes: Sequence[ast.AST]) -> list[ast.stmt] | None:
    """The fewest consecutive statements of one block (owned by ``func``) that hold ``nodes``.

    Nodes in different blocks (an ``if`` and its ``else``) give the statement enclosing both.
    """
    paths = []
    for node in nodes:
        path = []
        current = node
        while current is not None and current is not func:
            if isinstance(current, ast.stmt):
                block = statement_block(facts, current)
                if block is None:
                    return None
                body = getattr(*block)
                path.append((block, next(i for i, s in enumerate(body) if s is current)))
            current = facts.parents.get(current)
        paths.append(list(reversed(path)))
    if not paths or not all(paths):
        return None
    level = 0
    while all(len(p) > level for p in paths) and len({(id(p[level][0][0]), p[level][0][1], p[level][1]) for p in paths}) == 1:
        level += 1
    if all(len(p) > level for p in paths) and len({(id(p[level][0][0]), p[level][0][1]) for p in paths}) == 1:
        block = paths[0][level][0]
        indexes = [p[level][1] for p in paths]
        return getattr(*block)[min(indexes) : max(indexes) + 1]
    if level == 0:
        return None
    block, index = paths[0][level - 1]
    return [getattr(*block)[index]]


def comment_lines(stmt: cst.SimpleStatementLine, indent: str | None = None) -> list[cst.EmptyLine]:
    """``stmt``'s leading lines and trailing comment as own lines (at ``indent`` if given)."""
    lines = list(stmt.leading_lines)
    comment = stmt.trailing_whitespace.comment
    if comment is not None:
        lines.append(cst.EmptyLine(comment=comment))
    if indent is None:
        return lines
    out = []
    for line in lines:
        if line.indent and line.comment is not None:
            line = line.with_changes(indent=False, whitespace=cst.SimpleWhitespace(indent + line.whitespace.value))
        out.append(line)
    return out
