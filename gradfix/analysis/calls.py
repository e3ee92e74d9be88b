"""Which def of this file a call may run: one answer for every rule.

A name means what is bound to it where it is read (:class:`~gradfix.analysis.provenance.
ReachingDefinitions` follows ``def``/``class`` statements like assignments):

- a name bound in the scope chain by an import, a parameter or an assignment is no file function
  (when only some paths bind it so, the def *and* something else may run);
- a read at module level sees the binding in force at that point of the module's straight-line
  order: a later redefinition does not count, an earlier one it shadows does not either; on
  branches both may reach;
- a read inside a function body happens when the function is called, normally after the module
  has finished executing: it sees what is bound at the end of the module (of a def redefined
  later at module level, the last one), and also what is bound where a module-level statement
  calls a def of the file (``main()`` before a redefinition runs its code with the first one).
  A function's own local binding wins (a nested ``def``);
- ``self.f(...)`` runs the method ``f`` of the caller's class (the last one its body binds);
  ``obj.f(...)`` on anything else may run a method ``f`` of any class of the file, or something
  else.

A def that no read can see (shadowed before anything runs it, and not what the module leaves
bound) never runs: :func:`dead`.
"""

from __future__ import annotations

import ast
import builtins
from collections import Counter
from dataclasses import dataclass

from gradfix.analysis.provenance import UNKNOWN, Definition, bound_values, reaching_definitions, seen_by_calls
from gradfix.analysis.statements import own_nodes
from gradfix.analysis.vocabulary import owner_class
from gradfix.facts import FileFacts, parameter_names

_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)
_BUILTINS = frozenset(dir(builtins))


@dataclass(frozen=True)
class Binding:
    """What a name (or ``self.attr``) may hold where it is read: the file's defs, in source
    order, and whether something else may be bound there too (an import, a parameter, an
    assignment, a class, a builtin, an unbound name)."""

    defs: tuple[ast.FunctionDef | ast.AsyncFunctionDef, ...] = ()
    other: bool = True

    @property
    def sole(self) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        """The one def the read holds on every path, or None."""
        return self.defs[0] if len(self.defs) == 1 and not self.other else None


NOTHING = Binding()


def name_binding(facts: FileFacts, name: ast.Name) -> Binding:
    """What the read ``name`` may hold (see the module docstring)."""
    return facts.memo(("calls.name", id(name)), lambda: _name_binding(facts, name))


def callees(facts: FileFacts, call: ast.Call) -> Binding:
    """The defs of this file ``call`` may run."""
    return facts.memo(("calls.callees", id(call)), lambda: _callees(facts, call))


def callee(facts: FileFacts, call: ast.Call) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The one def of this file ``call`` runs, or None (none, or not only it)."""
    return callees(facts, call).sole


def callers(facts: FileFacts, func) -> list[ast.Call]:
    """The calls of the file that may run ``func``, in source order."""
    return _callers(facts).get(func, [])


def running_defs(facts: FileFacts, func) -> frozenset | None:
    """The defs of the file whose run may run ``func`` (itself included), followed through the
    calls that name it and the defs around those calls; None when something else may run it:
    a method, a decorated def, a lambda, or a def named other than as what a call calls (handed
    on as a callback, stored, returned)."""
    return facts.memo(("calls.running_defs", id(func)), lambda: _running_defs(facts, func))


def _running_defs(facts: FileFacts, func) -> frozenset | None:
    escaping = facts.memo(("calls.escaping_names",), lambda: _escaping_names(facts))
    seen, todo = set(), [func]
    while todo:
        f = todo.pop()
        if f in seen:
            continue
        if not isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) or f.decorator_list or f.name in escaping:
            return None
        if owner_class(facts, f) is not None:
            return None
        seen.add(f)
        todo.extend(c for call in callers(facts, f) if (c := facts.function_of.get(call)) is not None)
    return frozenset(seen)


def _escaping_names(facts: FileFacts) -> frozenset[str]:
    """Names read other than as what a call calls (`train(model, evaluate)`, `fn = evaluate`)."""
    out = set()
    for node in ast.walk(facts.tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            parent = facts.parents.get(node)
            if not (isinstance(parent, ast.Call) and parent.func is node):
                out.add(node.id)
    return frozenset(out)


def outside_callers(facts: FileFacts, func) -> list[ast.Call]:
    """:func:`callers` of ``func`` other than its own code's (a recursive call hands it
    what it already has)."""
    return [c for c in callers(facts, func) if facts.function_of.get(c) is not func]


def argument_for(func, call: ast.Call, param: str) -> ast.expr | None:
    """The argument ``call`` passes for ``func``'s parameter ``param`` (``self`` bound by a
    method call), or None: a default, or unknown behind ``*args``/``**kwargs``."""
    positional = [a.arg for a in (*func.args.posonlyargs, *func.args.args)]
    if isinstance(call.func, ast.Attribute) and positional[:1] in (["self"], ["cls"]):
        positional = positional[1:]
    for kw in call.keywords:
        if kw.arg == param:
            return kw.value
    if param in positional and positional.index(param) < len(call.args):
        index = positional.index(param)
        if any(isinstance(a, ast.Starred) for a in call.args[: index + 1]):
            return None
        return call.args[index]
    return None


def dead(facts: FileFacts, func) -> bool:
    """``func`` never runs: a def at module level (or in a function) whose binding no read of
    the name can see and that the module does not leave bound (``def f`` … ``def f`` again,
    the first never called in between)."""
    return func in facts.memo(("calls.dead",), lambda: _dead(facts))


def unbound(facts: FileFacts, name: ast.Name) -> bool:
    """The module-level read ``name`` raises NameError: no path to it binds the name (no
    assignment, import, def, loop or ``with`` target before it), it is no builtin, no function
    declares it ``global`` and no ``from m import *`` could bind it."""
    if facts.function_of.get(name) is not None or name.id in _BUILTINS or name.id in facts.declared_global:
        return False
    if facts.memo(("calls.star_import",), lambda: any(
        any(a.name == "*" for a in n.names) for n in facts.nodes_of(ast.ImportFrom)
    )):
        return False
    return name in reaching_definitions(facts, None).unbound


# -- implementation ------------------------------------------------------------------------------
def _callees(facts: FileFacts, call: ast.Call) -> Binding:
    func = call.func
    if isinstance(func, ast.Name):
        return name_binding(facts, func)
    if not isinstance(func, ast.Attribute):
        return NOTHING
    receiver = func.value
    if isinstance(receiver, ast.Name) and receiver.id == "self":
        cls = owner_class(facts, call)
        return _class_binding(facts, cls, func.attr) if cls is not None else NOTHING
    if isinstance(receiver, ast.Name) and facts.resolve_name(receiver.id, call) is not None:
        return NOTHING  # `utils.f(...)`: a module's function, not this file's
    defs = [d for c in _classes(facts) for d in _class_binding(facts, c, func.attr).defs]
    if defs and isinstance(receiver, ast.Name) and _imported_instance(facts, receiver):
        return NOTHING  # `optimizer.step()` of `optimizer = torch.optim.Adam(..)`: not this file's `step`
    return Binding(tuple(sorted(defs, key=_pos)), True)


def _imported_instance(facts: FileFacts, name: ast.Name) -> bool:
    """Every value ``name`` may hold here is built by an imported callable (a class of another
    package: `torch.optim.Adam(..)`), so its methods are not this file's defs."""
    values = bound_values(facts, name)
    return bool(values) and all(isinstance(v, ast.Call) and facts.call_qualname(v) is not None for v in values)


