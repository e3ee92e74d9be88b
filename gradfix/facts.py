"""One cheap pass over the stdlib ``ast`` that records what the rules ask about.

Rules never re-walk the tree for the common questions: which names mean torch's APIs
(imports, aliases, shadowing), where the grad regions are, which function a node belongs to,
which methods are called on which receivers, and how names flow into other names.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Callable, Hashable, Iterable, Iterator

from gradfix.model import Span

FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
SCOPE_TYPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)

# Every spelling of an API maps to one canonical name; rules only compare canonical names.
_CANONICAL_SUFFIXES = {
    "no_grad": "torch.no_grad",
    "enable_grad": "torch.enable_grad",
    "set_grad_enabled": "torch.set_grad_enabled",
    "inference_mode": "torch.inference_mode",
}
_API_MODULES = ("torch.", "torch.autograd.", "torch.autograd.grad_mode.")
_ALIASES = {
    "torch.autograd.variable.Variable": "torch.autograd.Variable",
    "torch.autograd.Variable": "torch.autograd.Variable",
    "torch.serialization.save": "torch.save",
    "torch.autograd.grad": "torch.autograd.grad",
    "torch.autograd.backward": "torch.autograd.backward",
}
GRAD_CONTEXT_APIS = frozenset(_CANONICAL_SUFFIXES.values())


def canonical(qualname: str) -> str:
    """Map an import path of a torch API to the one name rules compare against."""
    if qualname in _ALIASES:
        return _ALIASES[qualname]
    prefix, _, last = qualname.rpartition(".")
    if last in _CANONICAL_SUFFIXES and prefix + "." in _API_MODULES:
        return _CANONICAL_SUFFIXES[last]
    return qualname


def dotted_name(expr: ast.AST) -> str | None:
    """``self.model.encoder`` for a chain of attributes on a name, else None."""
    parts: list[str] = []
    while isinstance(expr, ast.Attribute):
        parts.append(expr.attr)
        expr = expr.value
    if not isinstance(expr, ast.Name):
        return None
    parts.append(expr.id)
    return ".".join(reversed(parts))


def literal_bool(expr: ast.AST | None) -> bool | None:
    if isinstance(expr, ast.Constant) and isinstance(expr.value, bool):
        return expr.value
    return None


@dataclass
class GradRegion:
    """A ``with`` item or decorator that sets the grad mode for a body of statements.

    ``mode`` is ``disabled``, ``enabled`` or ``conditional`` (the mode depends on a value
    known only at run time, or the context manager is picked by an ``if`` expression).
    ``called`` is False for ``with torch.no_grad:`` (a bug: GF101).
    """

    owner: ast.With | ast.AsyncWith | ast.FunctionDef | ast.AsyncFunctionDef
    expr: ast.expr  # the with-item's context expression or the decorator
    api: str | None  # canonical API name (None for a conditional pick)
    mode: str
    called: bool

    @property
    def kind(self) -> str:
        return "with" if isinstance(self.owner, (ast.With, ast.AsyncWith)) else "decorator"

    @property
    def body(self) -> list[ast.stmt]:
        return self.owner.body

    @property
    def disables(self) -> bool:
        return self.mode == "disabled"


@dataclass
class MethodCall:
    """``receiver.method(...)`` with the receiver's dotted name (None if not a name chain)."""

    call: ast.Call
    method: str
    receiver: str | None


@dataclass
class Scope:
    node: ast.AST  # Module or a function
    imports: dict[str, str] = field(default_factory=dict)  # local name -> qualified target
    locals: set[str] = field(default_factory=set)  # other bindings (params, assignments...)
    globals: set[str] = field(default_factory=set)
    stores: list[ast.Name] = field(default_factory=list)  # its own code's `name = `, `del name`...


