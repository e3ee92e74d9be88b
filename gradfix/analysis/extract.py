"""Moving statements into a helper function: what they read and bind, whether they can move,
where the helper can live and what it is called (GF202's `function` style).

The analysis is by name within the enclosing function: a name the statements read that the
function assigned before becomes a parameter, a name they assign that is read anywhere else
in the function becomes a return value (definite assignment decides whether the helper can
assign it on every path).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from gradfix.analysis.statements import torch_reachable
from gradfix.facts import bound_names, parameter_names

HELPER_NAME = "_with_grad"
# Calls that inspect or depend on the calling frame: moving them into a helper changes them.
_FRAME_CALLS = frozenset({"locals", "vars", "eval", "exec", "super", "dir", "globals", "breakpoint"})
_LOOPS = (ast.For, ast.While, ast.AsyncFor)
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp)


# -- names read and bound by the moved statements ------------------------------------------------
class _Scan:
    """Names loaded and bound by some code, in source order; comprehension variables excluded."""

    def __init__(self):
        self.loads: list[tuple[str, int]] = []
        self.binds: list[tuple[str, int]] = []

    def visit(self, node: ast.AST, shadowed: frozenset[str] = frozenset()) -> None:
        if isinstance(node, _COMPREHENSIONS + (ast.GeneratorExp,)):
            inner = set(shadowed)
            for gen in node.generators:
                inner.update(bound_names(gen.target))
            for n, gen in enumerate(node.generators):
                self.visit(gen.iter, shadowed if n == 0 else frozenset(inner))
                for cond in gen.ifs:
                    self.visit(cond, frozenset(inner))
            for part in ("elt", "key", "value"):
                if getattr(node, part, None) is not None:
                    self.visit(getattr(node, part), frozenset(inner))
            return
        if isinstance(node, ast.Name):
            if node.id not in shadowed:
                (self.loads if isinstance(node.ctx, ast.Load) else self.binds).append((node.id, node.lineno))
            return
        if isinstance(node, ast.NamedExpr):
            self.binds.extend((n, node.lineno) for n in bound_names(node.target))
            self.visit(node.value, shadowed)
            return
        if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
            self.loads.append((node.target.id, node.lineno))
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                name = alias.asname or alias.name.split(".")[0]
                if name != "*":
                    self.binds.append((name, node.lineno))
        elif isinstance(node, ast.ExceptHandler) and node.name:
            self.binds.append((node.name, node.lineno))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            self.binds.append((node.name, node.lineno))
            for dec in node.decorator_list:
                self.visit(dec, shadowed)
            return  # the body is another scope
        elif isinstance(node, ast.Lambda):
            return
        for child in ast.iter_child_nodes(node):
            self.visit(child, shadowed)


def _scan(nodes) -> _Scan:
    scan = _Scan()
    for node in nodes:
        scan.visit(node)
    return scan


class _Flow:
    """Which names the statements may read before they surely assign them."""

    def __init__(self):
        self.free: list[str] = []

    def read(self, node: ast.AST | None, bound: set[str]) -> None:
        if node is None:
            return
        for name, _ in _scan([node]).loads:
            if name not in bound and name not in self.free:
                self.free.append(name)

    def block(self, stmts: list[ast.stmt], bound: set[str]) -> set[str]:
        bound = set(bound)
        for s in stmts:
            if isinstance(s, ast.If):
                self.read(s.test, bound)
                bound |= self.block(s.body, bound) & self.block(s.orelse, bound)
            elif isinstance(s, (ast.For, ast.AsyncFor)):
                self.read(s.iter, bound)
                self.block(s.body, bound | set(bound_names(s.target)))
                self.block(s.orelse, bound)
            elif isinstance(s, ast.While):
                self.read(s.test, bound)
                self.block(s.body, bound)
                self.block(s.orelse, bound)
            elif isinstance(s, (ast.With, ast.AsyncWith)):
                for item in s.items:
                    self.read(item.context_expr, bound)
                    if item.optional_vars is not None:
                        self.read(item.optional_vars, bound)
                        bound |= set(bound_names(item.optional_vars))
                bound = self.block(s.body, bound)
            elif isinstance(s, (ast.Try, getattr(ast, "TryStar", ast.Try))):
                after_body = self.block(s.body, bound)
                for handler in s.handlers:
                    self.read(handler.type, bound)
                    self.block(handler.body, bound | ({handler.name} if handler.name else set()))
                self.block(s.orelse, after_body)
                bound = self.block(s.finalbody, bound)
            else:
                self.read(s, bound)
                bound |= _definite_binds(s)
        return bound


def _definite_binds(stmt: ast.stmt) -> set[str]:
    if isinstance(stmt, ast.Assign):
        return {n for t in stmt.targets for n in bound_names(t)}
    if isinstance(stmt, (ast.AugAssign, ast.AnnAssign)) and isinstance(stmt.target, ast.Name):
        return {stmt.target.id} if not isinstance(stmt, ast.AnnAssign) or stmt.value is not None else set()
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        return {alias.asname or alias.name.split(".")[0] for alias in stmt.names}
    return set()


def unsafe_to_extract(stmts: list[ast.stmt]) -> str | None:
    """Why moving ``stmts`` into a function would change them, or None."""
    for stmt in stmts:
        why = _unsafe_reason(stmt, False)
        if why:
            return why
    return None


def _unsafe_reason(node: ast.AST, in_loop: bool) -> str | None:
    # Module level: a nested function calling itself would be a reference cycle per call.
    if isinstance(node, ast.Return):
        return "they `return`"
    if isinstance(node, (ast.Yield, ast.YieldFrom)):
        return "they `yield`"
    if isinstance(node, (ast.Await, ast.AsyncFor, ast.AsyncWith)) or (
        isinstance(node, ast.comprehension) and node.is_async
    ):
        return "they `await`"
    if isinstance(node, (ast.Break, ast.Continue)) and not in_loop:
        return f"they `{'break' if isinstance(node, ast.Break) else 'continue'}` an outer loop"
    if isinstance(node, (ast.Global, ast.Nonlocal)):
        return "they declare `global`/`nonlocal` names"
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, ast.GeneratorExp)):
        return "they define a function, class or generator that could capture the helper's variables"
    if isinstance(node, ast.Delete) and any(bound_names(t) for t in node.targets):
        return "they `del` a variable"
    if isinstance(node, ast.Match):
        return "they use `match`"
    if isinstance(node, ast.Name) and node.id == "__class__":
        return "they read `__class__`"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FRAME_CALLS:
        return f"they call `{node.func.id}()`, which depends on the calling frame"
    for field_name, value in ast.iter_fields(node):
        children = value if isinstance(value, list) else [value]
        loop_body = isinstance(node, _LOOPS) and field_name == "body"
        for child in children:
            if isinstance(child, ast.AST):
                why = _unsafe_reason(child, in_loop or loop_body)
                if why:
                    return why
    return None


@dataclass
class Extraction:
    params: tuple[str, ...] = ()
    returns: tuple[str, ...] = ()
    reason: str = ""  # why function style is not possible (empty when it is)


def plan_extraction(facts, anchor: ast.stmt, moved: list[ast.stmt], first_line: int, last_line: int) -> Extraction:
    """The helper's parameters and return values for ``moved`` (the statements strictly
    between lines ``first_line`` and ``last_line``, inside ``anchor``), or why there is none."""
    func = facts.enclosing_function(anchor)
    if func is None or isinstance(func, ast.Lambda):
        return Extraction(reason="at module level every name it binds is a global that any code may read")
    parent = facts.parents.get(anchor)
    while parent is not None and parent is not func:
        if isinstance(parent, ast.ClassDef):
            return Extraction(reason="the block is in a class body")
        parent = facts.parents.get(parent)
    why = unsafe_to_extract(moved)
    if why:
        return Extraction(reason=why)

    def inside(line: int) -> bool:
        return first_line < line < last_line

    # Names the enclosing function binds, with the lines that bind them.
    func_scan = _scan(func.body)
    bound_at: dict[str, list[int]] = {}
    for name, line in func_scan.binds:
        bound_at.setdefault(name, []).append(line)
    params_of_func = parameter_names(func)
    declared = facts.scope_of_node[func].globals

    def bound_before(name: str) -> bool:
        return name in params_of_func or any(line < first_line for line in bound_at.get(name, ()))

    flow = _Flow()
    surely_bound = flow.block(moved, set())
    moved_binds = list(dict.fromkeys(n for n, _ in _scan(moved).binds))
    if set(moved_binds) & declared:
        return Extraction(reason="they assign a name the function declares `global`/`nonlocal`")
    params = []
    for name in flow.free:
        if name in params_of_func or name in bound_at:
            if not bound_before(name):
                return Extraction(reason=f"they may read `{name}` before it is assigned")
            params.append(name)
    # Every later read counts, in the whole function (loops run earlier code again, nested
    # functions read the variable when they are called).
    used_outside = {
        n.id
        for n in ast.walk(func)
        if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Store) and not inside(n.lineno)
    }
    returns = []
    for name in moved_binds:
        if name not in used_outside:
            continue
        if name not in surely_bound:
            if not bound_before(name):
                return Extraction(reason=f"they assign `{name}` only on some paths")
            if name not in params:
                params.append(name)
        returns.append(name)
    return Extraction(tuple(params), tuple(returns))


def helper_placement(facts, anchor: ast.stmt, moved: list[ast.stmt], extraction: Extraction) -> str:
    """``module`` when the helper needs nothing from the enclosing function but what it is
    passed (its other names are globals or builtins), else ``before`` (the ``with``)."""
    func = facts.enclosing_function(anchor)
    scan = _scan(moved)
    free = {n for n, _ in scan.loads} - set(extraction.params) - {n for n, _ in scan.binds}
    outer = [facts.scope_of_node[f] for f in facts.enclosing_functions(func)]
    if any(name in s.locals or name in s.imports for s in outer for name in free):
        return "before"  # a closure variable of an outer function
    in_class = any(isinstance(n, ast.ClassDef) for n in _ancestors(facts, func))
    mangled = {n for n, _ in scan.loads + scan.binds} | {
        a.attr for s in moved for a in ast.walk(s) if isinstance(a, ast.Attribute)
    }
    if in_class and any(n.startswith("__") and not n.endswith("__") for n in mangled):
        return "before"  # private names are mangled by the class they are written in
    top = anchor
    while facts.parents.get(top) is not facts.tree:
        top = facts.parents[top]
    return "module" if torch_reachable(facts, top) else "before"


def _ancestors(facts, node: ast.AST):
    node = facts.parents.get(node)
    while node is not None:
        yield node
        node = facts.parents.get(node)


def helper_name(moved: list[ast.stmt], returns: tuple[str, ...], taken: set[str]) -> str:
    """``_<what it computes>_with_grad``: the last name it returns, else the last call it makes
    (``_backward_with_grad``); a number is added when the name is taken."""
    base = returns[-1].strip("_") if returns else ""
    if not base:
        calls = [n for n in ast.walk(moved[-1]) if isinstance(n, ast.Call)]
        callee = calls[0].func if calls else None
        base = callee.attr if isinstance(callee, ast.Attribute) else getattr(callee, "id", "")
        base = base.strip("_")
    name = f"_{base}{HELPER_NAME}" if base else HELPER_NAME
    candidate, n = name, 1
    while candidate in taken:
        n += 1
        candidate = f"{name}_{n}"
    return candidate


def identifiers(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.alias):
            names.add(node.asname or node.name.split(".")[0])
    return names