def _name_binding(facts: FileFacts, name: ast.Name) -> Binding:
    if name.id not in _def_names(facts):
        return Binding((), True)  # no def of that name in the file (a builtin, an import): no flow to read
    scopes = list(facts.enclosing_functions(name))
    for i, scope in enumerate(scopes):
        if isinstance(scope, ast.Lambda):
            if name.id in facts.scope_of_node[scope].locals:
                return NOTHING  # a lambda's parameter
            continue
        info = facts.scope_of_node[scope]
        if name.id in info.globals:
            break
        if name.id in info.imports or name.id in info.locals:
            flow = reaching_definitions(facts, scope)
            if i == 0 and name in flow.bound:
                return _binding(flow.bound[name])
            return _local_bindings(facts, scope, name.id)
    if scopes and module_level_bindings(facts)[name.id] == 1:
        # bound once, by a def at the top of the module: what every function sees (the module's
        # reaching definitions would say the same, at the price of a walk of the whole module)
        top = next((s for s in facts.tree.body if isinstance(s, _DEFS) and s.name == name.id), None)
        if top is not None:
            return Binding((top,), name.id in facts.declared_global)
    flow = reaching_definitions(facts, None)
    if not scopes and name in flow.bound:
        found = _binding(flow.bound[name])
    elif scopes and flow.exit is not None:
        # what the module leaves bound, and what is bound wherever a module-level statement
        # calls a def of the file (whose code may run this function then); unbound there, the
        # call could not have run
        found = _binding(seen_by_calls(facts, name.id))
    else:  # a class body, a comprehension: any of the module's bindings
        found = _local_bindings(facts, None, name.id)
    if name.id in facts.declared_global:
        found = Binding(found.defs, True)  # a function may rebind it
    return found


def _binding(definitions: frozenset[Definition]) -> Binding:
    defs = [d.node for d in definitions if d.kind == "def" and isinstance(d.node, _DEFS)]
    other = any(not (d.kind == "def" and isinstance(d.node, _DEFS)) for d in definitions)
    return Binding(tuple(sorted(defs, key=_pos)), other)


def _local_bindings(facts: FileFacts, scope, name: str) -> Binding:
    """Every binding of ``name`` that ``scope`` (None: the module) makes itself: its defs, and
    whether it binds the name any other way too."""
    return facts.memo(("calls.local", id(scope), name), lambda: _all_bindings(facts, scope, name))