class FileFacts:
    """Facts about one parsed file. Build with :func:`build_facts`."""

    def __init__(self, source: str, tree: ast.Module, path: str = "<string>", project: Any = None):
        self.source = source
        self.path = path
        self.tree = tree
        # Python's own line breaks only: str.splitlines() also splits at \f, \x1c, \u2028...,
        # which would shift every later line against the ast's line numbers.
        self.lines = source.replace("\r\n", "\n").replace("\r", "\n").split("\n")
        self.parents: dict[ast.AST, ast.AST] = {}
        self._qualnames: dict[ast.AST, str | None] = {}
        self.scope_of_node: dict[ast.AST, Scope] = {}  # function/module node -> its scope
        self.function_of: dict[ast.AST, FunctionNode | None] = {}  # stmt/expr -> function
        self.calls: list[ast.Call] = []
        self.withs: list[ast.With | ast.AsyncWith] = []
        self.functions: list[ast.FunctionDef | ast.AsyncFunctionDef] = []
        self._by_kind: dict[type, list[ast.AST]] = {kind: [] for kind in _INDEXED}
        self.declared_global: set[str] = set()  # names some `global` statement of the file declares
        #: The :class:`~gradfix.analysis.project.ProjectIndex` of the run, or None (one file).
        self.project = project
        self._memo: dict[Any, Any] = {}
        self._statements: dict[FunctionNode | None, list[ast.stmt]] = {}
        self._collect()

    # -- derived analyses, computed once per file ----------------------------------------
    def memo(self, key: Hashable, compute: Callable[[], Any]) -> Any:
        """``compute()``, computed once per file under ``key`` (a tuple naming the analysis).

        The analysis layer (gradfix/analysis/) caches what it derives here, so that every rule
        asking the same question shares one answer and nobody writes into ``__dict__``.
        """
        try:
            return self._memo[key]
        except KeyError:
            value = self._memo[key] = compute()
            return value

    def release(self) -> None:
        """Forget what the analyses derived, once every rule has run. Some of it refers back
        to these facts (a gradflow ``Flow`` holds them), and that cycle would keep the file's
        whole tree alive until the cyclic collector finds it: tens of thousands of objects
        traversed per file instead of freed by reference counting."""
        self._memo.clear()

    # -- the one walk -------------------------------------------------------------------
    def _collect(self) -> None:
        # The hot loop of report mode, run once per node of the file: one dict lookup tells a
        # node's kind (most kinds need nothing but their children) and its child fields (no
        # expression contexts, operators or plain values), instead of ast.iter_child_nodes and
        # a chain of type tests. The stack holds nodes only; a function body is bracketed by two
        # (scope, function) entries that switch the current scope when popped, so every node
        # is visited, and every list filled, in the same depth-first order as a stack of
        # (node, scope, function) would.
        module_scope = Scope(self.tree)
        self.scope_of_node[self.tree] = module_scope
        scope: Scope = module_scope
        func: FunctionNode | None = None
        stack: list = [self.tree]
        parents = self.parents
        function_of = self.function_of
        scope_of_node = self.scope_of_node
        calls, withs, functions, by_kind = self.calls, self.withs, self.functions, self._by_kind
        push, pop = stack.append, stack.pop
        AST, Name, Load, Lambda, ClassDef, ScopeSwitch = ast.AST, ast.Name, ast.Load, ast.Lambda, ast.ClassDef, tuple
        kinds = _WALK
        while stack:
            node = pop()
            kind = type(node)
            if kind is Name:  # the commonest node: a leaf, maybe a binding
                function_of[node] = func
                if type(node.ctx) is not Load:
                    scope.locals.add(node.id)
                    scope.stores.append(node)
                continue
            if kind is ScopeSwitch:
                scope, func = node
                continue
            function_of[node] = func
            walk = kinds.get(kind)
            if walk is None:
                walk = _walk_info(kind)
            tag, fields = walk
            if tag:
                if tag == _CALL:
                    calls.append(node)
                elif tag == _LEAF:
                    continue
                elif tag == _INDEX:
                    by_kind[kind].append(node)
                elif tag == _SCOPE:
                    if kind is not Lambda:
                        scope.locals.add(node.name)
                        functions.append(node)
                    inner_scope = Scope(node)
                    scope_of_node[node] = inner_scope
                    args = node.args
                    inner_locals = inner_scope.locals
                    for a in (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg):
                        if a is not None:
                            inner_locals.add(a.arg)
                    # Decorators, defaults and annotations run in the enclosing scope; the body
                    # (a lambda's expression) in the function's own.
                    body = node.body
                    for name in fields:
                        value = getattr(node, name, None)
                        if value is body:
                            push((scope, func))  # popped after the body: back to this scope
                            if type(value) is list:
                                for item in value:
                                    parents[item] = node
                                    push(item)
                            else:
                                parents[value] = node
                                push(value)
                            push((inner_scope, node))  # popped before the body
                        elif type(value) is list:
                            for item in value:
                                if isinstance(item, AST):
                                    parents[item] = node
                                    push(item)
                        elif isinstance(value, AST):
                            parents[value] = node
                            push(value)
                    continue
                elif tag == _WITH:
                    withs.append(node)
                elif tag == _IMPORT:
                    for alias in node.names:
                        if alias.asname:
                            scope.imports[alias.asname] = alias.name
                        else:
                            top = alias.name.split(".")[0]
                            scope.imports[top] = top
                elif tag == _IMPORT_FROM:
                    by_kind[kind].append(node)
                    if node.module and not node.level:
                        for alias in node.names:
                            if alias.name != "*":
                                scope.imports[alias.asname or alias.name] = f"{node.module}.{alias.name}"
                    elif node.level:  # `from . import x`: bound, to something of the project
                        scope.locals.update(a.asname or a.name for a in node.names if a.name != "*")
                elif tag == _NAMED:  # a class, or an except clause's name
                    if kind is ClassDef:
                        by_kind[kind].append(node)
                    if node.name:
                        scope.locals.add(node.name)
                elif tag == _GLOBAL:
                    scope.globals.update(node.names)
                    if kind is ast.Global:
                        self.declared_global.update(node.names)
            for name in fields:
                value = getattr(node, name, None)
                if type(value) is list:
                    for item in value:
                        if isinstance(item, AST):
                            parents[item] = node
                            push(item)
                elif isinstance(value, AST):
                    parents[value] = node
                    push(value)

    # -- positions ------------------------------------------------------------------------
    def char_col(self, line: int, byte_col: int) -> int:
        text = self.lines[line - 1] if 0 < line <= len(self.lines) else ""
        if text.isascii():
            return byte_col
        return len(text.encode("utf-8")[:byte_col].decode("utf-8", errors="replace"))

    def span(self, node: ast.AST) -> Span:
        end_line = node.end_lineno or node.lineno
        return Span(
            node.lineno,
            self.char_col(node.lineno, node.col_offset),
            end_line,
            self.char_col(end_line, node.end_col_offset or 0),
        )

    def segment(self, node: ast.AST) -> str:
        """The source text of ``node`` (like ast.get_source_segment, without re-splitting the file)."""
        first, last = node.lineno - 1, (node.end_lineno or node.lineno) - 1
        if node.end_col_offset is None or not 0 <= first <= last < len(self.lines):
            return ""
        if first == last:
            return self.lines[first].encode()[node.col_offset : node.end_col_offset].decode(errors="replace")
        head = self.lines[first].encode()[node.col_offset :].decode(errors="replace")
        tail = self.lines[last].encode()[: node.end_col_offset].decode(errors="replace")
        return "\n".join([head, *self.lines[first + 1 : last], tail])

    # -- scopes and names -------------------------------------------------------------------
    def enclosing_function(self, node: ast.AST) -> FunctionNode | None:
        return self.function_of.get(node)

    def enclosing_functions(self, node: ast.AST) -> Iterator[FunctionNode]:
        func = self.function_of.get(node)
        while func is not None:
            yield func
            func = self.function_of.get(func)

    def _scopes_for(self, node: ast.AST) -> Iterator[Scope]:
        for func in self.enclosing_functions(node):
            yield self.scope_of_node[func]
        yield self.scope_of_node[self.tree]

    def resolve_name(self, name: str, at: ast.AST) -> str | None:
        """The qualified import target a bare name refers to at ``at``, or None.

        A parameter or local assignment in an enclosing function shadows module imports.
        """
        for scope in self._scopes_for(at):
            if scope.node is not self.tree and name in scope.globals:
                continue
            if name in scope.imports:
                return scope.imports[name]
            if name in scope.locals:
                return None
        if not self._star_imports:
            return None
        found = self._star_imported(name)
        if found is None and name == "torch" and any(t.startswith("torch.") for t in self.scope_of_node[self.tree].imports.values()):
            # `import torch.nn as nn` and `from utils import *`, `torch.from_numpy(..)` below:
            # no line of this torch file binds `torch`, so the star import does, as the torch
            # package (the fixer's added `import torch` takes it as that too)
            return "torch"
        return found

    @cached_property
    def _star_imports(self) -> list[ast.ImportFrom]:
        """The file's ``from M import *`` lines, last first (a later one rebinds the name)."""
        stars = [n for n in self._by_kind[ast.ImportFrom] if any(a.name == "*" for a in n.names)]
        return sorted(stars, key=lambda n: (n.lineno, n.col_offset), reverse=True)

    def _star_imported(self, name: str) -> str | None:
        """What the file's ``from M import *`` lines bind ``name`` to (the last one that binds
        it wins): for a module of the run's project, what it defines or imports (its
        ``__all__``); for a torch module, the APIs it exports. None when no star import is
        known to bind it."""
        cache = self._memo.setdefault(("facts.star_imported",), {})
        if name not in cache:
            from gradfix.analysis.project import absolute_module, torch_star_exports

            project = self.project
            here = project.module_of(self.path) if project is not None else None
            cache[name] = None
            for stmt in self._star_imports:
                if stmt.level and here is None:
                    continue  # a relative import with no project to resolve it in
                source = absolute_module(stmt, here or "", here is not None and project.is_package(here))
                exports = project.star_exports(source) if project is not None and source in project.modules else torch_star_exports(source)
                if name in exports:
                    cache[name] = exports[name]
                    break
        return cache[name]

    def qualname(self, expr: ast.AST) -> str | None:
        """Canonical qualified name of a name/attribute chain (``T.no_grad`` -> torch.no_grad)."""
        cache = self._qualnames  # rules ask about the same calls again and again
        if expr in cache:
            return cache[expr]
        result = None
        dotted = dotted_name(expr)
        if dotted is not None:
            head, _, rest = dotted.partition(".")
            target = self.resolve_name(head, expr)
            if target is not None:
                result = canonical(f"{target}.{rest}" if rest else target)
        cache[expr] = result
        return result

    def call_qualname(self, call: ast.AST) -> str | None:
        return self.qualname(call.func) if isinstance(call, ast.Call) else None

    def torch_module_names(self) -> set[str]:
        """Module-level names bound to the torch module itself (``import torch as T`` -> T)."""
        return {n for n, t in self.scope_of_node[self.tree].imports.items() if t == "torch"}

    def grad_api_alias(self, api: str) -> str | None:
        """The name a top-level ``from torch import no_grad [as ng]`` (or from ``torch.autograd``)
        binds to torch's ``api``: a fix then writes that name, as the file does, instead of
        ``torch.no_grad``. None when there is no such import."""

        def compute():
            for stmt in module_level(self.tree.body):
                if isinstance(stmt, ast.ImportFrom) and stmt.level == 0 and stmt.module in GRAD_API_MODULES:
                    for alias in stmt.names:
                        if alias.name == api:
                            return alias.asname or api
            return None

        return self.memo(("facts.grad_api_alias", api), compute)

    def module_alias(self, target: str) -> str | None:
        """The name a module-level import binds to the module ``target`` (``nn`` after ``from
        torch import nn`` or ``import torch.nn as nn`` for ``torch.nn``; ``init`` after ``from
        torch.nn import init``), or None."""

        def compute():
            parent, _, last = target.rpartition(".")
            for stmt in module_level(self.tree.body):
                if isinstance(stmt, ast.Import):
                    for alias in stmt.names:
                        if alias.name == target and alias.asname:
                            return alias.asname
                elif isinstance(stmt, ast.ImportFrom) and stmt.level == 0 and stmt.module == parent:
                    for alias in stmt.names:
                        if alias.name == last:
                            return alias.asname or last
            return None

        return self.memo(("facts.module_alias", target), compute)

    def torch_name_writable(self) -> bool:
        """Whether a fix may write ``torch.X`` here: the module imports torch as a module, or
        nothing at module level is named ``torch`` (so ``import torch`` can be added)."""
        if self.torch_module_names():
            return True
        module_scope = self.scope_of_node[self.tree]
        return "torch" not in module_scope.locals and "torch" not in module_scope.imports

    def imported_from(self, call: ast.Call, name: str) -> str | None:
        """``M`` when ``call`` calls a bare ``name`` bound by ``from M import name`` (no alias)."""
        if not isinstance(call.func, ast.Name) or call.func.id != name:
            return None
        target = self.resolve_name(name, call)
        if target is None or not target.endswith("." + name):
            return None
        return target.rpartition(".")[0]

    # -- grad regions ---------------------------------------------------------------------
    def grad_region_for(self, expr: ast.expr, owner) -> GradRegion | None:
        """Interpret a with-item's expression or a decorator as a grad region, if it is one."""
        if isinstance(expr, ast.IfExp):
            picks = [self.grad_region_for(e, owner) for e in (expr.body, expr.orelse)]
            if any(p is not None for p in picks):
                return GradRegion(owner, expr, None, "conditional", True)
            return None
        called = isinstance(expr, ast.Call)
        api = self.qualname(expr.func if called else expr)
        if api not in GRAD_CONTEXT_APIS:
            return None
        mode = "disabled"
        if api == "torch.enable_grad":
            mode = "enabled"
        elif api == "torch.set_grad_enabled":
            arg = _first_arg(expr, "mode") if called else None
            value = literal_bool(arg)
            mode = "conditional" if value is None else ("enabled" if value else "disabled")
        elif api == "torch.inference_mode" and called:
            arg = _first_arg(expr, "mode")
            if arg is not None and literal_bool(arg) is not True:
                mode = "conditional"
        return GradRegion(owner, expr, api, mode, called)

    @cached_property
    def regions(self) -> list[GradRegion]:
        found: list[GradRegion] = []
        for w in self.withs:
            for item in w.items:
                r = self.grad_region_for(item.context_expr, w)
                if r is not None:
                    found.append(r)
        for f in self.functions:
            for dec in f.decorator_list:
                r = self.grad_region_for(dec, f) or self._wrapper_region(dec, f)
                if r is not None:
                    found.append(r)
        found.sort(key=lambda r: (r.owner.lineno, r.owner.col_offset))
        return found

    def _wrapper_region(self, dec: ast.expr, func) -> GradRegion | None:
        """``@nograd`` where this file defines ``def nograd(f)`` returning a wrapper that runs
        ``f`` inside a grad-disabled ``with`` (simple-faster-rcnn's utils): a grad-disabled
        region around ``func``. ``api`` is None: the decorator is not a torch API to rewrite."""
        if not isinstance(dec, ast.Name) or self.resolve_name(dec.id, dec) is not None:
            return None
        maker = next((d for d in self.tree.body if isinstance(d, ast.FunctionDef) and d.name == dec.id), None)
        if maker is None or not maker.args.args:
            return None
        wrapped = maker.args.args[0].arg
        returned = {r.value.id for r in maker.body if isinstance(r, ast.Return) and isinstance(r.value, ast.Name)}
        for inner in maker.body:
            if not isinstance(inner, ast.FunctionDef) or inner.name not in returned:
                continue
            for stmt in inner.body:
                if not isinstance(stmt, ast.With):
                    continue
                modes = {getattr(self.grad_region_for(i.context_expr, stmt), "mode", None) for i in stmt.items}
                calls_wrapped = any(
                    isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == wrapped
                    for b in stmt.body
                    for n in ast.walk(b)
                )
                if "disabled" in modes and calls_wrapped:
                    return GradRegion(func, dec, None, "disabled", True)
        return None

    @cached_property
    def _regions_by_owner(self) -> dict[ast.AST, list[GradRegion]]:
        by_owner: dict[ast.AST, list[GradRegion]] = {}
        for r in self.regions:
            by_owner.setdefault(r.owner, []).append(r)
        return by_owner

    def regions_around(self, node: ast.AST) -> list[GradRegion]:
        """Grad regions whose body contains ``node``, innermost first.

        A decorator region counts only for nodes of that very function (a nested ``def``
        runs later, in whatever mode its caller has).
        """
        by_owner = self._regions_by_owner
        out: list[GradRegion] = []
        if not by_owner:
            return out  # no grad region in the file: no chain of parents to climb
        current = self.parents.get(node)
        child = node
        while current is not None:
            if current in by_owner:
                if isinstance(current, (ast.With, ast.AsyncWith)) and child in current.body:
                    out.extend(reversed(by_owner[current]))
                elif isinstance(current, (ast.FunctionDef, ast.AsyncFunctionDef)) and child in current.body:
                    out.extend(reversed(by_owner[current]))
            body = getattr(current, "body", ())
            if isinstance(current, SCOPE_TYPES) and (child in body if isinstance(body, list) else child is body):
                break  # the mode inside a function comes from its caller, not the definition site
            child, current = current, self.parents.get(current)
        return out

    def grad_mode_at(self, node: ast.AST) -> str | None:
        """``disabled``/``enabled``/``conditional`` from the innermost region, None outside any."""
        regions = self.regions_around(node)
        return regions[0].mode if regions else None

    # -- calls ---------------------------------------------------------------------------
    @cached_property
    def method_calls(self) -> list[MethodCall]:
        out = []
        for call in self.calls:
            if isinstance(call.func, ast.Attribute):
                out.append(MethodCall(call, call.func.attr, dotted_name(call.func.value)))
        return out

    @cached_property
    def _method_calls_by_scope(self) -> dict[tuple[FunctionNode | None, str], list[MethodCall]]:
        index: dict[tuple[FunctionNode | None, str], list[MethodCall]] = {}
        for m in self.method_calls:
            index.setdefault((self.function_of.get(m.call), m.method), []).append(m)
        return index

    def method_calls_in(self, func: FunctionNode | None, method: str) -> list[MethodCall]:
        """Calls of ``.method(...)`` whose nearest enclosing function is ``func`` (None: module)."""
        return list(self._method_calls_by_scope.get((func, method), ()))

    @cached_property
    def _calls_by_scope(self) -> dict[FunctionNode | None, list[ast.Call]]:
        index: dict[FunctionNode | None, list[ast.Call]] = {}
        for call in self.calls:
            index.setdefault(self.function_of.get(call), []).append(call)
        return index

    def calls_in(self, func: FunctionNode | None) -> list[ast.Call]:
        """Calls whose nearest enclosing function is ``func`` (None: module level)."""
        return list(self._calls_by_scope.get(func, ()))


    def nodes_of(self, kind: type) -> list[ast.AST]:
        """Every node of type ``kind`` in the file (``ast.Assign``, ``ast.Subscript``, ... : the
        kinds in ``_INDEXED``), in the order of ``function_of``. Do not modify the list."""
        return self._by_kind[kind]

    def assignments_to(self, name: str) -> list[ast.Assign | ast.AnnAssign]:
        """The assignments (with a value) whose target is the dotted name ``name``, or names it
        as an element of a tuple/list target (``model = ...``, ``self.net, opt = ...``): an
        index of the file's assignments by target, built once, so that a question about one
        name does not read every assignment of the file."""
        return self.memo(("facts.assignments_by_target",), self._assignments_by_target).get(name, [])

    def _assignments_by_target(self) -> dict[str, list[ast.Assign | ast.AnnAssign]]:
        index: dict[str, list] = {}
        for node in (*self._by_kind[ast.Assign], *self._by_kind[ast.AnnAssign]):
            if node.value is None:
                continue
            names = set()
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                elements = target.elts if isinstance(target, (ast.Tuple, ast.List)) else [target]
                names.update(n for n in map(dotted_name, elements) if n is not None)
            for name in names:
                index.setdefault(name, []).append(node)
        return index

    def statements(self, func: FunctionNode | None) -> Iterator[ast.stmt]:
        """Statements owned by ``func`` (not those of nested functions), in source order."""
        found = self._statements.get(func)
        if found is None:  # several rules walk each function's statements: list them once
            root = self.tree if func is None else func
            found = self._statements[func] = _own_statements(getattr(root, "body", []))
        return iter(found)


    # -- data flow by name (within a function) --------------------------------------------
    def name_dependencies(self, func: FunctionNode | None) -> dict[str, set[str]]:
        """For each name bound in ``func``: the names its assigned values read."""
        return self.memo(("name_dependencies", func), lambda: self._name_dependencies(func))

    def _name_dependencies(self, func: FunctionNode | None) -> dict[str, set[str]]:
        deps: dict[str, set[str]] = {}
        for stmt in self.statements(func):
            for targets, value in _bindings(stmt):
                reads = names_read(value) if value is not None else set()
                for t in targets:
                    deps.setdefault(t, set()).update(reads)
        return deps

    def flows_into(self, func: FunctionNode | None, sources: set[str], target: str) -> bool:
        """Whether any of ``sources`` reaches ``target`` through assignments in ``func``."""
        deps = self.name_dependencies(func)
        seen: set[str] = set()
        todo = [target]
        while todo:
            name = todo.pop()
            if name in sources:
                return True
            if name in seen:
                continue
            seen.add(name)
            todo.extend(deps.get(name, ()))
        return False

    def line_text(self, line: int) -> str:
        return self.lines[line - 1] if 0 < line <= len(self.lines) else ""


