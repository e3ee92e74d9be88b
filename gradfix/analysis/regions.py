"""Grad-mode ``with`` blocks and the statements whose effect does not depend on the grad mode.

Which expressions compute nothing grad-mode dependent (:func:`is_inert`), which statements
are grad-neutral (:func:`is_neutral_statement`: ``del``, cleanup, logging), which trailing
``torch.save`` calls could run outside the block (:func:`trailing_saves`) and which ``with``
headers can be dropped (:func:`droppable_grad_with`). GF202, GF203 and GF204 ask these.
"""

from __future__ import annotations

import ast
import builtins
import re

from gradfix.facts import parameter_names

# Attributes that compute a new tensor view (recorded by autograd outside no_grad).
_VIEW_ATTRS = frozenset({"T", "mT", "H", "mH", "real", "imag"})
# Builtins whose result does not depend on the grad mode (when not shadowed).
_INERT_BUILTINS = frozenset({"len", "str", "repr", "int", "float", "bool", "round", "format", "type"})
_INERT_QUALNAMES = frozenset(
    {
        "os.path.join",
        "os.fspath",
        "pathlib.Path",
        "torch.device",
        "torch.Size",
        "torch.cuda.is_available",
        "torch.cuda.device_count",
        "torch.cuda.memory_allocated",
        "torch.cuda.max_memory_allocated",
        "torch.cuda.memory_reserved",
        "torch.cuda.max_memory_reserved",
    }
)
# Methods that read a value without recording autograd work.
_INERT_METHODS = frozenset({"item", "state_dict", "format"})
_LOG_LEVELS = frozenset({"debug", "info", "warning", "warn", "error", "critical", "exception", "log"})
_LOGGER_NAME = re.compile(r"^_*(log|logger)$", re.IGNORECASE)


def is_builtin(facts, name: str, at: ast.AST) -> bool:
    """``name`` at ``at`` means the builtin: no import, parameter or assignment binds it."""
    for scope in facts._scopes_for(at):
        if name in scope.imports or name in scope.locals:
            return False
    return True


def is_inert(facts, expr: ast.AST | None) -> bool:
    """Evaluating ``expr`` does no grad-mode dependent work (conservative: False if unsure).

    Names, constants, attribute chains, literals of those, f-strings, ``.item()``,
    ``.state_dict()``, ``len()``/``str()``…, ``os.path.join`` and string/path ``+``/``/``.
    """
    if expr is None:
        return True
    if isinstance(expr, (ast.Constant, ast.Name)):
        return True
    if isinstance(expr, ast.Attribute):
        return expr.attr not in _VIEW_ATTRS and is_inert(facts, expr.value)
    if isinstance(expr, ast.JoinedStr):
        return all(is_inert(facts, v) for v in expr.values)
    if isinstance(expr, ast.FormattedValue):
        return is_inert(facts, expr.value) and is_inert(facts, expr.format_spec)
    if isinstance(expr, (ast.Tuple, ast.List, ast.Set)):
        return all(is_inert(facts, e) for e in expr.elts)
    if isinstance(expr, ast.Starred):
        return is_inert(facts, expr.value)
    if isinstance(expr, ast.IfExp):  # `"cuda" if torch.cuda.is_available() else "cpu"`
        return all(is_inert(facts, e) for e in (expr.test, expr.body, expr.orelse))
    if isinstance(expr, ast.Dict):
        return all(is_inert(facts, k) for k in expr.keys) and all(is_inert(facts, v) for v in expr.values)
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, (ast.Add, ast.Div, ast.Mod)):
        # String formatting / path joining only: one side must be a string literal.
        stringy = [e for e in (expr.left, expr.right) if _is_string_literal(e)]
        return bool(stringy) and is_inert(facts, expr.left) and is_inert(facts, expr.right)
    if isinstance(expr, ast.Call):
        if not _inert_callee(facts, expr):
            return False
        # an argument that needs no grad by proof (`int(torch.sum(mask))` of a mask built from
        # `.data`) is the same value under any grad mode (asked last: provenance is dearer)
        args = [*expr.args, *(k.value for k in expr.keywords)]
        return all(is_inert(facts, a) or same_under_no_grad(facts, a) for a in args)
    return False


