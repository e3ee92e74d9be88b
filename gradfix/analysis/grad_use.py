"""Whether code works with gradients, and whether a file feeds a function's results into training.

The GF3xx rules ask these before they take grad mode away from code: ``forward`` and hooks
(:func:`is_hook_like`) run in their caller's mode, code that calls ``.backward()`` or reads
``.grad`` (:func:`uses_grads`) needs graphs, and a function whose results reach a training
function of the same file (:func:`feeds_training`) must keep them.
"""

from __future__ import annotations

import ast
import weakref

from gradfix.analysis.statements import is_within, own_nodes
from gradfix.analysis.vocabulary import DETACHING_METHODS, forward_callee
from gradfix.facts import FileFacts, bound_names, descendants

# Methods whose results autograd may need, or whose grad mode the caller/framework owns.
_HOOK_NAMES = {"forward", "__call__", "backward"}
_HOOK_PREFIXES = ("register_", "on_")
_HOOK_SUFFIXES = ("_hook", "_step", "_epoch_end", "_batch_end")
# Calls that show a function works with gradients.
_GRAD_METHODS = {"backward", "requires_grad_", "retain_grad"}
_GRAD_FUNCTIONS = {"torch.autograd.grad", "torch.autograd.backward"}
# Per-file results, computed once.
_TRAINING_SCOPES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_REFERENCES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def is_hook_like(name: str) -> bool:
    """``forward``, hooks and framework step methods: the caller owns their grad mode."""
    return name in _HOOK_NAMES or name.startswith(_HOOK_PREFIXES) or name.endswith(_HOOK_SUFFIXES)


def runs_own_forward(facts: FileFacts, func) -> bool:
    """A method that runs its own object's forward (``self(X)``, ``self.forward(X)``) and
    returns what it computes, graph and all: one more forward of the module (a GP model's
    ``posterior``, whose output acquisition functions differentiate), so its caller owns the
    grad mode as it owns ``forward``'s. Not one whose result leaves only through ``.data``,
    ``.item()``, ``.detach()`` or NumPy (``return self(x).data``: a prediction), nor one
    whose every call in the file takes only such a cut of it (``prediction =
    self.predict(x)`` read only by ``torch.argmax(prediction, 1)``)."""
    args = func.args.posonlyargs + func.args.args
    if not args or args[0].arg != "self":
        return False
    own = own_nodes(func)
    if not any(_own_forward(n) for n in own):
        return False
    carrying: set[str] = set()
    changed = True
    while changed:  # names bound to what carries the forward's graph, to a fixed point
        changed = False
        for node in own:
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and node.value is not None and _carries(node.value, carrying):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for name in (n for t in targets for n in bound_names(t)):
                    if name not in carrying:
                        carrying.add(name)
                        changed = True
    if not any(isinstance(n, ast.Return) and n.value is not None and _carries(n.value, carrying) for n in own):
        return False
    callers = [c for c in facts.calls if isinstance(c.func, ast.Attribute) and c.func.attr == func.name]
    return not callers or not all(_cut_at_once(facts, c) for c in callers)


def _cut_at_once(facts: FileFacts, value: ast.AST, seen: frozenset = frozenset()) -> bool:
    """What ``value`` evaluates to is used only through a cut of its graph: ``.argmax(1)``,
    ``.item()``, ``torch.argmax(v, 1)``, or bound to a name of its function that every other
    read uses so."""
    parent = facts.parents.get(value)
    if isinstance(parent, ast.Attribute) and parent.value is value:
        return parent.attr in _GRAPH_CUTS
    if isinstance(parent, ast.Call) and value in parent.args:
        return (facts.call_qualname(parent) or "").rpartition(".")[2] in _GRAPH_CUTS
    if isinstance(parent, ast.Assign) and parent.value is value and len(parent.targets) == 1 and isinstance(parent.targets[0], ast.Name):
        name, scope = parent.targets[0].id, facts.function_of.get(parent)
        if name in seen:
            return False  # `x = x`: not followed round again
        reads = [n for n in ast.walk(scope or facts.tree) if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)
                 and facts.function_of.get(n) is scope]
        return bool(reads) and all(_cut_at_once(facts, n, seen | {name}) for n in reads)
    return False