# Fields that never hold child nodes worth visiting (names, flags, expression contexts,
# operators: ``ast.Add()`` and its like are shared singletons, no node's own child).
_NOT_CHILDREN = frozenset(
    {"ctx", "id", "attr", "arg", "level", "module", "is_async", "kind", "conversion", "type_comment", "name", "op", "ops"}
)
# What the facts walk does at a node of each kind: nothing but visit its children (0), or record it.
_CALL, _LEAF, _SCOPE, _WITH, _IMPORT, _IMPORT_FROM, _NAMED, _GLOBAL, _INDEX = range(1, 10)
# Kinds whose nodes the walk also lists for :meth:`FileFacts.nodes_of` (rules and analyses
# would otherwise each scan every node of the file for them).
_INDEXED = (ast.Assign, ast.AnnAssign, ast.Subscript, ast.Compare, ast.ClassDef, ast.ImportFrom, ast.Yield, ast.YieldFrom)
_TAGS = {
    **{kind: _INDEX for kind in _INDEXED},
    ast.Call: _CALL,
    ast.Constant: _LEAF,
    ast.FunctionDef: _SCOPE,
    ast.AsyncFunctionDef: _SCOPE,
    ast.Lambda: _SCOPE,
    ast.With: _WITH,
    ast.AsyncWith: _WITH,
    ast.Import: _IMPORT,
    ast.ImportFrom: _IMPORT_FROM,
    ast.ClassDef: _NAMED,
    ast.ExceptHandler: _NAMED,
    ast.Global: _GLOBAL,
    ast.Nonlocal: _GLOBAL,
}
_WALK: dict[type, tuple[int, tuple[str, ...]]] = {}


