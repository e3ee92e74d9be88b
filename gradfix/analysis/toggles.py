"""Bare grad-mode toggles: ``torch.set_grad_enabled(x)`` called as a statement.

What a toggle is (:func:`bare_toggle`), a function's own toggles (:func:`own_toggles`), the names that save the mode to restore it by hand
(:func:`saved_mode_names`), and the toggle hack: ``set_grad_enabled(True)`` …
``set_grad_enabled(False)`` inside a grad-disabled ``with`` (article §3.2), which GF202
rewrites and GF201 leaves to it.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from gradfix.analysis.regions import grad_with_regions
from gradfix.facts import dotted_name, literal_bool

SET_GRAD_ENABLED = "torch.set_grad_enabled"


@dataclass
class Toggle:
    """A bare ``torch.set_grad_enabled(<arg>)`` statement."""

    stmt: ast.Expr
    call: ast.Call
    mode: bool | None  # the literal argument, None when it is not a literal
    restore: bool = False  # a literal True that ends the toggle before it (a pair's closer)

    @property
    def arg(self) -> ast.expr:
        return self.call.args[0] if self.call.args else self.call.keywords[0].value


def bare_toggle(facts, call: ast.Call) -> Toggle | None:
    """``call`` as a toggle when it is ``torch.set_grad_enabled(x)`` (one argument, positional
    or ``mode=``) standing alone as a statement; not a with-item, decorator or assignment."""
    stmt = facts.parents.get(call)
    if not isinstance(stmt, ast.Expr) or stmt.value is not call:
        return None
    if facts.call_qualname(call) != SET_GRAD_ENABLED or len(call.args) + len(call.keywords) != 1:
        return None
    if call.args:
        arg = call.args[0]
        if isinstance(arg, ast.Starred):
            return None
    elif call.keywords[0].arg == "mode":
        arg = call.keywords[0].value
    else:
        return None
    return Toggle(stmt, call, literal_bool(arg))


def toggles_grad_globally(facts) -> bool:
    """A bare ``torch.set_grad_enabled(...)`` statement anywhere in the file: the grad mode at
    a call is then a run-time matter (GF201's business), so a rule that would add a grad-mode
    region stays out."""
    return facts.memo(("toggles.global", ), lambda: any(
        isinstance(facts.parents.get(call), ast.Expr)
        and facts.call_qualname(call) in (SET_GRAD_ENABLED, "torch._C._set_grad_enabled")
        for call in facts.calls
    ))


def own_toggles(facts, func) -> list[Toggle]:
    """``func``'s own bare toggles (not those of functions nested in it), in source order."""
    out = []
    for stmt in facts.statements(func):
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            toggle = bare_toggle(facts, stmt.value)
            if toggle is not None:
                out.append(toggle)
    return sorted(out, key=lambda t: (t.stmt.lineno, t.stmt.col_offset))


def saved_mode_names(facts) -> set[str]:
    """Names (``prev``, ``self.prev``) assigned from ``torch.is_grad_enabled()`` in the file: a
    toggle to one of them restores a mode saved by hand."""

    def compute() -> set[str]:
        names: set[str] = set()
        for call in facts.calls:
            stmt = facts.parents.get(call)
            if isinstance(stmt, ast.Assign) and stmt.value is call and facts.call_qualname(call) == "torch.is_grad_enabled":
                names.update(n for n in (dotted_name(t) for t in stmt.targets) if n is not None)
        return names

    return facts.memo(("toggles.saved_mode_names",), compute)


@dataclass
class TogglePair:
    """``torch.set_grad_enabled(True)`` … ``torch.set_grad_enabled(False)`` in a disabled ``with``."""

    with_node: ast.With
    block: list[ast.stmt]  # the statement list holding both toggles
    start: int  # index of the enabling toggle in block
    end: int  # index of the disabling toggle

    @property
    def moved(self) -> list[ast.stmt]:
        return self.block[self.start + 1 : self.end]


def _toggle_value(facts, stmt: ast.stmt):
    """True/False for a bare ``torch.set_grad_enabled(<literal>)`` statement, else None."""
    toggle = bare_toggle(facts, stmt.value) if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) else None
    return toggle.mode if toggle is not None else None


def _toggle_calls(facts, stmts: list[ast.stmt], region_exprs: set[int]) -> set[int]:
    """ids of every grad-mode toggle call in ``stmts`` that is not a with-item or decorator."""
    found = set()
    for stmt in stmts:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Call) and id(node) not in region_exprs:
                if facts.call_qualname(node) == SET_GRAD_ENABLED or (
                    isinstance(node.func, ast.Attribute) and node.func.attr == "_set_grad_enabled"
                ):
                    found.add(id(node))
    return found