def _inert_callee(facts, call: ast.Call) -> bool:
    """What ``call`` calls does no grad-mode dependent work given inert arguments."""
    func = call.func
    if isinstance(func, ast.Name) and func.id in _INERT_BUILTINS and is_builtin(facts, func.id, func):
        return True
    if facts.qualname(func) in _INERT_QUALNAMES:
        return True
    if not (isinstance(func, ast.Attribute) and func.attr in _INERT_METHODS):
        return False
    if func.attr == "format":
        return _is_string_literal(func.value)
    if func.attr == "item" and (call.args or call.keywords):
        return False
    return is_inert(facts, func.value)


def _is_string_literal(expr: ast.AST) -> bool:
    return isinstance(expr, ast.JoinedStr) or (isinstance(expr, ast.Constant) and isinstance(expr.value, str))


def _is_logging_call(facts, call: ast.Call) -> bool:
    func = call.func
    if not isinstance(func, ast.Attribute) or func.attr not in _LOG_LEVELS:
        return False
    qual = facts.qualname(func)
    if qual is not None and qual.startswith("logging."):
        return True
    receiver = func.value
    if isinstance(receiver, ast.Call):  # logging.getLogger(__name__).info(...)
        return facts.call_qualname(receiver) == "logging.getLogger" and all(is_inert(facts, a) for a in receiver.args)
    if isinstance(receiver, ast.Name):
        return bool(_LOGGER_NAME.match(receiver.id)) and facts.resolve_name(receiver.id, receiver) is None
    if isinstance(receiver, ast.Attribute) and isinstance(receiver.value, ast.Name) and receiver.value.id == "self":
        return bool(_LOGGER_NAME.match(receiver.attr))
    return False


def is_neutral_statement(facts, stmt: ast.stmt) -> bool:
    """``del``, ``pass``, ``gc.collect()``, ``torch.cuda.empty_cache()``, print/logging or a
    unittest ``self.assert*`` check of inert values."""
    if isinstance(stmt, (ast.Pass, ast.Delete)):
        return True
    if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)):
        return False
    call = stmt.value
    args_inert = all(is_inert(facts, a) for a in call.args) and all(is_inert(facts, k.value) for k in call.keywords)
    if not args_inert:
        return False
    qual = facts.call_qualname(call)
    if qual in ("gc.collect", "torch.cuda.empty_cache"):
        return True
    if isinstance(call.func, ast.Name) and call.func.id == "print" and is_builtin(facts, "print", call.func):
        return True
    func = call.func
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self" and func.attr.startswith("assert"):
        return True  # a unittest check (`self.assertEqual(out.shape, (2, 1))`) reads values as a print does
    return _is_logging_call(facts, call)


def grad_with_regions(facts, node: ast.With | ast.AsyncWith) -> list:
    """The grad regions among ``node``'s items (with their own ``api``), in item order."""
    items = {id(i.context_expr): n for n, i in enumerate(node.items)}
    found = [r for r in facts.regions if r.owner is node and r.kind == "with"]
    return sorted(found, key=lambda r: items.get(id(r.expr), 0))


def droppable_grad_with(facts, node: ast.AST) -> bool:
    """A plain ``with <grad api>(<inert args>):`` (every item one, no ``as``) that can be removed."""
    if not isinstance(node, ast.With):
        return False
    regions = grad_with_regions(facts, node)
    if len(regions) != len(node.items) or not regions:
        return False
    for item, region in zip(node.items, regions):
        if item.optional_vars is not None or region.api is None or not region.called:
            return False
        call = region.expr
        if not (all(is_inert(facts, a) for a in call.args) and all(is_inert(facts, k.value) for k in call.keywords)):
            return False
    return True


def is_inert_save(facts, stmt: ast.stmt) -> bool:
    """A bare ``torch.save(...)`` statement whose arguments compute nothing.

    ``torch.save(model(x), f)`` is not: the argument is evaluated under the block's grad mode
    and saves a different tensor outside it (pinned in tests/facts/test_gf203_facts.py).
    """
    if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)):
        return False
    call = stmt.value
    if facts.call_qualname(call) != "torch.save":
        return False
    return all(is_inert(facts, a) for a in call.args) and all(is_inert(facts, k.value) for k in call.keywords)