def _walk_info(kind: type) -> tuple[int, tuple[str, ...]]:
    info = _WALK[kind] = (_TAGS.get(kind, 0), tuple(f for f in kind._fields if f not in _NOT_CHILDREN))
    return info


def descendants(root: ast.AST) -> list[ast.AST]:
    """``root`` and every node below it, as ``ast.walk`` finds them but in no particular order
    and without expression contexts and operators (``ast.Load()``, ``ast.Add()``), in a list:
    for questions any one node answers (``any(isinstance(n, ast.Yield) for n in ...)``)."""
    out: list[ast.AST] = []
    todo = [root]
    push, pop, append, AST, kinds = todo.append, todo.pop, out.append, ast.AST, _WALK
    while todo:
        node = pop()
        append(node)
        walk = kinds.get(type(node))
        if walk is None:
            walk = _walk_info(type(node))
        for name in walk[1]:
            value = getattr(node, name, None)
            if type(value) is list:
                for item in value:
                    if isinstance(item, AST):
                        push(item)
            elif isinstance(value, AST):
                push(value)
    return out


def _own_statements(body: Iterable[ast.stmt]) -> list[ast.stmt]:
    out: list[ast.stmt] = []
    _add_own_statements(body, out)
    return out


_NOT_OWNED = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _add_own_statements(body: Iterable[ast.stmt], out: list[ast.stmt]) -> None:
    # In source order: a statement, then the statements of its blocks (a list, not nested
    # generators: this runs once per statement of every function). Which blocks a statement
    # has is looked up once per kind: most statements have none.
    for stmt in body:
        out.append(stmt)
        blocks = _BLOCKS.get(type(stmt))
        if blocks is None:
            blocks = _block_fields(type(stmt))
        for name in blocks:
            block = getattr(stmt, name, None)
            if not block:
                continue
            if name == "handlers" or name == "cases":
                for clause in block:
                    _add_own_statements(clause.body, out)
            else:
                _add_own_statements(block, out)