def _disabled_with(facts, node: ast.AST) -> bool:
    if not isinstance(node, ast.With):
        return False
    regions = grad_with_regions(facts, node)
    return bool(regions) and regions[-1].called and regions[-1].api is not None and regions[-1].mode == "disabled"


def _blocks(body: list[ast.stmt]):
    """``body`` and the bodies of the ``for``/``while``/``if`` statements in it, recursively.

    Not through ``try`` or another ``with``: an exception they catch would keep running the
    block with the toggled mode, where the rewrite would not.
    """
    yield body
    for stmt in body:
        if isinstance(stmt, (ast.For, ast.While, ast.If)):
            yield from _blocks(stmt.body)
            yield from _blocks(stmt.orelse)


def _escapes(stmts: list[ast.stmt]) -> bool:
    """Whether a ``break``/``continue`` in ``stmts`` leaves them (skipping a closing toggle)."""
    return any(_escaping(stmt, False) for stmt in stmts)


def _escaping(node: ast.AST, in_loop: bool) -> bool:
    # Module level: a nested function calling itself would be a reference cycle per call.
    if isinstance(node, (ast.Break, ast.Continue)):
        return not in_loop
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
        return False
    for field_name, value in ast.iter_fields(node):
        loop_body = isinstance(node, (ast.For, ast.While, ast.AsyncFor)) and field_name == "body"
        for child in value if isinstance(value, list) else [value]:
            if isinstance(child, ast.AST) and _escaping(child, in_loop or loop_body):
                return True
    return False


def toggle_pairs(facts) -> list[TogglePair]:
    """Every toggle pair of the hack (GF202's; GF201 leaves them to it while it is enabled).

    In a grad-disabled ``with``: a bare ``torch.set_grad_enabled(True)`` and the next bare
    ``torch.set_grad_enabled(False)`` in the same statement list (the with's body or a
    ``for``/``while``/``if`` body inside it). A ``with`` is claimed only when every toggle in
    it belongs to such a pair: after any other toggle (a lone ``True``, a computed mode, a
    toggle in a ``try``) the mode at an enabling toggle is not known to be off. A nested pair
    must not ``break``/``continue`` past its closing toggle.
    """
    return facts.memo(("toggles.toggle_pairs",), lambda: _toggle_pairs(facts))


def _toggle_pairs(facts) -> list[TogglePair]:
    region_exprs = {id(r.expr) for r in facts.regions}
    pairs = []
    for node in facts.withs:
        if not _disabled_with(facts, node):
            continue
        toggles = _toggle_calls(facts, node.body, region_exprs)
        if not toggles:
            continue
        found, claimed, ok = [], set(), True
        for block in _blocks(node.body):
            start = None
            for index, stmt in enumerate(block):
                value = _toggle_value(facts, stmt)
                if value is True and start is None:
                    start = index
                elif value is False and start is not None:
                    pair = TogglePair(node, block, start, index)
                    if block is not node.body and _escapes(pair.moved):
                        ok = False
                    found.append(pair)
                    claimed |= {id(block[start].value), id(stmt.value)}
                    start = None
        if ok and found and claimed == toggles:
            pairs.extend(found)
    return pairs


def hack_statements(facts, toggles: list[tuple[ast.stmt, bool | None]]) -> set[ast.stmt]:
    """The bare toggles (``(statement, literal mode)``) that belong to the hack.

    Generous on purpose (a superset of :func:`toggle_pairs`): every bare toggle in a
    grad-disabled region that holds a literal ``True`` toggle followed by a literal ``False``
    one, so that a rule leaving the hack to GF202 never half-handles such a region.
    """
    in_region: dict[int, list[tuple[ast.stmt, bool | None]]] = {}
    for stmt, mode in toggles:
        regions = facts.regions_around(stmt)
        if regions and regions[0].disables:
            in_region.setdefault(id(regions[0]), []).append((stmt, mode))
    found: set[ast.stmt] = set()
    for pair in toggle_pairs(facts):
        found.update((pair.block[pair.start], pair.block[pair.end]))
    for members in in_region.values():
        members.sort(key=lambda m: (m[0].lineno, m[0].col_offset))
        seen_true = False
        for _, mode in members:
            if mode is True:
                seen_true = True
            elif mode is False and seen_true:
                found.update(stmt for stmt, _ in members)
                break
    return found