def trailing_saves(facts, body: list[ast.stmt]) -> int:
    """How many statements at the end of ``body`` are inert ``torch.save`` calls."""
    count = 0
    for stmt in reversed(body):
        if not is_inert_save(facts, stmt):
            break
        count += 1
    return count


# -- what may move under ``no_grad`` alongside a fix's statements ---------------------------------
# Calls whose result is a plain Python value, or an existing object, whatever the grad mode:
# type checks, shapes, strings, the module tree (GF302/GF304 ask these when they widen a block).
_NO_GRAPH_BUILTINS = frozenset(
    {"isinstance", "issubclass", "hasattr", "callable", "len", "type", "id", "str", "repr", "int", "float", "bool",
     "range", "zip", "enumerate", "list", "tuple", "print", "round", "format", "iter", "next", "sorted", "reversed",
     # one of the values they are given, or arithmetic on them (checked as arithmetic is)
     "min", "max", "abs", "sum", "all", "any"}
)
_NO_GRAPH_METHODS = frozenset(
    "size dim ndimension numel nelement item tolist find startswith endswith lower upper strip split join "
    "format replace keys values items parameters named_parameters modules named_modules children named_children "
    "buffers named_buffers".split()
)


def computes_no_graph(facts, expr: ast.AST | None) -> bool:
    """Evaluating ``expr`` under ``no_grad`` gives the same result, and runs nothing that
    autograd could record into a value that outlives it: :func:`is_inert` plus comparisons,
    ``and``/``or``/``not``, arithmetic and subscripts of such values, ``math.*``, ``numpy.*``,
    ``operator.*`` and ``functools.reduce`` of such values, and the calls
    above (``isinstance(m, nn.Conv2d)``, ``m.weight.size(1)``, ``model.modules()``). Arithmetic
    may still build a tensor: :func:`~gradfix.analysis.insertion.plan_no_grad` checks that nothing it binds
    is read outside the block."""
    if expr is None or is_inert(facts, expr):
        return True
    if isinstance(expr, ast.Compare):
        return computes_no_graph(facts, expr.left) and all(computes_no_graph(facts, c) for c in expr.comparators)
    if isinstance(expr, ast.BoolOp):
        return all(computes_no_graph(facts, v) for v in expr.values)
    if isinstance(expr, ast.UnaryOp):
        return computes_no_graph(facts, expr.operand)
    if isinstance(expr, ast.BinOp):
        return computes_no_graph(facts, expr.left) and computes_no_graph(facts, expr.right)
    if isinstance(expr, ast.Subscript):
        return computes_no_graph(facts, expr.value) and computes_no_graph(facts, expr.slice)
    if isinstance(expr, ast.Slice):
        return all(computes_no_graph(facts, p) for p in (expr.lower, expr.upper, expr.step))
    if isinstance(expr, ast.Attribute):
        return expr.attr not in _VIEW_ATTRS and computes_no_graph(facts, expr.value)
    if isinstance(expr, (ast.Tuple, ast.List)):
        return all(computes_no_graph(facts, e) for e in expr.elts)
    if isinstance(expr, ast.IfExp):
        return all(computes_no_graph(facts, e) for e in (expr.test, expr.body, expr.orelse))
    if isinstance(expr, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
        # `max(group['lr'] for group in self.param_groups)`
        parts = [expr.key, expr.value] if isinstance(expr, ast.DictComp) else [expr.elt]
        parts += [part for g in expr.generators for part in (g.iter, *g.ifs)]
        targets = all(isinstance(n, ast.Name) for g in expr.generators for n in _target_leaves(g.target))
        return targets and not any(g.is_async for g in expr.generators) and all(computes_no_graph(facts, e) for e in parts)
    if isinstance(expr, ast.Call):
        if not (all(computes_no_graph(facts, a) for a in expr.args) and all(computes_no_graph(facts, k.value) for k in expr.keywords)):
            return False
        func = expr.func
        qual = facts.qualname(func) or ""
        if qual.startswith(("math.", "numpy.")):  # autograd never sees these
            return True
        if qual.startswith("operator.") or qual == "functools.reduce":
            return True  # arithmetic, as its operators (`reduce(operator.mul, m.kernel_size, 1)`)
        if isinstance(func, ast.Name):
            return func.id in _NO_GRAPH_BUILTINS and is_builtin(facts, func.id, func)
        return isinstance(func, ast.Attribute) and func.attr in _NO_GRAPH_METHODS and computes_no_graph(facts, func.value)
    return False


# Batch-norm buffers: tensors no module ever makes require grad.
_BUFFERS = frozenset({"running_mean", "running_var", "num_batches_tracked"})


def records_no_graph(facts, stmt: ast.stmt) -> bool:
    """A simple statement that may run under ``no_grad`` with the same effect: ``pass``,
    ``continue``, ``break``, logging (:func:`is_neutral_statement`), a container append of
    names or attributes (``convs.append(m.weight.data)``), a ``torch.nn.init``
    call (they run under ``no_grad`` themselves), an in-place write of values that compute no
    graph into a batch-norm buffer (``bn.running_mean.copy_(saved)``), an ``assert``, ``p.requires_grad = False``,
    ``w.data = <torch functions and tensor moves>`` (the values come without their history;
    ``p.grad = p.grad.float()`` too where no ``.grad`` can require grad),
    ``raise`` of a builtin exception, ``ptr += n`` on integers, or an
    assignment to plain names of a :func:`computes_no_graph` value (``classname =
    m.__class__.__name__``, ``n = m.kernel_size[0] * m.out_channels``) or of one that is the same
    in any grad mode (:func:`same_under_no_grad`)."""
    if isinstance(stmt, (ast.Pass, ast.Continue, ast.Break)) or is_neutral_statement(facts, stmt):
        return True
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
        call = stmt.value
        if _stores_same_objects(facts, call):
            return True
        # `nn.init.kaiming_normal_(m.weight)`: torch's initializers already run under no_grad;
        # `dist.all_reduce(p.grad)`: torch.distributed's collectives record no graph
        qual = facts.call_qualname(call) or ""
        if qual.startswith("torch.distributed.") and qual.rpartition(".")[2] in _COLLECTIVES:
            return True
        inert_args = all(computes_no_graph(facts, a) for a in call.args) and all(computes_no_graph(facts, k.value) for k in call.keywords)
        func = call.func
        if inert_args and isinstance(func, ast.Attribute) and func.attr.endswith("_") and isinstance(func.value, ast.Attribute) and func.value.attr in _BUFFERS:
            return True  # `bn.running_mean.copy_(saved)`: a buffer never requires grad
        return inert_args and qual.startswith("torch.nn.init.")
    if isinstance(stmt, ast.Assert):
        return computes_no_graph(facts, stmt.test) and computes_no_graph(facts, stmt.msg)
    if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None:
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        if _sets_requires_grad(facts, targets, stmt.value):
            return True
        if all(isinstance(t, ast.Attribute) and t.attr in ("data", "grad") for t in targets):
            # `w.bias.data = sign * torch.Tensor(mean)`: the attribute takes the values without
            # their history, in any grad mode; only a call that may run a forward could differ.
            # `p.grad = p.grad.half()` likewise, where no `.grad` can require grad.
            from gradfix.analysis.provenance import KEEPING_METHODS  # (provenance builds on this module)
            from gradfix.analysis.tensor_data import grads_may_require_grad

            if any(t.attr == "grad" for t in targets):
                # a `.grad` keeps the history of what it is given: only another `.grad` or
                # `.data`, moved or cast, and only where no `.grad` can require grad
                value = stmt.value
                while isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr in KEEPING_METHODS:
                    value = value.func.value
                if grads_may_require_grad(facts) or not (isinstance(value, ast.Attribute) and value.attr in ("grad", "data")):
                    return False
            return all(
                (facts.call_qualname(c) or "").startswith("torch.")
                or (isinstance(c.func, ast.Attribute) and facts.call_qualname(c) is None and c.func.attr in KEEPING_METHODS)
                for c in ast.walk(stmt.value) if isinstance(c, ast.Call)
            )
        plain = all(isinstance(n, ast.Name) for t in targets for n in _target_leaves(t))
        if not plain and len(targets) == 1 and isinstance(targets[0], ast.Subscript):
            # `mask[keep] = 1` into a tensor (or array) that needs no grad, of a value that needs
            # none either: the same values written in any grad mode
            target = targets[0]
            written = isinstance(stmt.value, ast.Constant) or same_under_no_grad(facts, stmt.value)
            index = computes_no_graph(facts, target.slice) or same_under_no_grad(facts, target.slice)
            return written and index and same_under_no_grad(facts, target.value)
        return plain and (computes_no_graph(facts, stmt.value) or same_under_no_grad(facts, stmt.value))
    if isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name):
        return integer_valued(facts, stmt.target) and integer_valued(facts, stmt.value)  # `ptr += n`
    if isinstance(stmt, ast.Raise):  # `raise ValueError(f"unknown {name}")`
        return stmt.cause is None and (stmt.exc is None or _builtin_exception(facts, stmt.exc))
    return False