# `.data` and the methods whose result never carries history end the forward's graph
_GRAPH_CUTS = DETACHING_METHODS | {"data"}


def _own_forward(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and forward_callee(node) == "self"


def _carries(expr: ast.AST, carrying: set[str]) -> bool:
    """``expr`` holds the forward's output (or a name bound to it) other than through a cut."""
    todo = [expr]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Attribute) and node.attr in _GRAPH_CUTS:
            continue  # `out.data`, `out.detach()`, `out.argmax(1)`: no graph beyond
        if _own_forward(node) or (isinstance(node, ast.Name) and node.id in carrying):
            return True
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        todo.extend(ast.iter_child_nodes(node))
    return False


def uses_grads(facts: FileFacts, root: ast.AST) -> bool:
    """Whether code under ``root`` computes or asks for gradients (nested functions included).

    ``.backward()``, ``torch.autograd.grad``, ``.requires_grad_()``, ``requires_grad=...``,
    ``.retain_grad()``, reading ``.grad``, an optimizer ``.step()``, or a region that turns
    grad mode on (``enable_grad``, ``set_grad_enabled(x)``).
    """
    for node in descendants(root):
        if isinstance(node, ast.Attribute) and (node.attr in _GRAD_METHODS or node.attr in ("grad", "requires_grad")):
            return True
        if isinstance(node, ast.keyword) and node.arg == "requires_grad":
            return True
        if isinstance(node, ast.Call):
            if facts.call_qualname(node) in _GRAD_FUNCTIONS:
                return True
            if isinstance(node.func, ast.Attribute) and node.func.attr == "step":
                return True
    for region in facts.regions:
        if region.mode != "disabled" and is_within(facts, region.owner, root):
            return True
    return False


def _training_scopes(facts: FileFacts) -> set:
    """Functions (None: module level) that train: they use grads, or are forward/step hooks."""
    cache = _TRAINING_SCOPES.get(facts)
    if cache is not None:
        return cache
    scopes: set = set()
    for mc in facts.method_calls:
        if mc.method in ("backward", "step"):
            scopes.add(facts.function_of.get(mc.call))
    for call in facts.calls:
        if facts.call_qualname(call) in _GRAD_FUNCTIONS:
            scopes.add(facts.function_of.get(call))
    for func in facts.functions:
        if is_hook_like(func.name):
            scopes.add(func)
    _TRAINING_SCOPES[facts] = scopes
    return scopes


def _references(facts: FileFacts) -> dict[str, set]:
    """Name -> the functions (None: module) that mention it as ``name`` or ``x.name``."""
    cache = _REFERENCES.get(facts)
    if cache is not None:
        return cache
    refs: dict[str, set] = {}
    for node, func in facts.function_of.items():
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            refs.setdefault(node.id, set()).add(func)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            refs.setdefault(node.attr, set()).add(func)
    _REFERENCES[facts] = refs
    return refs


def feeds_training(facts: FileFacts, func: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Whether the same file may feed ``func``'s results into training.

    By name, transitively: some function that mentions ``func`` (directly or through the
    functions that call it) calls ``.backward()``/an optimizer ``.step()``/``autograd.grad``,
    or is a ``forward``/hook/step method. Over-approximate on purpose (any ``x.name`` counts).
    """
    training = _training_scopes(facts)
    refs = _references(facts)
    seen: set = {func}
    todo = [func.name]
    names_seen = {func.name}
    while todo:
        name = todo.pop()
        for caller in refs.get(name, ()):
            if caller in seen:
                continue
            if caller in training:
                return True
            seen.add(caller)
            caller_name = getattr(caller, "name", None)
            if caller_name and caller_name not in names_seen:
                names_seen.add(caller_name)
                todo.append(caller_name)
    return False
