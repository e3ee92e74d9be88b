"""May ``X.data`` be a torch tensor's ``.data``? One answer for every rule that reads or writes it.

``.data`` is also an ordinary attribute name. The case that matters is a plain class that keeps its
value in ``self.data`` (micrograd's ``Value``: ``self.data = <float>``, ``self.grad``). There,
``p.data += -lr * p.grad`` is the update itself; a rewrite to ``p += ...`` under ``no_grad``
rebinds ``p`` to a new object (``Value`` has ``__add__``, no ``__iadd__``) and training silently
stops. Three facts say a ``.data`` is not known to be torch's:

- the file never uses torch (:func:`torch_absent`);
- the receiver is built by such a *plain data class*, defined in the file or (with a project
  index) in another project module (:func:`plain_data_classes`);
- the file defines a plain data class and the receiver is a bare name that nothing ties to torch
  (a parameter, a loop over ``n.parameters()``): as likely that class's object as a tensor;
- the receiver belongs to another array or graph library (:func:`foreign_object`): its root name
  is built by a call into it (``g = dgl.heterograph(..)``; ``g.nodes[t].data`` is DGL's feature
  mapping) or handed to one of its functions (``sparse.isspmatrix(lap)``: a SciPy matrix, whose
  ``.data`` is its own values).
"""

from __future__ import annotations

import ast
import re

from gradfix.analysis.provenance import UNKNOWN, reaching_definitions
from gradfix.facts import FileFacts, dotted_name

_TORCH_TENSOR_BASES = ("torch.",)
# Libraries whose objects have a ``.data`` of their own (a feature mapping, a values array, a
# buffer): an object one of them builds is theirs. Handed to a function, only the graph and
# sparse libraries' say so: NumPy's, pandas', TensorFlow's functions take tensors too.
_FOREIGN_LIBRARIES = ("dgl.", "scipy.", "pandas.", "networkx.", "numpy.", "cupy.", "jax.", "tensorflow.")
_FOREIGN_TAKERS = ("dgl.", "scipy.", "networkx.")


def torch_absent(facts: FileFacts) -> bool:
    """The file imports other modules but never torch: no ``import torch``/``from torch... import``
    in any scope, no star import (``from common import *`` may bring torch in), and the word
    ``torch`` nowhere in the source (a ``__import__("torch")`` or a comment about it keeps the
    doubt). A file with no import at all is a fragment (a snippet pasted from an issue): torch is
    not ruled out there."""
    return facts.memo(("tensor_data.torch_absent",), lambda: _torch_absent(facts))


def _torch_absent(facts: FileFacts) -> bool:
    if "torch" in facts.source:
        return False
    imports = [n for n in ast.walk(facts.tree) if isinstance(n, (ast.Import, ast.ImportFrom))]
    if not imports:
        return False
    return not any(isinstance(n, ast.ImportFrom) and any(a.name == "*" for a in n.names) for n in imports)


def _assigns_self_data(cls: ast.ClassDef) -> bool:
    for item in cls.body:
        if not isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) or not item.args.args:
            continue
        self_name = item.args.args[0].arg
        for node in ast.walk(item):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
            for t in targets:
                if isinstance(t, ast.Attribute) and t.attr == "data" and isinstance(t.value, ast.Name) and t.value.id == self_name:
                    return True
    return False


def _plain_data_class(cls: ast.ClassDef, base_qualname) -> bool:
    """A class whose methods assign ``self.data`` and none of whose bases is a torch class
    (``class P(nn.Parameter)`` assigning ``self.data = t`` uses the tensor's own setter)."""
    if not _assigns_self_data(cls):
        return False
    return not any((base_qualname(b) or "").startswith(_TORCH_TENSOR_BASES) for b in cls.bases)


def plain_data_classes(facts: FileFacts) -> frozenset[str]:
    """Names of the classes this file defines at module level that hold their own ``.data``."""

    def compute():
        # only a class holding some `x.data = ..` can (the assignments are indexed; classes
        # are not walked for nothing)
        holders = set()
        for kind in (ast.Assign, ast.AnnAssign):
            for n in facts.nodes_of(kind):
                if any(isinstance(t, ast.Attribute) and t.attr == "data" for t in (n.targets if kind is ast.Assign else [n.target])):
                    node = n
                    while node in facts.parents and facts.parents[node] is not facts.tree:
                        node = facts.parents[node]
                    holders.add(node)
        return frozenset(
            n.name for n in facts.tree.body if n in holders and isinstance(n, ast.ClassDef) and _plain_data_class(n, facts.qualname)
        )

    return facts.memo(("tensor_data.plain_classes",), compute)