def _builtin_exception(facts, exc: ast.expr) -> bool:
    """``ValueError``, ``KeyError(f"..{k}")``: a builtin exception class (or one built from
    values that compute no graph)."""
    if isinstance(exc, ast.Call):
        if not all(computes_no_graph(facts, a) for a in (*exc.args, *(k.value for k in exc.keywords))):
            return False
        exc = exc.func
    if not isinstance(exc, ast.Name) or not is_builtin(facts, exc.id, exc):
        return False
    found = getattr(builtins, exc.id, None)
    return isinstance(found, type) and issubclass(found, BaseException)


# torch.distributed's collectives: in place, not differentiable (torch.distributed.nn has the
# differentiable ones), so they do the same with grad mode on or off (pinned in
# tests/facts/test_gf304_facts.py).
_COLLECTIVES = frozenset("all_reduce broadcast reduce all_gather reduce_scatter all_to_all barrier".split())

# torch functions that are not tensor maths: they change or read the grad mode, differentiate, or
# leave the process.
_NOT_UPDATE_MATHS = re.compile(r"^torch\.(autograd|enable_grad|no_grad|inference_mode|set_grad_enabled|save|load|jit|compile)\b")
_NOT_UPDATE_BUILTINS = frozenset("exec eval compile open input __import__ setattr delattr globals vars breakpoint".split())
_GRAPH_METHODS = frozenset("backward requires_grad_ retain_grad register_hook".split())