_BLOCKS: dict[type, tuple[str, ...]] = {}


def _block_fields(kind: type) -> tuple[str, ...]:
    owned = not issubclass(kind, _NOT_OWNED)
    fields = _BLOCKS[kind] = tuple(f for f in ("body", "orelse", "finalbody", "handlers", "cases") if owned and f in kind._fields)
    return fields


def parameter_names(func, star: bool = True) -> set[str]:
    """The names ``func``'s parameters bind; ``*args`` and ``**kwargs`` only with ``star``."""
    a = func.args
    named = (*a.posonlyargs, *a.args, *a.kwonlyargs)
    return {p.arg for p in ((*named, a.vararg, a.kwarg) if star else named) if p is not None}


def bound_names(target: ast.AST) -> list[str]:
    """Variables a target binds (tuples unpacked); ``a.b`` / ``a[i]`` bind none: they mutate
    an object. Unlike :func:`target_names`, where ``a.b = v`` makes ``a`` depend on ``v``."""
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [n for e in target.elts for n in bound_names(e)]
    if isinstance(target, ast.Starred):
        return bound_names(target.value)
    return []


def target_names(target: ast.AST) -> list[str]:
    """Names bound by an assignment target (tuples unpacked; ``a.b``/``a[i]`` bind ``a``)."""
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [n for e in target.elts for n in target_names(e)]
    if isinstance(target, ast.Starred):
        return target_names(target.value)
    if isinstance(target, (ast.Attribute, ast.Subscript)):
        base = target.value
        while isinstance(base, (ast.Attribute, ast.Subscript)):
            base = base.value
        return [base.id] if isinstance(base, ast.Name) else []
    return []