def _builds_plain_object(facts: FileFacts, value: ast.AST) -> bool:
    """``Value(2.0)``: a call of a plain data class of this file or of a project module."""
    if not isinstance(value, ast.Call):
        return False
    if isinstance(value.func, ast.Name) and value.func.id in plain_data_classes(facts) and facts.resolve_name(value.func.id, value) is None:
        return True
    qualname = facts.qualname(value.func)
    project = facts.project
    if not qualname or project is None or qualname.startswith("torch"):
        return False
    module = project.find_module(qualname)
    parsed = project.parsed(module) if module else None
    if parsed is None:
        return False
    tree, names = parsed
    cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == qualname.rpartition(".")[2]), None)
    if cls is None:
        return False
    return _plain_data_class(cls, lambda b: names.get(b.id) if isinstance(b, ast.Name) else None)


def _definitions(facts: FileFacts, name: ast.Name):
    func = facts.function_of.get(name)
    if isinstance(func, ast.Lambda):
        return None
    found = reaching_definitions(facts, func).reaching.get(name)
    if not found or UNKNOWN in found:
        return None
    return found


# Module methods whose results a ``for`` loop takes parameters, buffers or modules from.
_MODULE_ITERATORS = frozenset("parameters named_parameters buffers named_buffers modules named_modules children".split())


def _plain_methods(facts: FileFacts) -> frozenset[str]:
    """Methods defined by the file's classes that have no torch base (micrograd's
    ``MLP.parameters`` returns ``Value`` objects, not tensors)."""

    def compute():
        return frozenset(
            item.name
            for cls in ast.walk(facts.tree)
            if isinstance(cls, ast.ClassDef) and not any((facts.qualname(b) or "").startswith("torch.") for b in cls.bases)
            for item in cls.body
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
        )

    return facts.memo(("tensor_data.plain_methods",), compute)


def _tied_to_torch(facts: FileFacts, definition) -> bool:
    """A binding from a torch call (``torch.randn(..)``, ``nn.Parameter(..)``, ``x.to(..)`` of
    one), or a ``for`` over ``m.parameters()`` / ``m.modules()``... when no class of the file
    without a torch base defines that method."""
    if definition.kind == "loop":
        iterators = [
            c.func.attr
            for c in ast.walk(definition.value)
            if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) and c.func.attr in _MODULE_ITERATORS
        ]
        return bool(iterators) and not set(iterators) & _plain_methods(facts)
    value = definition.value if definition.kind == "assign" else None
    while isinstance(value, ast.Call):
        if (facts.qualname(value.func) or "").startswith("torch."):
            return True
        value = value.func.value if isinstance(value.func, ast.Attribute) else None
    return False


def may_be_torch_data(facts: FileFacts, receiver: ast.expr) -> bool:
    """Whether ``receiver.data`` may be a torch tensor's ``.data`` (see the module docstring).
    ``False`` means it is surely or as likely an ordinary attribute: say nothing about it."""
    if torch_absent(facts) or foreign_object(facts, receiver):
        return False
    root = receiver
    while isinstance(root, ast.Subscript):
        root = root.value
    plain = plain_data_classes(facts)
    if isinstance(root, ast.Name):
        definitions = _definitions(facts, root)
        if definitions and any(d.kind == "assign" and _builds_plain_object(facts, d.value) for d in definitions):
            return False
        if plain and not (definitions and all(_tied_to_torch(facts, d) for d in definitions)):
            return False
        return True
    if isinstance(root, ast.Attribute) and plain:
        # `n.b.data` where some `X.b = Value(..)` in the file: that attribute holds plain objects.
        return not _holds_plain_objects(facts, root.attr)
    return True


def foreign_object(facts: FileFacts, receiver: ast.expr) -> bool:
    """Whether ``receiver`` (through its attributes and subscripts: ``g.nodes[t]``) is rooted in a
    name that every reaching definition binds to a call into another array or graph library
    (``dgl.heterograph(..)``, ``sp.csr_matrix(..)``), or that is handed to such a library's
    function in the same function (a graph or sparse library's only: see _FOREIGN_TAKERS)."""
    root = receiver
    while isinstance(root, (ast.Attribute, ast.Subscript)):
        root = root.value
    if not isinstance(root, ast.Name):
        return False
    definitions = _definitions(facts, root)
    if definitions and all(d.kind == "assign" and _foreign_call(facts, d.value) for d in definitions):
        return True
    for call in facts.calls_in(facts.enclosing_function(receiver)):
        if any(isinstance(a, ast.Name) and a.id == root.id for a in call.args):
            qualname = facts.call_qualname(call) or ""
            if qualname.startswith(_FOREIGN_TAKERS):
                return True
    return False


def _foreign_call(facts: FileFacts, value: ast.AST) -> bool:
    return isinstance(value, ast.Call) and (facts.call_qualname(value) or "").startswith(_FOREIGN_LIBRARIES)