def _torch_maths(qual: str) -> bool:
    """A torch function or class that neither changes the grad mode, differentiates, saves,
    loads nor compiles."""
    return qual.startswith("torch.") and not _NOT_UPDATE_MATHS.match(qual)


def tensor_function(qual: str) -> bool:
    """``qual`` names a torch function that computes on tensors (``torch.cat``,
    ``torch.nn.functional.softmax``): :func:`_torch_maths`, and not a class (``torch.nn.Linear``:
    building a module)."""
    return _torch_maths(qual) and not qual.rpartition(".")[2][:1].isupper()


def updates_optimizer_state(facts, stmt: ast.stmt) -> bool:
    """A simple statement of an optimizer's update loop
    (:func:`~gradfix.analysis.vocabulary.parameter_update_loop`) or of its ``step()``
    (:func:`~gradfix.analysis.vocabulary.optimizer_step`) that may run under ``no_grad``
    with the same effect, by torch.optim's own convention (its ``step()`` runs the whole update
    under ``no_grad``): it binds names, items (``state['step'] += 1``) or ``.data``, and calls
    only torch functions (not ``torch.autograd``), methods of the tensors and state it works on
    (not ``backward``, hooks, ``requires_grad_``), builtins and ``math``/``numpy``/``copy``
    (a tensor's deepcopy does not depend on the grad mode), never a
    function or method gradfix cannot see into (a ``closure()``, ``self._helper(p)``)."""
    from gradfix.analysis.vocabulary import optimizer_step, parameter_update_loop

    if not isinstance(stmt, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr, ast.Raise, ast.Assert)):
        return False
    if parameter_update_loop(facts, stmt) is None and optimizer_step(facts, stmt) is None:
        return False
    targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target] if isinstance(stmt, (ast.AugAssign, ast.AnnAssign)) else []
    if not all(_update_target(t) for target in targets for t in _target_leaves(target)):
        return False
    return update_maths(facts, stmt)