def _all_bindings(facts: FileFacts, scope, name: str) -> Binding:
    root = facts.tree if scope is None else scope
    info = facts.scope_of_node[root]
    defs, other = [], name in info.imports
    if scope is not None:
        other = other or name in parameter_names(scope)
    for node in own_nodes(facts.tree if scope is None else scope):
        if isinstance(node, _DEFS) and node.name == name:
            defs.append(node)
        elif isinstance(node, ast.ClassDef) and node.name == name:
            other = True
        elif isinstance(node, ast.Name) and node.id == name and not isinstance(node.ctx, ast.Load):
            other = True
        elif isinstance(node, ast.ExceptHandler) and node.name == name:
            other = True
    if not defs:
        other = True
    return Binding(tuple(sorted(defs, key=_pos)), other)


def _class_binding(facts: FileFacts, cls: ast.ClassDef, attr: str) -> Binding:
    """The method ``attr`` of ``cls``: the last def its body binds at top level (a class body
    runs straight through), None when something else is bound last or it has none."""
    last = _class_methods(facts, cls).get(attr)
    return Binding((last,), False) if last is not None else NOTHING


def _class_methods(facts: FileFacts, cls: ast.ClassDef) -> dict[str, ast.AST | None]:
    """Name -> the def that ``cls``'s body binds it to last (None: something else binds it
    after), read once per class: a call ``obj.f()`` asks every class of the file."""

    def compute():
        last: dict[str, ast.AST | None] = {}
        for stmt in cls.body:
            if isinstance(stmt, _DEFS):
                last[stmt.name] = stmt
            elif not isinstance(stmt, ast.ClassDef):  # a nested class binds only its own name
                for n in ast.walk(stmt):
                    if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load) and n.id in last:
                        last[n.id] = None
        return last

    return facts.memo(("calls.class_methods", id(cls)), compute)


def _def_names(facts: FileFacts) -> frozenset[str]:
    return facts.memo(("calls.def_names",), lambda: frozenset(f.name for f in facts.functions if isinstance(f, _DEFS)))


def _classes(facts: FileFacts) -> list[ast.ClassDef]:
    return facts.memo(("calls.classes",), lambda: facts.nodes_of(ast.ClassDef))


def _callers(facts: FileFacts) -> dict:
    def compute():
        out: dict = {}
        for call in sorted(facts.calls, key=_pos):
            for d in callees(facts, call).defs:
                out.setdefault(d, []).append(call)
        return out

    return facts.memo(("calls.callers",), compute)


def _dead(facts: FileFacts) -> frozenset:
    # A def is dead only if its name is bound again at module level: most files rebind none,
    # and for them the module's reaching definitions are not needed.
    top = [f for f in facts.functions if facts.function_of.get(f) is None and owner_class(facts, f) is None]
    counts = module_level_bindings(facts)
    if all(counts[f.name] <= 1 for f in top):
        return frozenset()
    flow = reaching_definitions(facts, None)
    if flow.exit is None:
        return frozenset()  # the module stops early: what it leaves bound is not known
    left = {d.node for definitions in flow.exit.values() for d in definitions if d.kind == "def"}
    candidates = [
        f
        for f in facts.functions
        if f not in left
        and facts.function_of.get(f) is None
        and owner_class(facts, f) is None
        and f.name not in facts.declared_global
    ]
    if not candidates:
        return frozenset()
    names = {f.name for f in candidates}
    seen: set = set()
    for node in facts.function_of:
        if isinstance(node, ast.Name) and node.id in names and isinstance(node.ctx, ast.Load):
            seen.update(name_binding(facts, node).defs)
    return frozenset(f for f in candidates if f not in seen)


def module_level_bindings(facts: FileFacts) -> Counter:
    """How many statements of the module's own code (not of function or class bodies) bind
    each name; an over-count (a handler's body read twice) only
    costs :func:`_dead`, :func:`_name_binding` and provenance's legacy-class aliases their fast
    paths."""
    return facts.memo(("calls.module_level_bindings",), lambda: _count_module_level_bindings(facts))


def _count_module_level_bindings(facts: FileFacts) -> Counter:
    counts: Counter = Counter()
    # Without a walrus, an expression binds a name only as a target (`x = ...`, `for x in`,
    # `del x`): a value is not walked (a model file's big `default_cfgs = {...}` literal).
    walrus = ":=" in facts.source
    todo = list(facts.tree.body)
    while todo:
        stmt = todo.pop()
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            counts[stmt.name] += 1
        elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
            counts.update((a.asname or a.name).split(".")[0] for a in stmt.names)
        else:
            for node in ast.iter_child_nodes(stmt):
                if isinstance(node, ast.stmt):
                    todo.append(node)
                elif isinstance(node, ast.expr):
                    if walrus or isinstance(getattr(node, "ctx", None), (ast.Store, ast.Del)):
                        counts.update(_stored_names(node))
                else:  # handlers, match cases, with items: every name they may bind
                    todo.extend(getattr(node, "body", ()))
                    counts.update(_stored_names(node))
    return counts


def _stored_names(node: ast.AST):
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load):
            yield n.id
        elif isinstance(n, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar)) and n.name:
            yield n.name
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield n.name


def _pos(node: ast.AST) -> tuple[int, int]:
    return (node.lineno, node.col_offset)