def _bindings(stmt: ast.stmt) -> Iterator[tuple[list[str], ast.AST | None]]:
    if isinstance(stmt, ast.Assign):
        names = [n for t in stmt.targets for n in target_names(t)]
        yield names, stmt.value
    elif isinstance(stmt, ast.AugAssign):
        names = target_names(stmt.target)
        yield names, ast.Tuple(elts=[stmt.target, stmt.value], ctx=ast.Load()) if names else None
    elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
        yield target_names(stmt.target), stmt.value
    elif isinstance(stmt, (ast.For, ast.AsyncFor)):
        yield target_names(stmt.target), stmt.iter
    elif isinstance(stmt, (ast.With, ast.AsyncWith)):
        for item in stmt.items:
            if item.optional_vars is not None:
                yield target_names(item.optional_vars), item.context_expr
    elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
        # ``x.add_(y)`` / ``out.append(y)``: in-place calls make the receiver depend on args.
        func = stmt.value.func
        if isinstance(func, ast.Attribute):
            names = target_names(func)
            if names:
                yield names, stmt.value
    # Walrus targets (simple statements only: a compound one's body is visited on its own).
    if not hasattr(stmt, "body"):
        for node in ast.walk(stmt):
            if isinstance(node, ast.NamedExpr):
                yield target_names(node.target), node.value