def _update_target(target: ast.AST) -> bool:
    return isinstance(target, (ast.Name, ast.Subscript)) or isinstance(target, ast.Attribute) and target.attr == "data"


def update_maths(facts, node: ast.AST, seen: frozenset = frozenset()) -> bool:
    """Every call in ``node`` is one an optimizer's update may run under ``no_grad`` (see
    :func:`updates_optimizer_state`)."""
    from gradfix.analysis.vocabulary import optimizer_state

    for sub in ast.walk(node):
        if isinstance(sub, (ast.Lambda, ast.Yield, ast.YieldFrom, ast.Await, ast.NamedExpr)):
            return False
        if not isinstance(sub, ast.Call):
            continue
        func = sub.func
        qual = facts.qualname(func) or ""
        if _update_helper(facts, sub, seen):
            continue
        if qual:
            if qual.startswith(("math.", "numpy.", "copy.")) or _torch_maths(qual):
                continue
            return False
        if isinstance(func, ast.Name):
            if is_builtin(facts, func.id, func) and func.id not in _NOT_UPDATE_BUILTINS and hasattr(builtins, func.id):
                continue
            return False
        if not isinstance(func, ast.Attribute) or func.attr in _GRAPH_METHODS:
            return False
        root = func.value
        while isinstance(root, (ast.Attribute, ast.Subscript, ast.Call)):
            root = root.func if isinstance(root, ast.Call) else root.value
        if isinstance(root, ast.Name) and root.id == "self" and not optimizer_state(facts, func.value):
            return False  # `self._helper(p)`, `self.base_optimizer.step()`: code gradfix does not see
    return True


def _update_helper(facts, call: ast.Call, seen: frozenset) -> bool:
    """``call`` runs one def of this file (``self._rms(p.data)``, ``_matrix_power(m, -1)``)
    whose body is itself update maths: it binds only names, items and ``.data``, and calls only
    what :func:`update_maths` accepts (helpers of helpers too; a recursive one does not count)."""
    from gradfix.analysis.calls import callee

    target = callee(facts, call)
    if target is None or target in seen:
        return False
    for node in ast.walk(target):
        if node is not target and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            return False
        if isinstance(node, (ast.Global, ast.Nonlocal, ast.Delete, ast.With, ast.AsyncWith, ast.Try, ast.Import, ast.ImportFrom)):
            return False
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if not all(_update_target(t) for target_ in targets for t in _target_leaves(target_)):
                return False
    return all(update_maths(facts, stmt, seen | {target}) for stmt in target.body)


_CONTAINER_ADDS = frozenset("append appendleft extend insert add".split())


def _stores_same_objects(facts, call: ast.Call) -> bool:
    """``convs.append(m.weight.data)``: a container keeps the objects it is given, and
    :func:`is_inert` arguments (names, attributes, constants) are the same objects under any
    grad mode; a value :func:`same_under_no_grad` (``int(torch.sum(mask))`` of a mask built
    from ``.data``) is the same value."""
    func = call.func
    return (
        isinstance(func, ast.Attribute)
        and func.attr in _CONTAINER_ADDS
        and not facts.qualname(func)
        and is_inert(facts, func.value)
        and all(is_inert(facts, a) and not isinstance(a, ast.Call) or same_under_no_grad(facts, a) for a in call.args)
        and not call.keywords
    )