def _holds_plain_objects(facts: FileFacts, attr: str) -> bool:
    """Whether the file assigns a plain data object to some ``X.attr`` (``self.b = Value(0)``):
    only the assignments to that attribute are asked what they build."""

    def compute():
        return any(
            _builds_plain_object(facts, node.value)
            for node in facts.nodes_of(ast.Assign)
            if any(isinstance(t, ast.Attribute) and t.attr == attr for t in node.targets)
        )

    return facts.memo(("tensor_data.holds_plain_objects", attr), compute)


def grads_may_require_grad(facts: FileFacts) -> bool:
    """Whether a ``.grad`` in this file may be a graph node: some call passes
    ``create_graph=`` with anything but a literal False (``loss.backward(create_graph=True)``,
    ``autograd.grad(.., create_graph=True)``). Otherwise a ``.grad`` never requires grad, and
    in-place ops on it record nothing (pinned in tests/facts/test_gf304_facts.py)."""

    def compute():
        return any(
            k.arg == "create_graph" and not (isinstance(k.value, ast.Constant) and k.value.value in (False, None))
            for call in facts.calls
            for k in call.keywords
        ) or any(k.arg is None for call in facts.calls for k in call.keywords if _passes_backward_kwargs(call))

    return facts.memo(("tensor_data.create_graph",), compute)


def _passes_backward_kwargs(call: ast.Call) -> bool:
    """``loss.backward(**kw)`` / ``autograd.grad(.., **kw)``: ``create_graph`` may be in there."""
    name = call.func.attr if isinstance(call.func, ast.Attribute) else call.func.id if isinstance(call.func, ast.Name) else ""
    return name in ("backward", "grad")


# Methods that work on a tensor's memory, not its values.
_STORAGE_METHODS = frozenset("storage untyped_storage set_ record_stream resize_".split())


def manages_storage(facts: FileFacts, func) -> bool:
    """Whether ``func`` (None: module level) works on the memory behind some ``.data``
    (``p.data.storage().resize_(n)``, ``p.data.record_stream(s)``, ``p.data.set_(t)``): sharded
    or offloaded parameters refilled while autograd holds them, where a write through ``.data``
    must stay invisible to autograd's version checks (under ``no_grad`` the same write makes
    ``backward()`` raise)."""

    def compute():
        for call in facts.calls_in(func):
            method = call.func
            if not (isinstance(method, ast.Attribute) and method.attr in _STORAGE_METHODS):
                continue
            receiver = method.value
            while isinstance(receiver, (ast.Attribute, ast.Subscript, ast.Call)):
                if isinstance(receiver, ast.Attribute) and receiver.attr == "data":
                    return True
                receiver = receiver.func if isinstance(receiver, ast.Call) else receiver.value
        return False

    return facts.memo(("tensor_data.manages_storage", id(func)), compute)


_PARAMETER_CLASSES = frozenset({"torch.nn.Parameter", "torch.nn.parameter.Parameter"})


def parameter_attributes(facts: FileFacts, cls: ast.ClassDef | None) -> frozenset[str]:
    """Attributes that ``cls``'s methods bind to a parameter: ``self.mu_W =
    nn.Parameter(...)`` or ``self.register_parameter("g", ...)``, whatever they are named."""
    if cls is None:
        return frozenset()

    def compute():
        found = set()
        for node in ast.walk(cls):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and facts.call_qualname(node.value) in _PARAMETER_CLASSES:
                found |= {t.attr for t in node.targets if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"}
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "register_parameter"
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                found.add(node.args[0].value)
        return frozenset(found)

    return facts.memo(("tensor_data.parameter_attributes", cls), compute)


_LAZY_MODULE = re.compile(r"^torch\.nn\.(modules\.[\w.]+\.)?Lazy\w+$")


def lazy_parameter(facts: FileFacts, tensor: ast.expr) -> bool:
    """``tensor`` (``self.net.weight``) is a parameter of a torch lazy module that its scope
    builds (``self.net = nn.LazyLinear(1)``) and has not run before (no ``self.net(x)`` above it
    there): an ``UninitializedParameter`` until the first forward. Writing it through ``.data``
    does nothing; writing it under ``no_grad`` (or with ``torch.nn.init``) raises ValueError
    (pinned in tests/facts/test_gf304_facts.py)."""
    if not isinstance(tensor, ast.Attribute):
        return False
    owner = dotted_name(tensor.value)
    if owner is None:
        return False
    scope = facts.function_of.get(tensor)
    built = [
        a for a in facts.assignments_to(owner)
        if isinstance(a.value, ast.Call) and _LAZY_MODULE.match(facts.call_qualname(a.value) or "") and facts.function_of.get(a) is scope
    ]
    if not built:
        return False
    at = (tensor.lineno, tensor.col_offset)
    return not any(
        dotted_name(c.func) == owner and (c.lineno, c.col_offset) < at for c in facts.calls_in(scope)
    )