def names_read(expr: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(expr) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _first_arg(call: ast.Call, keyword: str) -> ast.expr | None:
    if call.args:
        return call.args[0]
    for kw in call.keywords:
        if kw.arg == keyword:
            return kw.value
    return None


def build_facts(source: str, path: str = "<string>", tree: ast.Module | None = None, project: Any = None) -> FileFacts:
    if tree is None:
        tree = ast.parse(source, filename=path)
    return FileFacts(source, tree, path, project)


# Modules from which torch's grad-mode context managers are imported by name.
GRAD_API_MODULES = ("torch", "torch.autograd", "torch.autograd.grad_mode")
# Statements whose blocks run at module level when they are there (`try`/`except*` from 3.11).
_MODULE_LEVEL_BLOCKS = tuple(getattr(ast, n) for n in ("If", "Try", "TryStar", "With") if hasattr(ast, n))


def main_guard(test: ast.expr) -> bool:
    """The test of a ``__main__`` guard: it reads ``__name__`` and the string ``"__main__"``
    (``__name__ == "__main__"``, either way round or with more conditions)."""
    nodes = list(ast.walk(test))
    return any(isinstance(n, ast.Name) and n.id == "__name__" for n in nodes) and any(
        isinstance(n, ast.Constant) and n.value == "__main__" for n in nodes
    )


def module_level(body: list[ast.stmt]):
    """``body`` and the blocks of its ``if``/``try``/``with`` statements, not function or
    class bodies nor the ``__main__`` guard's block (as gradfix.fixer's ``_module_level`` walks
    the same module)."""
    for stmt in body:
        yield stmt
        if isinstance(stmt, ast.If) and main_guard(stmt.test):
            continue  # runs after the definitions above it, and never when the module is imported
        if isinstance(stmt, _MODULE_LEVEL_BLOCKS):
            for field in ("body", "orelse", "finalbody"):
                yield from module_level(getattr(stmt, field, []))
            for handler in getattr(stmt, "handlers", []):
                yield from module_level(handler.body)