def _sets_requires_grad(facts, targets, value) -> bool:
    """``p.requires_grad = False`` (a literal flag): a flag on the tensor, not an operation
    autograd records, so it has the same effect under ``no_grad`` (pinned in
    tests/facts/test_gf304_facts.py)."""
    return (
        isinstance(value, ast.Constant)
        and isinstance(value.value, bool)
        and all(isinstance(t, ast.Attribute) and t.attr == "requires_grad" and computes_no_graph(facts, t.value) for t in targets)
    )


def builds_torch_module(facts, stmt: ast.stmt) -> bool:
    """``self.fc = nn.Linear(n, m)``, ``self.bn = nn.BatchNorm1d(n)``: an assignment to names or
    attributes of a ``torch.nn`` class built from arguments that compute no graph. Built under
    ``no_grad`` or not, it is the same module: its parameters are new leaves that require grad
    (pinned in tests/facts/test_gf304_facts.py)."""
    if not isinstance(stmt, ast.Assign) or not isinstance(stmt.value, ast.Call):
        return False
    if not all(isinstance(n, (ast.Name, ast.Attribute)) for t in stmt.targets for n in _target_leaves(t)):
        return False
    call = stmt.value
    module, _, name = (facts.call_qualname(call) or "").rpartition(".")
    if not (module == "torch.nn" or module.startswith("torch.nn.modules")) or not name[:1].isupper():
        return False
    return all(computes_no_graph(facts, a) for a in (*call.args, *(k.value for k in call.keywords)))


def same_under_no_grad(facts, expr: ast.AST) -> bool:
    """A value that is the same whether built under ``no_grad`` or not, so
    it may be computed inside the block and read after it: integer arithmetic
    (:func:`integer_valued`), or a tensor that needs no grad by proof
    (:func:`~gradfix.analysis.provenance.origin`): a fresh tensor constructor without
    ``requires_grad=`` (``torch.randn(2, 3)``: no history either way, pinned in
    tests/facts/test_gf304_facts.py), a ``.data`` or ``.detach()`` alias, or what torch
    functions and tensor methods compute from those alone (``torch.cumsum(w.data, 0)``)."""
    from gradfix.analysis.provenance import PROVEN, origin

    if integer_valued(facts, expr):
        return True
    found = origin(facts, expr)
    return found is not None and found.kind in PROVEN


_INT_METHODS = frozenset("numel nelement dim ndimension".split())
# torch functions that return a Python int
_INT_FUNCTIONS = frozenset(
    {"torch.distributed.get_world_size", "torch.distributed.get_rank", "torch.cuda.device_count", "torch.cuda.current_device"}
)
_INT_OPS = (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod)


def integer_valued(facts, expr: ast.AST, seen: frozenset = frozenset()) -> bool:
    """``expr`` is surely a Python ``int``: an int literal, ``t.numel()``, ``t.dim()``,
    ``t.size(i)``, ``t.shape[i]``, ``len(..)``, ``int(..)`` of what :func:`computes_no_graph`,
    ``dist.get_world_size()`` and the other :data:`_INT_FUNCTIONS`,
    ``+ - * // %`` of those, or a local name every
    binding of which in its function is one (``ptr = 0`` ... ``ptr += num_w``: a weight loader's
    offset). Not a parameter (a caller may pass a tensor)."""
    if isinstance(expr, ast.Constant):
        return type(expr.value) is int
    if isinstance(expr, ast.BinOp):
        return isinstance(expr.op, _INT_OPS) and integer_valued(facts, expr.left, seen) and integer_valued(facts, expr.right, seen)
    if isinstance(expr, ast.UnaryOp):
        return isinstance(expr.op, (ast.USub, ast.UAdd)) and integer_valued(facts, expr.operand, seen)
    if isinstance(expr, ast.Call):
        func = expr.func
        if isinstance(func, ast.Name) and func.id == "int":  # `int(np.prod(p.size()))`
            return is_builtin(facts, "int", func) and all(computes_no_graph(facts, a) for a in expr.args)
        if isinstance(func, ast.Name):
            return func.id == "len" and is_builtin(facts, "len", func)
        if facts.qualname(func) in _INT_FUNCTIONS:
            return True
        if isinstance(func, ast.Attribute) and func.attr in _INT_METHODS:
            return not expr.args and not expr.keywords
        if isinstance(func, ast.Attribute) and func.attr == "size":
            return len(expr.args) == 1 and not expr.keywords and integer_valued(facts, expr.args[0], seen)
        return False
    if isinstance(expr, ast.Subscript):
        return isinstance(expr.value, ast.Attribute) and expr.value.attr == "shape" and integer_valued(facts, expr.slice, seen)
    if isinstance(expr, ast.Name):
        return _integer_name(facts, expr, seen)
    return False


def _integer_name(facts, name: ast.Name, seen: frozenset) -> bool:
    func = facts.function_of.get(name)
    if name.id in seen or isinstance(func, ast.Lambda):
        return name.id in seen
    if func is None and name.id in facts.declared_global:
        return False  # a script's counter (`layer_id = 0` ... `layer_id += 1`), unless a def rebinds it
    if func is not None and name.id in parameter_names(func):
        return False
    seen = seen | {name.id}
    bound = False
    stores = facts.memo(("regions.stores", id(func)), lambda: _stores_by_name(func or facts.tree))
    for node in stores.get(name.id, ()):
        binder = facts.parents.get(node)
        if isinstance(binder, ast.Tuple) and isinstance(facts.parents.get(binder), ast.Assign):
            ok = _sizes(facts.parents[binder].value)  # `N, T = x.size()`
        elif isinstance(binder, ast.Assign) and node in binder.targets:
            ok = integer_valued(facts, binder.value, seen)
        elif isinstance(binder, ast.AugAssign):
            ok = integer_valued(facts, binder.value, seen)
        else:
            ok = False  # a loop target, an unpacking, `with .. as`, a nested function's local
        if not ok or facts.function_of.get(node) is not func:
            return False
        bound = True
    return bound


def _stores_by_name(root: ast.AST) -> dict[str, list[ast.Name]]:
    found: dict[str, list[ast.Name]] = {}
    for node in ast.walk(root):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            found.setdefault(node.id, []).append(node)
    return found


def _sizes(value: ast.AST) -> bool:
    """``x.size()`` / ``x.shape``: a tuple of ints."""
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "size":
        return not value.args and not value.keywords
    return isinstance(value, ast.Attribute) and value.attr == "shape"


def header_records_no_graph(facts, stmt: ast.stmt) -> bool:
    """The header of an ``if``/``for``/``while`` (its test or iterable) computes no graph
    (``isinstance(m, nn.Linear)``, ``model.parameters()``, ``zip(a.parameters(), b.parameters())``)."""
    if isinstance(stmt, (ast.If, ast.While)):
        return computes_no_graph(facts, stmt.test)
    if isinstance(stmt, ast.For):
        return computes_no_graph(facts, stmt.iter) and all(isinstance(n, ast.Name) for n in _target_leaves(stmt.target))
    return False


def header_updates_optimizer_state(facts, stmt: ast.stmt) -> bool:
    """The header of an ``if``/``for``/``while`` in an optimizer's update loop or ``step()`` (or
    that loop's own header) that computes only update maths (:func:`update_maths`):
    ``if torch.isfinite(grad).all():``, ``for p, buf in zip(group['params'], bufs):``."""
    from gradfix.analysis.vocabulary import optimizer_step, parameter_update_loop

    if isinstance(stmt, (ast.If, ast.While)):
        header = stmt.test
    elif isinstance(stmt, ast.For):
        if not all(isinstance(n, ast.Name) for n in _target_leaves(stmt.target)):
            return False
        header = stmt.iter
    else:
        return False
    inside = (
        parameter_update_loop(facts, stmt) is not None
        or optimizer_step(facts, stmt) is not None
        or isinstance(stmt, ast.For) and parameter_update_loop(facts, stmt.body[0]) is stmt
    )
    return inside and update_maths(facts, header)


def _target_leaves(target: ast.AST) -> list[ast.AST]:
    if isinstance(target, (ast.Tuple, ast.List)):
        return [leaf for e in target.elts for leaf in _target_leaves(e)]
    if isinstance(target, ast.Starred):
        return _target_leaves(target.value)
    return [target]
