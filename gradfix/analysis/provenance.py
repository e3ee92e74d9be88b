"""Where a tensor comes from, within one function: the one answer to "may this value carry a graph?".

:func:`origin` says what an expression evaluates to: a **fresh** tensor (``torch.zeros(..)``,
``torch.FloatTensor(..)``, ``t.new_zeros(..)``), a **data** alias (``h.data``), a **detached**
copy (``h.detach()``, a legacy ``Variable(..)`` result), a **batch** a ``for`` loop takes from a
data loader (needs no grad by assumption, not by proof), or None: unknown, it may carry a graph
(a parameter, ``model.init_hidden()``, any call gradfix does not know). Conversions and views
(``.cuda()``, ``.float()``, ``.view(..)``) and in-place fills with constants keep the origin.

A name is followed to the assignments that may reach the point where it is read
(:class:`ReachingDefinitions`: a forward walk over the function's statements, branches joined,
loops iterated to a fixed point, ``try`` handlers seeing every binding of the body). The walk is
conservative: a parameter, a global or free name, a name declared ``global``/``nonlocal`` (here
or in a nested function), bound by ``with .. as``, ``import``, ``except .. as``, ``def``, a
``match`` pattern or an unpacking of an unknown value, is unknown; ``x += v`` keeps an origin only
when ``v`` has one too; attribute and subscript targets (``self.h = ..``) are never followed.
A ``def``/``class`` statement binds itself (kind ``def``: no tensor's origin, but
:mod:`gradfix.analysis.calls` reads it to tell which def a call runs).

:func:`grad_free_operand` asks the same walk with the conventions of optimizer code (an
argument, a global, ``group['lr']`` are hyperparameters; another ``.grad`` needs no grad): the
operands of an update written to a ``.grad``.

:func:`sole_holder` answers the second question a rewrite that drops ``Variable(x)`` asks:
``Variable(x)`` returns a *new* detached alias, ``x`` is the object itself, and the two differ
only if something can see both. It holds when nothing in the function can make the object
require grad or hand it elsewhere (every other read of that value is a method call that is not
``requires_grad_``, an in-place update with constants or grad-free operands, an attribute read,
an index, an operand, an argument of a ``torch`` function or ``print``/``len``/``isinstance``),
and ``x`` is not read again after the call (or is rebound by it: ``x = Variable(x)``).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Iterable

from gradfix.analysis.vocabulary import INTEGER_METHODS, VIEW_METHODS, autograd_unaware_call
from gradfix.facts import FileFacts, dotted_name, parameter_names

VARIABLE = "torch.autograd.Variable"

# Torch functions that build a new tensor that needs no grad (pinned in
# tests/facts/test_gf402_facts.py); those that also take ``requires_grad=`` are marked True.
CONSTRUCTORS = {
    **dict.fromkeys(
        "zeros ones empty full rand randn randint randperm arange range linspace logspace eye tensor "
        "zeros_like ones_like empty_like full_like rand_like randn_like".split(),
        True,
    ),
    **dict.fromkeys(
        "from_numpy Tensor FloatTensor DoubleTensor HalfTensor LongTensor IntTensor ShortTensor ByteTensor "
        "CharTensor BoolTensor".split(),
        False,
    ),
}
# Tensor methods that build a new tensor needing no grad, whatever they are called on.
NEW_METHODS = {**dict.fromkeys("new_zeros new_ones new_full new_empty new_tensor".split(), True), "new": False}
# Methods that keep a tensor that needs no grad that way (conversions, views, in-place fills).
KEEPING_METHODS = frozenset(
    "cuda cpu to float double half long int short byte char bool type contiguous view reshape transpose "
    "permute t squeeze unsqueeze squeeze_ unsqueeze_ expand repeat flatten clone detach zero_ normal_ "
    "uniform_ fill_ pin_memory resize_ "
    "random_ exponential_ geometric_ cauchy_ log_normal_ bernoulli_ "  # in-place sampling (numbers only)
    # the other tensor lends only its shape or type
    "expand_as view_as reshape_as type_as resize_as_".split()
)
# Names a ``for`` loop takes batches from (``train_loader``, torchtext's ``train_iter``, a
# split's data, dataset or batch generator handed in as a parameter: ``train_data``,
# ``valid_set``, ``test_ds``, ``val_gen``).
LOADER_NAME = re.compile(
    r"loader|_iter$|^iter_|batches$|^(train|val|valid|validation|test|eval)_?(data|set|dataset|ds|gen|generator)$|^dataset$",
    re.IGNORECASE,
)
_LOADER_WRAPPERS = ("enumerate", "tqdm", "iter", "zip")
# Packages whose dataset classes read samples from files: grad-free tensors, like a loader's
_DATASET_PACKAGES = ("torchvision.datasets.", "torchaudio.datasets.")

FRESH, DATA, DETACHED, COMPUTED, INTEGER, BATCH = "fresh", "data", "detached", "computed", "integer", "batch"
PROVEN = frozenset({FRESH, DATA, DETACHED, COMPUTED, INTEGER})  # surely needs no grad; BATCH is an assumption
# A number by convention (see grad_free_operand); never given by origin().
ASSUMED = "assumed"
# Names of parameters, buffers and gradients by the usual conventions (`weight`, `p`, `running_mean`).
PARAMETER_NAME = re.compile(r"param|weight|bias|grad|theta|running_(mean|var)|^(p|w|W|b)\d*$", re.IGNORECASE)
# ... unless a word of the name makes it a setting: `max_grad_norm`, `weight_decay`, `grad_clip`,
# `center_loss_weight`, `grad_scale`
_SETTING_WORD = re.compile(r"(^|_)(max|min|clip|norm|decay|lr|rate|eps|thresh|threshold|coef|coeff|factor|momentum|loss|scale)(_|$)", re.IGNORECASE)


def _parameter_like(name: str) -> bool:
    """``name`` may hold a tensor that requires grad (``weight``, ``p``, ``grads``), not a
    setting named after one (``max_grad_norm``, ``weight_decay``)."""
    return bool(PARAMETER_NAME.search(name)) and not _SETTING_WORD.search(name)
# Builtins that give a plain number (or one of the values they are given).
_NUMBER_BUILTINS = frozenset("float int min max abs round len sum pow".split())
# Methods whose result may require grad whatever it is computed from.
_GRAD_METHODS = frozenset("requires_grad_ retain_grad register_hook".split())


@dataclass(frozen=True)
class Origin:
    """What an expression evaluates to: ``kind`` (one of the constants above) and, when the
    value is held by a local name, that name's read (``holder``) and where it was bound."""

    kind: str
    holder: ast.Name | ast.Attribute | None = None  # a local or global name, or `self.x`
    line: int | None = None


# -- reaching definitions --------------------------------------------------------------------------
@dataclass(frozen=True)
class Definition:
    """One binding of a name: ``value`` is what it binds (None: unknown); ``kind`` is
    ``assign`` (``value`` is the expression), ``loop`` (``value`` is the ``for`` iterable; the
    name is one of its elements), ``aug`` (``x += value``: ``node`` is the statement), ``def``
    (``node`` is the ``def``/``class`` statement: no tensor) or ``unknown``."""

    node: ast.AST
    kind: str
    value: ast.AST | None = None


UNKNOWN = Definition(ast.Pass(), "unknown")  # a parameter, a global, anything not followed
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


class ReachingDefinitions:
    """For every read of a local name in one function (None: module level), the definitions
    that may reach it, and, with ``reads``, the reads of the same name that may have come just
    before it (what :func:`sole_holder` asks; tracking them makes every read change the state,
    so the others leave it out)."""

    def __init__(self, facts: FileFacts, func, reads: bool = False):
        self.facts = facts
        self.func = func
        self.track_reads = reads
        self.reaching: dict[ast.Name, frozenset[Definition]] = {}
        # What each read's name is bound to, ``unstable`` or not (which def a call runs asks
        # only what the name holds, not whether the object changed), and the state at the end.
        self.bound: dict[ast.Name, frozenset[Definition]] = {}
        self.exit: dict[str, frozenset[Definition]] | None = None
        self.unbound: set[ast.Name] = set()  # reads that no path to them binds the name for
        # At module level, the statements that call a def of the file, each with the state it
        # runs in: the code of that def (and of what it calls) runs then, before the module's end.
        self.entries: list[tuple[ast.stmt, dict]] = []
        self.previous_reads: dict[ast.Name, frozenset[ast.Name]] = {}
        self.augmented: dict[ast.AugAssign, frozenset[Definition]] = {}
        self._loops: list[tuple[list, list]] = []
        self._elements: dict[tuple[int, int], ast.Subscript] = {}
        self._reads: dict[ast.AST, list[ast.AST]] = {}  # _evaluated of each node read (a loop reads it again)
        self.unstable = _unstable_names(facts, func)
        body = facts.tree.body if func is None else func.body
        end = self._block(body, {})
        self.exit = None if end is None else {name: defs for name, (defs, _) in end.items()}

    # state: name -> (definitions, reads since the last definition); a missing name is unbound
    # here (a parameter, a global, a free name): unknown.
    def _block(self, body: list[ast.stmt], state):
        for stmt in body:
            if state is None:
                return None  # unreachable after return/raise/break/continue
            if self.func is None and _calls_a_def(stmt, state):
                self.entries.append((stmt, {name: defs for name, (defs, _) in state.items()}))
            state = self._statement(stmt, state)
        return state

    def _statement(self, stmt: ast.stmt, state):
        state = dict(state)
        if isinstance(stmt, ast.Assign):
            self._read(stmt.value, state)
            for target in stmt.targets:
                self._assign(target, stmt.value, state)
        elif isinstance(stmt, ast.AnnAssign):
            if stmt.value is not None:
                self._read(stmt.value, state)
                self._assign(stmt.target, stmt.value, state)
        elif isinstance(stmt, ast.AugAssign):
            self._read(stmt.value, state)
            if isinstance(stmt.target, ast.Name):
                self.augmented[stmt] = self._definitions(stmt.target.id, state)
                self._define(stmt.target.id, Definition(stmt, "aug", stmt.value), state)
            else:
                self._read(stmt.target, state)
        elif isinstance(stmt, (ast.Expr, ast.Return, ast.Raise, ast.Assert, ast.Delete)):
            for child in ast.iter_child_nodes(stmt):
                self._read(child, state)
            if isinstance(stmt, ast.Delete):
                for target in stmt.targets:
                    for name in _stored(target):
                        self._define(name, UNKNOWN, state)
            if isinstance(stmt, (ast.Return, ast.Raise)):
                return None
        elif isinstance(stmt, ast.If):
            self._read(stmt.test, state)
            return _join([self._block(stmt.body, state), self._block(stmt.orelse, state)])
        elif isinstance(stmt, (ast.For, ast.AsyncFor, ast.While)):
            return self._loop(stmt, state)
        elif isinstance(stmt, (ast.With, ast.AsyncWith)):
            for item in stmt.items:
                self._read(item.context_expr, state)
                if item.optional_vars is not None:
                    for name in _stored(item.optional_vars):
                        self._define(name, UNKNOWN, state)
            return self._block(stmt.body, state)
        elif isinstance(stmt, ast.Try) or type(stmt).__name__ == "TryStar":
            after = self._block(stmt.body, state)
            bound = {n for s in stmt.body for node in ast.walk(s) for n in _stored(node)}
            entry = _join([state, after])
            if entry is not None:
                for name in bound:  # a handler may run after any statement of the body
                    defs, reads = entry.get(name, (frozenset({UNKNOWN}), frozenset()))
                    entry[name] = (defs | {UNKNOWN}, reads)
            ends = [self._block(stmt.orelse, after) if after is not None else None]
            for handler in stmt.handlers:
                handler_state = dict(entry) if entry is not None else None
                if handler_state is not None and handler.name:
                    self._define(handler.name, UNKNOWN, handler_state)
                ends.append(self._block(handler.body, handler_state))
            joined = _join(ends)
            return self._block(stmt.finalbody, joined if joined is not None else entry) if stmt.finalbody else joined
        elif isinstance(stmt, (ast.Continue, ast.Break)):
            if self._loops:
                self._loops[-1][0 if isinstance(stmt, ast.Continue) else 1].append(state)
            return None
        elif isinstance(stmt, (ast.Pass, ast.Global, ast.Nonlocal)):
            pass
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            for child in ast.iter_child_nodes(stmt):  # decorators, defaults, bases
                if isinstance(child, ast.expr):
                    self._read(child, state)
            self._define(stmt.name, Definition(stmt, "def"), state)
        else:  # def, class, import, match, ...: what they bind is unknown
            for child in ast.iter_child_nodes(stmt):
                if isinstance(child, ast.expr):
                    self._read(child, state)
            for name in _bound_by(stmt):
                self._define(name, UNKNOWN, state)
            if hasattr(stmt, "cases"):
                ends = [state]
                for case in stmt.cases:
                    case_state = dict(state)
                    for node in ast.walk(case.pattern):
                        name = getattr(node, "name", None)
                        if isinstance(name, str):
                            self._define(name, UNKNOWN, case_state)
                    ends.append(self._block(case.body, case_state))
                return _join(ends)
        return state

    def _loop(self, stmt, state):
        if isinstance(stmt, ast.While):
            self._read(stmt.test, state)
        else:
            self._read(stmt.iter, state)
        entry = head = state
        breaks: list = []
        for _ in range(10):
            self._loops.append(([], []))
            body_state = dict(head)
            if isinstance(stmt, ast.While):
                self._read(stmt.test, body_state)
            else:
                self._assign(stmt.target, None, body_state, loop=stmt)
            end = self._block(stmt.body, body_state)
            continues, breaks = self._loops.pop()
            new_head = _join([entry, end, *continues])
            if new_head == head:
                break
            head = new_head
        else:  # no fixed point: everything the loop binds is unknown
            head = dict(entry)
            for node in ast.walk(stmt):
                for name in _stored(node):
                    self._define(name, UNKNOWN, head)
        return _join([self._block(stmt.orelse, head), *breaks])

    # -- bindings and reads ----------------------------------------------------------------
    def _assign(self, target, value, state, loop=None) -> None:
        if isinstance(target, ast.Name):
            if loop is not None:
                definition = Definition(target, "loop", loop.iter)
            elif value is not None:
                definition = Definition(target, "assign", value)
            else:
                definition = UNKNOWN
            self._define(target.id, definition, state)
        elif isinstance(target, (ast.Tuple, ast.List)):
            paired = (
                isinstance(value, (ast.Tuple, ast.List))
                and len(value.elts) == len(target.elts)
                and not any(isinstance(e, ast.Starred) for e in (*target.elts, *value.elts))
            )
            for i, elt in enumerate(target.elts):
                if paired:
                    self._assign(elt, value.elts[i], state)
                elif loop is not None:
                    self._assign(elt, None, state, loop=loop)
                else:  # `x, y = batch`: an element of the value (one node per element, kept)
                    element = None
                    if value is not None and not isinstance(elt, ast.Starred):
                        element = self._elements.get((id(value), i))
                        if element is None:
                            element = ast.copy_location(ast.Subscript(value=value, slice=ast.Constant(i), ctx=ast.Load()), value)
                            self._elements[(id(value), i)] = element
                    self._assign(elt.value if isinstance(elt, ast.Starred) else elt, element, state)
        elif isinstance(target, ast.Starred):
            self._assign(target.value, None, state)
        else:  # `a.b = v`, `a[i] = v`: read `a`, bind nothing
            self._read(target, state)

    def _define(self, name: str, definition: Definition, state) -> None:
        state[name] = (frozenset({definition}), frozenset())

    def _definitions(self, name: str, state) -> frozenset[Definition]:
        if name in self.unstable or name not in state:
            return frozenset({UNKNOWN})
        return state[name][0]

    def _read(self, node: ast.AST | None, state) -> None:
        """Record the reads in ``node`` (evaluated here), in source order; walrus targets bind."""
        if node is None:
            return
        reads = self._reads.get(node)
        if reads is None:
            reads = self._reads[node] = _evaluated(node)
        for child in reads:
            if isinstance(child, ast.NamedExpr):
                self._read(child.value, state)
                self._define(child.target.id, Definition(child.target, "assign", child.value), state)
            elif isinstance(child, ast.Name) and isinstance(child.ctx, ast.Load):
                self.reaching[child] = self.reaching.get(child, frozenset()) | self._definitions(child.id, state)
                bound = state[child.id][0] if child.id in state else frozenset({UNKNOWN})
                if child.id not in state:
                    self.unbound.add(child)
                self.bound[child] = self.bound.get(child, frozenset()) | bound
                if self.track_reads:
                    defs, reads = state.get(child.id, (frozenset({UNKNOWN}), frozenset()))
                    self.previous_reads[child] = self.previous_reads.get(child, frozenset()) | reads
                    state[child.id] = (defs, reads | {child})


def _evaluated(node: ast.AST) -> list[ast.AST]:
    """Names and walrus expressions that evaluating ``node`` reads, in source order, not
    inside lambdas, nested scopes or comprehensions (their reads happen later, or in a scope
    of their own: the rules treat a read there as the value escaping), but for the iterable of
    a comprehension's first ``for``, which Python evaluates at once, in the enclosing scope."""
    out: list[ast.AST] = []
    todo = [node]
    while todo:
        current = todo.pop()
        if isinstance(current, _COMPREHENSIONS):
            todo.append(current.generators[0].iter)
            continue
        if isinstance(current, _SCOPES):
            continue
        if isinstance(current, (ast.Name, ast.NamedExpr)):
            out.append(current)  # a walrus: its value is read by the caller, then it binds
            continue
        todo.extend(reversed(list(ast.iter_child_nodes(current))))
    return sorted(out, key=lambda n: (getattr(n, "lineno", 0), getattr(n, "col_offset", 0)))


def _calls_a_def(stmt: ast.stmt, state) -> bool:
    """``stmt`` itself (not the statements in its body) calls a name bound to a ``def``."""
    return any(
        isinstance(call.func, ast.Name)
        and call.func.id in state
        and any(d.kind == "def" and not isinstance(d.node, ast.ClassDef) for d in state[call.func.id][0])
        for call in _own_calls(stmt)
    )


def _join(states: Iterable):
    live = [s for s in states if s is not None]
    if not live:
        return None
    first, rest = live[0], live[1:]
    out = {}
    for name in {n for s in live for n in s}:
        value = first.get(name)
        if value is not None and all(s.get(name) is value for s in rest):
            out[name] = value  # the same binding on every path (most names, most joins)
            continue
        defs, reads = frozenset(), frozenset()
        for s in live:
            d, r = s.get(name, (frozenset({UNKNOWN}), frozenset()))
            defs, reads = defs | d, reads | r
        out[name] = (defs, reads)
    return out


def _stored(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
        return [node.id]
    if isinstance(node, (ast.Tuple, ast.List, ast.Starred)):
        return [n for child in ast.iter_child_nodes(node) for n in _stored(child)]
    return []


def _bound_by(stmt: ast.stmt) -> list[str]:
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [stmt.name]
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        return [(a.asname or a.name).split(".")[0] for a in stmt.names]
    return [n.id for n in ast.walk(stmt) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)]


def _unstable_names(facts: FileFacts, func) -> frozenset[str]:
    """Names whose binding or object something else may reach between two statements:
    declared ``global``/``nonlocal`` in the function or in a function nested in it, or (at
    module level) declared ``global`` or read by a function of the file as the module's name
    (no function it lies in binds it)."""
    if func is not None:  # `global`/`nonlocal` statements (facts record them per scope)
        return frozenset(
            name
            for node, scope in facts.scope_of_node.items()
            if scope.globals and (node is func or func in facts.enclosing_functions(node))
            for name in scope.globals
        )
    out = set(facts.declared_global)
    # A name read in a function is the module's global when none of the functions it lies in
    # binds it (a name bound by an inner lambda or def is that function's own).
    owners_of: dict = {}
    for node, owner in facts.function_of.items():
        if owner is None or type(node) is not ast.Name:
            continue
        owners = owners_of.get(owner)
        if owners is None:
            scopes = (facts.scope_of_node[f] for f in (owner, *facts.enclosing_functions(owner)))
            owners = owners_of[owner] = [s.locals | set(s.imports) for s in scopes]
        if all(node.id not in own for own in owners):
            out.add(node.id)
    return frozenset(out)


def reaching_definitions(facts: FileFacts, func, reads: bool = False) -> ReachingDefinitions:
    """The :class:`ReachingDefinitions` of ``func`` (None: module level), once per file; with
    ``reads``, one that also knows which reads may come before each read."""
    return facts.memo(("provenance.reaching", func, reads), lambda: ReachingDefinitions(facts, func, reads))


# -- origins -----------------------------------------------------------------------------------
def constructor(facts: FileFacts, expr: ast.AST) -> bool | None:
    """For a call that builds a fresh tensor needing no grad: whether it takes
    ``requires_grad=`` (True/False); None for anything else. A call that already passes
    ``requires_grad`` or ``out=`` is not fresh."""
    if not isinstance(expr, ast.Call):
        return None
    if any(k.arg in ("requires_grad", "out") for k in expr.keywords):
        return None
    qual = facts.qualname(expr.func) or ""
    prefix, _, last = qual.rpartition(".")
    if prefix in ("torch", "torch.cuda") and last in CONSTRUCTORS:
        return CONSTRUCTORS[last] and prefix == "torch"
    if isinstance(expr.func, ast.Name) and not qual and legacy_classes(facts, expr.func):
        return False  # `Tensor = torch.cuda.FloatTensor if cuda else torch.FloatTensor`; `Tensor(n, 1)`
    if isinstance(expr.func, ast.Attribute) and qual == "" and expr.func.attr in NEW_METHODS:
        return NEW_METHODS[expr.func.attr]
    return None


# Integer and bool tensors (pinned in tests/facts/test_gf402_facts.py): only floating and
# complex tensors can require grad, so one of these carries no graph, whoever holds it.
_INTEGER_DTYPES = frozenset(f"torch.{n}" for n in "long int int64 int32 short int16 int8 uint8 bool".split())
_INTEGER_CLASSES = frozenset("LongTensor IntTensor ShortTensor ByteTensor CharTensor BoolTensor".split())
_INTEGER_CASTS = frozenset("long int short byte char bool".split())  # `x.long()`
# the views and moves of the vocabulary that keep the dtype (not the casts, nor `to`/`type`,
# which may take one; not those that give a tuple), copies and in-place fills
_DTYPE_KEEPING = (VIEW_METHODS - frozenset("to type type_as float double half bfloat16 long int bool unbind split chunk".split())) | frozenset(
    "clone detach pin_memory zero_ fill_ random_".split()
)


def integer_tensor(facts: FileFacts, expr: ast.AST, depth: int = 0) -> bool:
    """``expr`` is a tensor of an integer or bool dtype: ``x.long()``, ``torch.LongTensor(..)``,
    ``torch.zeros(n, dtype=torch.long)``, ``out.argmax(1)``, ``pred.eq(y)``, moved or viewed
    (``.cuda()``, ``.to(device)``), or a name every reaching assignment binds to one. Such a
    tensor can neither require grad nor carry a graph, and writes into it cannot give it one."""
    if depth > 8:
        return False
    if isinstance(expr, ast.Compare):
        return True  # `idx < lengths`: a bool tensor (or a bool), whatever its operands
    if isinstance(expr, ast.Name):
        func = facts.function_of.get(expr)
        if isinstance(func, ast.Lambda):
            return False
        definitions = reaching_definitions(facts, func).reaching.get(expr)
        return bool(definitions) and all(d.kind == "assign" and integer_tensor(facts, d.value, depth + 1) for d in definitions)
    if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id == "self":
        values = _self_attribute_values(facts, expr)  # `self.ctx`, every store of the class
        return bool(values) and all(integer_tensor(facts, v, depth + 1) for v in values)
    if not isinstance(expr, ast.Call):
        return False
    returned = _returned_values(facts, expr)  # `self._encode(ctx)`, a def of the file
    if returned is not None:
        return bool(returned) and all(integer_tensor(facts, v, depth + 1) for v in returned)
    dtype = next((k.value for k in expr.keywords if k.arg == "dtype"), None)
    qual = facts.call_qualname(expr) or ""
    prefix, _, last = qual.rpartition(".")
    if isinstance(expr.func, ast.Name) and not qual:
        return _integer_classes(facts, expr.func)  # `LongTensor = torch.cuda.LongTensor if cuda else ..`
    if prefix in ("torch", "torch.cuda"):
        if dtype is not None:
            return facts.qualname(dtype) in _INTEGER_DTYPES
        return last in _INTEGER_CLASSES or last in INTEGER_METHODS or last in ("randint", "randperm")
    if qual or not isinstance(expr.func, ast.Attribute):
        return False
    method, receiver = expr.func.attr, expr.func.value
    if dtype is not None:
        return method in ("to", "new_zeros", "new_ones", "new_full", "new_empty", "new_tensor") and facts.qualname(dtype) in _INTEGER_DTYPES
    if method in _INTEGER_CASTS:
        return not expr.args
    if method in INTEGER_METHODS:
        return True
    if method in ("to", "type") and expr.args:
        target = facts.qualname(expr.args[0]) or ""
        if target in _INTEGER_DTYPES or target.rpartition(".")[2] in _INTEGER_CLASSES:
            return True
        if not target and isinstance(expr.args[0], ast.Name) and _integer_classes(facts, expr.args[0]):
            return True  # `labels.type(LongTensor)`
        return method == "to" and _device(facts, expr.args[0]) and integer_tensor(facts, receiver, depth + 1)
    return method in _DTYPE_KEEPING and integer_tensor(facts, receiver, depth + 1)


def _integer_classes(facts: FileFacts, read: ast.Name) -> bool:
    """``read`` names legacy tensor classes (:func:`legacy_classes`), all of an integer dtype."""
    classes = legacy_classes(facts, read)
    return bool(classes) and all(c.rpartition(".")[2] in _INTEGER_CLASSES for c in classes)


def _returned_values(facts: FileFacts, call: ast.Call) -> list[ast.expr] | None:
    """What a def of the file that ``call`` runs returns, one expression per ``return`` of its
    own (empty when one returns nothing or it yields); None when ``call`` runs no such def."""
    from gradfix.analysis.calls import callee  # calls builds on this module
    from gradfix.analysis.statements import own_nodes

    func = callee(facts, call)
    if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None

    def compute() -> list[ast.expr]:
        nodes = own_nodes(func)
        if any(isinstance(n, (ast.Yield, ast.YieldFrom)) for n in nodes):
            return []
        returns = [n for n in nodes if isinstance(n, ast.Return)]
        return [r.value for r in returns] if returns and all(r.value is not None for r in returns) else []

    return facts.memo(("provenance.returned_values", id(func)), compute)


def _self_attribute_values(facts: FileFacts, node: ast.Attribute) -> list[ast.expr]:
    """What every store of ``self.<attr>`` in the class around ``node`` assigns (empty when
    there is none, other code may store it too, or one store is no plain ``self.x = value``:
    ``self.a, self.b = ..``, ``self.x += ..``, a loop target)."""
    cls = facts.parents.get(node)
    while cls is not None and not isinstance(cls, ast.ClassDef):
        cls = facts.parents.get(cls)
    if cls is None:
        return []
    stores, _ = facts.memo(("provenance.self_attribute", id(cls), node.attr), lambda: _self_attribute_uses(facts, cls, node.attr))
    values = []
    for store in stores or ():
        assign = facts.parents.get(store)
        if not (isinstance(assign, ast.Assign) and len(assign.targets) == 1 and assign.targets[0] is store):
            return []
        values.append(assign.value)
    return values


def _device(facts: FileFacts, expr: ast.AST) -> bool:
    """``expr`` names a device (``"cuda"``, ``device``, ``args.device``, ``torch.device(..)``),
    which moves a tensor and keeps its dtype."""
    if isinstance(expr, ast.Constant):
        return isinstance(expr.value, str)
    if isinstance(expr, ast.Call):
        return facts.call_qualname(expr) == "torch.device"
    name = dotted_name(expr)
    return name is not None and "device" in name.rpartition(".")[2].lower()


def legacy_classes(facts: FileFacts, read: ast.Name) -> frozenset[str]:
    """The legacy tensor classes (``torch.cuda.LongTensor``...) the name ``read`` may hold there,
    when every binding it may see is an assignment of one or a conditional choice between such
    classes (``Tensor = torch.cuda.FloatTensor if cuda else torch.FloatTensor``): the module's
    own bindings for a global, the ones reaching the read for a function's local alias; empty
    when anything else may bind it."""
    classes: set[str] = set()
    for value in bound_values(facts, read) or ():
        found = _legacy_class(facts, value)
        if not found:
            return frozenset()
        classes |= found
    return frozenset(classes)


def bound_values(facts: FileFacts, read: ast.Name) -> list[ast.expr]:
    """The values every binding that the name ``read`` may see assigns, when all of them are
    plain assignments: the module's own for a global read in a def (:func:`_module_alias_values`),
    the ones reaching the read for a local or in module-level code; empty when anything else may
    bind it."""
    scope = _alias_scope(facts, read)
    if scope is _ANY_SCOPE:
        return []
    if scope is not None or facts.function_of.get(read) is None:  # a local, or module-level code
        definitions = reaching_definitions(facts, scope).reaching.get(read)
        if definitions and all(d is not UNKNOWN and d.kind == "assign" for d in definitions):
            return [d.value for d in definitions]
    if scope is None:
        return facts.memo(("provenance.module_aliases", read.id), lambda: _module_alias_values(facts, read.id))
    return []


_ANY_SCOPE = object()


def _alias_scope(facts: FileFacts, read: ast.Name):
    """The function whose local ``read`` is (None: a global), or ``_ANY_SCOPE`` when it is a
    local of an enclosing function or of a lambda, which gradfix does not follow."""
    func = facts.function_of.get(read)
    for enclosing in facts.enclosing_functions(read):
        scope = facts.scope_of_node.get(enclosing)
        if scope is None or read.id in scope.globals:
            return None
        if read.id in scope.locals:
            return enclosing if enclosing is func and not isinstance(func, ast.Lambda) else _ANY_SCOPE
    return None


def _module_alias_values(facts: FileFacts, name: str) -> list[ast.expr]:
    """The values of the module-level assignments of ``name`` when they are all the module binds
    it with (no `for Tensor in ...`, `def Tensor`, `import ... as Tensor`); else empty."""
    from gradfix.analysis.calls import module_level_bindings  # calls builds on this module

    values = []
    for a in facts.nodes_of(ast.Assign):
        if not any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store) for t in a.targets for n in ast.walk(t)):
            continue
        func = facts.function_of.get(a)
        if func is None:
            values.append(a.value)
        elif name in facts.scope_of_node[func].globals or name not in facts.scope_of_node[func].locals:
            return []  # a function's `global Tensor` rebinding it
    return values if values and module_level_bindings(facts)[name] == len(values) else []


def _legacy_class(facts: FileFacts, value: ast.AST) -> frozenset[str]:
    """The legacy tensor classes ``value`` names (both branches of a conditional); empty when
    it may be anything else."""
    if isinstance(value, ast.IfExp):
        body, orelse = _legacy_class(facts, value.body), _legacy_class(facts, value.orelse)
        return body | orelse if body and orelse else frozenset()
    qual = facts.qualname(value) or ""
    prefix, _, last = qual.rpartition(".")
    return frozenset({qual}) if prefix in ("torch", "torch.cuda") and CONSTRUCTORS.get(last) is False else frozenset()


def origin(facts: FileFacts, expr: ast.AST) -> Origin | None:
    """What ``expr`` evaluates to (see the module docstring), or None: it may carry a graph."""
    return _origin(facts, expr, frozenset(), 0)


def grad_free_operand(facts: FileFacts, expr: ast.AST, owner: str | None = None) -> bool:
    """Whether ``expr``, an operand of an update written to a ``.grad`` (``p.grad.mul_(s)``),
    needs no grad by proof (what :func:`origin` proves) or by the conventions of optimizer code:
    an argument or a global, or an attribute or item of an object (``lr``, ``group['lr']``,
    ``scaler.loss_scale``), is a hyperparameter, and another ``.grad`` needs no grad (ask only
    where none can: :func:`~gradfix.analysis.tensor_data.grads_may_require_grad`). Never: an
    argument, global or attribute named like a parameter (``weight``, ``p``; not a setting named
    after one, ``max_grad_norm``, ``weight_decay``; a local such as
    ``param_norm = p.grad.data.norm()`` is followed to its binding), ``owner`` (the ``.grad``'s own tensor, ``p`` in
    ``p.grad.add_(wd, p)``) or anything rooted at it, a name bound by a loop."""
    found = _origin(facts, expr, frozenset(), 0, _Convention(owner))
    return found is not None and found.kind != BATCH


@dataclass(frozen=True)
class _Convention:
    """What :func:`grad_free_operand` assumes, asked before :func:`_origin` looks at a node."""

    owner: str | None

    def assumption(self, facts: FileFacts, expr: ast.AST):
        """An :class:`Origin` (or None, unknown) for ``expr`` by convention, or True: no
        convention applies, follow ``expr`` as :func:`origin` does."""
        if isinstance(expr, ast.Constant):
            return Origin(ASSUMED)
        if isinstance(expr, ast.Attribute) and expr.attr in ("data", "grad"):
            return Origin(DATA)
        if not isinstance(expr, (ast.Name, ast.Attribute, ast.Subscript)):
            return True
        root, last = expr, None
        while isinstance(root, (ast.Attribute, ast.Subscript)):
            if last is None and isinstance(root, ast.Attribute):
                last = root.attr
            root = root.value
        if _state_dict_call(root):
            return True  # `base.state_dict()[name]`: followed, a detached tensor
        if isinstance(root, ast.Name):
            if root.id == self.owner:
                return None
            if isinstance(expr, ast.Name):
                return True  # followed to its bindings; a parameter-like name is judged there
        if last is not None and _parameter_like(last):
            return None
        if isinstance(expr, ast.Subscript) and _origin(facts, expr.slice, frozenset(), 0, self) is None:
            return None
        # An attribute or an item of an object (`scaler.loss_scale`, `group['lr']`) is not what
        # built the object: by convention a number.
        return Origin(ASSUMED)


def _origin(facts: FileFacts, expr: ast.AST, seen: frozenset, depth: int, conv: _Convention | None = None) -> Origin | None:
    if depth > 24:
        return None
    if conv is not None:
        assumed = conv.assumption(facts, expr)
        if assumed is not True:
            return assumed
    if integer_tensor(facts, expr):
        return Origin(INTEGER)  # no graph, whoever else holds it
    if _plain_number(facts, expr):
        return Origin(COMPUTED)  # `0` (`total = 0` before `total += ...`), `mask.shape[0]`: no tensor
    node = expr
    while True:
        if node is not expr and integer_tensor(facts, node):
            return Origin(COMPUTED)  # `(idx < lengths).float()`: a cast of a tensor with no graph
        if constructor(facts, node) is not None:
            return Origin(FRESH)
        if isinstance(node, ast.Attribute) and node.attr == "data":
            return Origin(DATA)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "detach" and not node.args:
            return Origin(DETACHED)
        if isinstance(node, ast.Call) and facts.call_qualname(node) == VARIABLE:
            return _variable_result(facts, node, seen, depth, conv)
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in KEEPING_METHODS
            and not facts.qualname(node.func)  # a method, not `torch.transpose(..)`
        ):
            if node.func.attr in ("fill_", "bernoulli_") and not all(_number(facts, a) for a in node.args):
                return None  # a tensor fill value (or probability) may need grad
            if node.func.attr == "clone" and not node.args:
                # a copy: what the original is, but no one else holds it (`Variable(w.clone(),
                # requires_grad=True)` may become the copy itself)
                inner = _origin(facts, node.func.value, seen, depth + 1, conv)
                return Origin(inner.kind, None, inner.line) if inner is not None else None
            node = node.func.value
            continue
        if isinstance(node, ast.Call) and (handed := passed_through(facts, node)) is not None:
            node = handed  # `cuda(x, use_cuda)`: the helper gives `x` back, moved or not
            continue
        if isinstance(node, ast.Call) and node.args and (facts.call_qualname(node) or "").startswith("torch.nn.init."):
            node = node.args[0]  # `init.normal(torch.Tensor(n, 2))`: fills its argument in place, gives it back
            continue
        break
    if isinstance(node, ast.Name):
        return _name_origin(facts, node, seen, depth, conv)
    if _transformed_image(facts, node):
        return Origin(FRESH)  # `preprocess(Image.open(path))`: a new tensor from an image file
    if _dataset_item(facts, node):
        return Origin(BATCH)
    if isinstance(node, ast.Attribute) and conv is None and isinstance(node.value, ast.Name) and node.value.id == "self":
        return _self_attribute_origin(facts, node, seen, depth)
    if isinstance(node, ast.Subscript) and _state_dict_call(node.value):
        return Origin(DETACHED)  # `model.state_dict()[name]`: a detached alias of the tensor
    if (
        isinstance(node, ast.Subscript) and isinstance(node.value, ast.Call)
        and isinstance(node.slice, ast.Constant) and type(node.slice.value) is int
        and (returned := _returned_origin(facts, node.value, seen, depth, node.slice.value)) is not None
    ):
        return returned  # `img, orig, dim = prep_image(frame)`: that element of what the def returns
    if isinstance(node, (ast.Subscript, ast.Attribute)):
        inner = _origin(facts, node.value, seen, depth + 1, conv)
        if inner is None:
            return None
        if isinstance(node, ast.Attribute):  # `batch.text` (torchtext): only a batch has fields
            return inner if inner.kind == BATCH else None
        return Origin(inner.kind, None, inner.line)  # an index is a view: another object
    if isinstance(node, (ast.Tuple, ast.List)) and node.elts:
        parts = [_origin(facts, e, seen, depth + 1, conv) for e in node.elts]
        return _combine(parts)
    if isinstance(node, (ast.ListComp, ast.GeneratorExp)) and len(node.generators) == 1:
        return _origin(facts, node.elt, seen, depth + 1, conv)  # `[d.cuda() for d in data]`: its elements'
    if isinstance(node, ast.IfExp):  # `x.cuda() if cuda else x`: one of the branches itself
        branches = [b for b in (node.body, node.orelse) if not _constant(b)]
        if branches:
            return _combine([_origin(facts, b, seen, depth + 1, conv) for b in branches])
    if isinstance(node, ast.Call) and (returned := _returned_origin(facts, node, seen, depth)) is not None:
        return returned  # `self._scale_noise(n)`: what a def of the file returns
    if (  # `next(train_iter)`: a batch drawn by hand
        isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "next"
        and node.args and facts.resolve_name("next", node) is None and loader_iterable(facts, node.args[0])
    ):
        return Origin(BATCH)
    return _computed(facts, node, seen, depth, conv)


def _transformed_image(facts: FileFacts, node: ast.AST) -> bool:
    """``node`` applies a torchvision transform (``transforms.Compose([...])``, ``ToTensor()``,
    called directly or through a name bound to one) to a PIL image (``Image.open(..)``, its
    ``.convert(..)``, or a name bound to such): the tensor it makes is new, with no graph."""
    if not (isinstance(node, ast.Call) and len(node.args) == 1 and not node.keywords):
        return False
    return _built_by(facts, node.func, "torchvision.transforms.") and _built_by(facts, node.args[0], "PIL.", _IMAGE_METHODS)


def _built_by(facts: FileFacts, expr: ast.AST, package: str, methods: frozenset = frozenset(), depth: int = 0) -> bool:
    """``expr`` is what a call into ``package`` gives (through ``methods`` of it), or a name
    every binding it may see binds to one."""
    while isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr in methods:
        expr = expr.func.value  # `Image.open(p).convert("RGB")`
    if isinstance(expr, ast.Call):
        return (facts.call_qualname(expr) or "").startswith(package)
    if isinstance(expr, ast.Name) and depth < 3:
        values = bound_values(facts, expr)
        return bool(values) and all(_built_by(facts, v, package, methods, depth + 1) for v in values)
    return False


_IMAGE_METHODS = frozenset("convert resize crop rotate transpose copy".split())  # PIL.Image methods giving an image


def _returned_origin(facts: FileFacts, call: ast.Call, seen, depth, index: int | None = None) -> Origin | None:
    """What a def of the file that ``call`` runs returns (with ``index``, element ``index`` of
    the tuple every ``return`` gives: ``img, orig, dim = prep_image(frame)``), when every
    ``return`` gives a value of known origin that nothing else holds afterwards (a new object,
    or a local of the def that no other reference keeps: :func:`sole_holder`); None otherwise."""
    returned = _returned_values(facts, call)
    if returned and index is not None:
        if not all(isinstance(v, ast.Tuple) and index < len(v.elts) and not any(isinstance(e, ast.Starred) for e in v.elts) for v in returned):
            return None
        returned = [v.elts[index] for v in returned]
    if not returned or any(v in seen for v in returned):
        return None  # (a def returning its own call's value: not followed round again)
    parts = []
    for value in returned:
        found = _origin(facts, value, seen | {value}, depth + 1)
        if found is None or found.holder is not None and not (isinstance(found.holder, ast.Name) and sole_holder(facts, found.holder)):
            return None
        parts.append(Origin(found.kind, None, found.line))
    return _combine(parts)


def _dataset_item(facts: FileFacts, node: ast.AST) -> bool:
    """``dataset[i]``, ``loader.dataset.__getitem__(i)``: an item of what a ``for`` loop over it
    would take, a batch (by the same assumption: a dataset hands out tensors needing no grad)."""
    if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
        owner = node.value
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "__getitem__" and len(node.args) == 1:
        owner = node.func.value
    else:
        return False
    return dotted_name(owner) is not None and loader_iterable(facts, owner)


def passed_through(facts: FileFacts, call: ast.Call) -> ast.expr | None:
    """The argument ``call`` hands to a function of the project that gives that parameter back
    on every ``return``, as it is or moved (:data:`KEEPING_METHODS`: ``def cuda(t, on): return
    t.cuda() if on else t``, ``def to_device(x): return x.to(DEVICE)``), in this file or in
    another module of the project; None otherwise."""
    from gradfix.analysis.calls import argument_for, callee  # calls builds on this module

    func = callee(facts, call)
    if func is None and isinstance(call.func, ast.Name) and facts.project is not None:
        func = _project_function(facts, facts.call_qualname(call))
    if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    param = facts.memo(("provenance.returned_parameter", id(func)), lambda: _returned_parameter(func))
    return argument_for(func, call, param) if param is not None else None


def _project_function(facts: FileFacts, qualname: str | None):
    """The top-level def ``qualname`` names in another module of the project, or None."""
    from gradfix.analysis.module_mode import sensitivity_of  # module_mode builds on this module
    from gradfix.analysis.project import top_level_definition

    if not qualname or qualname.split(".", 1)[0] in ("torch", "numpy", "math", "builtins"):
        return None
    found = sensitivity_of(facts).defining_module(qualname, None)
    return top_level_definition(found[1], qualname.rpartition(".")[2]) if found is not None else None


def _returned_parameter(func) -> str | None:
    """The parameter every ``return`` of ``func`` gives back (through moves and both branches of
    a conditional expression) and nothing else in ``func`` reads or rebinds; None when there is
    none."""
    from gradfix.analysis.statements import own_nodes

    params = parameter_names(func, star=False)
    own = own_nodes(func)
    found: set[str] = set()
    for node in own:
        if isinstance(node, ast.Return):
            todo = [node.value]
            while todo:
                value = todo.pop()
                if isinstance(value, ast.IfExp):
                    todo += [value.body, value.orelse]
                elif isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr in KEEPING_METHODS and value.func.attr[-1] != "_":
                    todo.append(value.func.value)
                elif isinstance(value, ast.Name) and value.id in params:
                    found.add(value.id)
                else:
                    return None
        elif isinstance(node, (ast.Yield, ast.YieldFrom)):
            return None
    if len(found) != 1:
        return None
    (param,) = found
    # read only by the returns: nothing else may rebind it or make it require grad
    returned = {id(n) for r in own if isinstance(r, ast.Return) for n in ast.walk(r)}
    if any(isinstance(n, ast.Name) and n.id == param and id(n) not in returned for n in own):
        return None
    return param


def _computed(facts, node: ast.AST, seen, depth, conv=None) -> Origin | None:
    """A value computed only from tensors that need no grad and constants needs no grad: an
    operator (``fresh * 2``, ``a.data - b.data``, ``a.data if c else 0``), a NumPy function
    (whatever its operands: it returns NumPy values, never autograd history), a ``torch.*`` or
    ``math.*`` function (``torch.atan2(a.data, b.data)``, ``torch.transpose(fresh, 0, 1)``), a
    number builtin (``max(a.data, 0)``) or a tensor method (``h.data.sum(1)``) whose every operand
    is one of those. Anything else (an operand gradfix cannot follow, a method that may make its
    result require grad) is unknown."""
    if isinstance(node, ast.Call) and _number(facts, node):
        return Origin(COMPUTED)  # `len(x)`, `dist.get_world_size()`: a Python int
    if isinstance(node, ast.BinOp):
        operands = [node.left, node.right]
    elif isinstance(node, ast.UnaryOp):
        operands = [node.operand]
    elif isinstance(node, ast.BoolOp):
        operands = list(node.values)
    elif isinstance(node, ast.Compare):
        operands = [node.left, *node.comparators]
    elif isinstance(node, ast.IfExp):
        operands = [node.test, node.body, node.orelse]
    elif isinstance(node, ast.Slice):
        operands = [part for part in (node.lower, node.upper, node.step) if part is not None]
    elif isinstance(node, ast.Call) and not any(isinstance(a, ast.Starred) for a in node.args) and all(
        k.arg not in (None, "requires_grad", "out") for k in node.keywords
    ):
        func = node.func
        qual = facts.qualname(func) or ""
        if qual.split(".", 1)[0] == "numpy":
            return Origin(COMPUTED)  # an ndarray or a NumPy number: no autograd history (pinned)
        if qual.rpartition(".")[0] in ("torch", "math") or (
            isinstance(func, ast.Name) and func.id in _NUMBER_BUILTINS and facts.resolve_name(func.id, node) is None
        ):
            operands = [*node.args, *(k.value for k in node.keywords)]
        elif isinstance(func, ast.Attribute) and not qual and func.attr not in _GRAD_METHODS:
            operands = [func.value, *node.args, *(k.value for k in node.keywords)]
        else:
            return None
    else:
        return None
    # constants and numbers (`1 - dropout` with `dropout=0.5` a setting) are no tensors
    plain = [_constant(o) or (isinstance(o, (ast.Name, ast.BinOp, ast.UnaryOp)) and _number(facts, o)) for o in operands]
    tensors = [_origin(facts, o, seen, depth + 1, conv) for o, number in zip(operands, plain) if not number]
    if not tensors:
        return Origin(ASSUMED) if conv is not None else None  # `2 * 3`: no tensor at all
    weakest = _combine(tensors)
    if weakest is None:
        return None
    return weakest if weakest.kind in (BATCH, ASSUMED) else Origin(COMPUTED)


def _number(facts: FileFacts, node: ast.AST, depth: int = 0) -> bool:
    """A literal, or an expression that is surely a Python int (``T - 1`` after ``N, T =
    x.size()``), or a call of a def of the file whose every ``return`` gives one (encodec's
    ``world_size()``): no tensor, so it cannot carry a graph."""
    from gradfix.analysis.regions import integer_valued  # regions builds on this module

    if isinstance(node, ast.Constant) or integer_valued(facts, node):
        return True
    if isinstance(node, ast.UnaryOp) and depth < 3:
        return _number(facts, node.operand, depth + 1)
    if isinstance(node, ast.BinOp) and depth < 3:
        return _number(facts, node.left, depth + 1) and _number(facts, node.right, depth + 1)
    if isinstance(node, ast.Name):
        return _numeric_default(facts, node)
    returned = _returned_values(facts, node) if isinstance(node, ast.Call) and depth < 3 else None
    return bool(returned) and all(_number(facts, v, depth + 1) for v in returned)


def _numeric_default(facts: FileFacts, read: ast.Name) -> bool:
    """``read`` is a parameter of its function whose default is a number literal
    (``def forward(self, x, dropout=0.5)``) and that the function never rebinds: a setting,
    by the same convention as optimizer code's hyperparameters (see :func:`grad_free_operand`)."""
    func = facts.function_of.get(read)
    if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        return False
    args = func.args
    positional = [*args.posonlyargs, *args.args]
    pairs = [*zip(positional[len(positional) - len(args.defaults):], args.defaults), *zip(args.kwonlyargs, args.kw_defaults)]
    default = next((d for a, d in pairs if a.arg == read.id), None)
    if isinstance(default, ast.UnaryOp) and isinstance(default.op, ast.USub):
        default = default.operand
    if not (isinstance(default, ast.Constant) and isinstance(default.value, (int, float)) and not isinstance(default.value, bool)):
        return False
    rebound = facts.memo(("provenance.rebound", id(func)), lambda: frozenset(
        n.id for n in ast.walk(func) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)
    ))
    return read.id not in rebound


def _plain_number(facts: FileFacts, node: ast.AST) -> bool:
    """A number literal, ``int(..)``, ``float(..)``, ``t.item()``, or what :func:`_number`
    proves a Python int (``t.shape[0]``, ``t.size(1)``): never a tensor."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, (int, float)) and not isinstance(node.value, bool)
    if isinstance(node, ast.Call) and not node.keywords:
        func = node.func
        if isinstance(func, ast.Name) and func.id in ("int", "float") and len(node.args) == 1 and facts.resolve_name(func.id, node) is None:
            return True  # a Python number whatever it converts (`float(t)` of a tensor too)
        if isinstance(func, ast.Attribute) and func.attr == "item" and not node.args:
            return True
    return isinstance(node, (ast.Subscript, ast.Call)) and _number(facts, node)


def _constant(node: ast.AST) -> bool:
    """A literal number, string, bool or None, or a tuple of those (a size, a dim)."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        node = node.operand
    if isinstance(node, ast.Tuple):
        return all(_constant(e) for e in node.elts)
    return isinstance(node, ast.Constant) and not isinstance(node.value, bytes)


def _variable_result(facts, call: ast.Call, seen, depth, conv=None) -> Origin | None:
    """A legacy ``Variable(x)``: detached (``x``'s origin if the rewrite drops the wrapper),
    unless it asks for ``requires_grad``."""
    flag = call.args[1] if len(call.args) > 1 else next((k.value for k in call.keywords if k.arg == "requires_grad"), None)
    if flag is not None and not (isinstance(flag, ast.Constant) and not flag.value):
        return None
    if not call.args:
        return None
    inner = _origin(facts, call.args[0], seen, depth + 1, conv)
    return Origin(inner.kind, None, inner.line) if inner is not None else Origin(DETACHED)


def _name_origin(facts, name: ast.Name, seen, depth, conv=None) -> Origin | None:
    iterated = _comprehension_source(facts, name)
    if iterated is not None:  # `[Variable(d) for d in batch]`: an element of what it iterates
        # a loader's batch (`[f(Variable(x)) for x, y in val_loader]`), else the iterated
        # objects (or their parts): whoever holds those holds them
        return _element_origin(facts, iterated, seen, depth) or _origin(facts, iterated, seen, depth + 1, conv)
    func = facts.function_of.get(name)
    if isinstance(func, ast.Lambda):
        return None
    flow = reaching_definitions(facts, func)
    definitions = bound_definitions(facts, func, name, flow.reaching.get(name) or frozenset({UNKNOWN}))
    if definitions == {UNKNOWN}:
        module = _module_definitions(facts, name)
        if module is not None:  # `vgg_mean = torch.FloatTensor(..)` at module level
            flow, definitions = reaching_definitions(facts, None), module
    entry = None
    if UNKNOWN in definitions and conv is None:
        entry = _parameter_origin(facts, func, name, seen, depth)  # what the callers hand in
        if entry is None:
            return None
    parts = []
    for definition in definitions:
        if definition is UNKNOWN:
            if entry is None and _parameter_like(name.id):
                return None  # an argument or a global named like a parameter (`w`, `weight`)
            parts.append(entry or Origin(ASSUMED))  # (by convention: an argument, a global is a hyperparameter)
            continue
        if definition in seen:
            # `norm += g.data.norm()` or `x = x.cuda()` in a loop: its own earlier value, which
            # holds what the other definitions give it and nothing more (a least fixpoint)
            continue
        parts.append(_definition_origin(facts, flow, definition, seen | {definition}, depth + 1, conv))
    found = _combine(parts)  # (none left: only its own earlier value, unknown)
    if found is None:
        return None
    line = min(getattr(d.node, "lineno", 0) for d in definitions)
    return Origin(found.kind, name, line)


def bound_definitions(facts: FileFacts, func, name: ast.Name, definitions: frozenset) -> frozenset:
    """``definitions`` without the function's entry when ``name`` is a plain local of ``func``
    (bound in it; no parameter, `global` or `nonlocal`) that some definition reaches: on a path
    where none does the read raises UnboundLocalError, so it yields no value
    (``if i % n == 0: it = iter(loader)`` ... ``next(it)`` reads only what ``iter`` built)."""
    if UNKNOWN not in definitions or len(definitions) < 2 or not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return definitions
    scope = facts.scope_of_node.get(func)
    if scope is None or name.id not in scope.locals or name.id in parameter_names(func) or name.id in scope.globals:
        return definitions
    return definitions - {UNKNOWN}


def _module_definitions(facts, name: ast.Name) -> frozenset[Definition] | None:
    """For a read in a function of a module-level name (no function it lies in binds it), the
    module's bindings of it that a call may see: those at the module's end and wherever a
    module-level statement calls a def of the file. None: not such a read, a function declares
    the name ``global`` (it may rebind it), or some code of the file may make the object
    require grad (``w.requires_grad_()``, ``w.requires_grad = True``)."""
    func = facts.function_of.get(name)
    if func is None:
        return None
    if any(name.id in facts.scope_of_node[f].locals or name.id in facts.scope_of_node[f].imports for f in (func, *facts.enclosing_functions(func))):
        return None
    found = module_definitions(facts, name.id, func)
    if found is None or _made_to_require_grad(facts, name.id):
        return None
    return found


def module_definitions(facts: FileFacts, name: str, reader=None) -> frozenset[Definition] | None:
    """The module-level bindings of ``name`` that code in a def (``reader``) may see: those at
    the module's end and wherever a module-level statement runs that def (a notebook's `def
    accuracy(x): .. model(x)` run right after `model = nn.Sequential(..)`). None: the module
    does not bind it, binds it in a way not followed, or a function declares it ``global`` (and
    may rebind it)."""
    module = reaching_definitions(facts, None)
    if name in facts.declared_global or module.exit is None or name not in module.exit:
        return None
    found = seen_by_calls(facts, name, reader)
    return None if UNKNOWN in found else found


def seen_by_calls(facts: FileFacts, name: str, reader=None) -> frozenset[Definition]:
    """What the module leaves ``name`` bound to, and what it is bound to wherever a module-level
    statement calls a def of the file whose code may run ``reader`` then (any def when
    ``reader`` is None, or when :func:`~gradfix.analysis.calls.running_defs` cannot tell what
    runs it): UNKNOWN where the module leaves it unbound (a module that always raises leaves
    nothing)."""
    from gradfix.analysis.calls import callees, running_defs  # calls builds on this module

    module = reaching_definitions(facts, None)
    found = set(module.exit.get(name, frozenset({UNKNOWN}))) if module.exit is not None else set()
    runners = running_defs(facts, reader) if reader is not None else None
    for stmt, state in module.entries:
        if runners is not None and not any(set(callees(facts, c).defs) & runners for c in _own_calls(stmt)):
            continue  # what this statement calls never runs ``reader``
        found |= state.get(name, frozenset())
    return frozenset(found)


def _own_calls(stmt: ast.stmt) -> list[ast.Call]:
    """The calls of ``stmt`` itself (not of the statements in its body or of nested scopes)."""
    out, todo = [], [stmt]
    while todo:
        node = todo.pop()
        if node is not stmt and isinstance(node, (ast.stmt, *_SCOPES)):
            continue
        if isinstance(node, ast.Call):
            out.append(node)
        todo.extend(ast.iter_child_nodes(node))
    return out


def _made_to_require_grad(facts, name: str) -> bool:
    """Some read of the name ``name`` in the file may make its object carry a graph (see
    :func:`_keeps_grad_free`: ``w.requires_grad_()``, ``w.copy_(h)``, handed to code
    gradfix does not follow)."""

    def compute() -> bool:
        return not all(
            _keeps_grad_free(facts, node)
            for node in ast.walk(facts.tree)
            if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load)
        )

    return facts.memo(("provenance.made_to_require_grad", name), compute)


def _self_attribute_origin(facts, node: ast.Attribute, seen, depth) -> Origin | None:
    """``self.grid`` in a method: what every assignment of it in the class binds (each
    ``self.x = ...`` of the class; ``self.x = Variable(self.x)`` adds nothing), when no other
    code of the file assigns an attribute of that name and nothing can make the object carry a
    graph (:func:`_keeps_grad_free`); None otherwise."""
    cls = facts.parents.get(node)
    while cls is not None and not isinstance(cls, ast.ClassDef):
        cls = facts.parents.get(cls)
    if cls is None:
        return None
    key = ("self", id(cls), node.attr)
    if key in seen:
        return Origin(DETACHED)  # its own earlier value: what the other assignments bind
    values = _self_attribute_values(facts, node)
    if not values:
        return None
    found = _combine([_origin(facts, value, seen | {key}, depth + 1) for value in values])
    if found is None or found.kind not in PROVEN:
        return None
    _, reads = facts.memo(("provenance.self_attribute", id(cls), node.attr), lambda: _self_attribute_uses(facts, cls, node.attr))
    if not all(read is node or _keeps_grad_free(facts, read) for read in reads):
        return None
    # the evidence: the last store above the read (not `self.x = Variable(self.x)` itself)
    lines = [facts.parents[v].lineno for v in values if not any(n is node for n in ast.walk(v))]
    above = [line for line in lines if line < node.lineno]
    return Origin(found.kind, node, max(above) if above else min(lines, default=node.lineno))


def _self_attribute_uses(facts, cls: ast.ClassDef, attr: str):
    """The stores and the other reads of ``self.<attr>`` in ``cls``; (None, ()) when other code
    of the file may store it too: ``obj.grid = ..``, or ``self.grid = ..`` in a class that
    names ``cls`` as a base or that ``cls`` names as one (another class's ``self`` is another
    object)."""
    stores, reads = [], []
    for node in ast.walk(cls):
        if isinstance(node, ast.Attribute) and node.attr == attr and isinstance(node.value, ast.Name) and node.value.id == "self":
            (reads if isinstance(node.ctx, ast.Load) else stores).append(node)
    related = {cls.name, *(dotted_name(b) for b in cls.bases)}
    for other in facts.nodes_of(ast.ClassDef):
        if other is not cls and (other.name in related or cls.name in {dotted_name(b) for b in other.bases}):
            related.add(id(other))
    for n in ast.walk(facts.tree):
        if not (isinstance(n, ast.Attribute) and n.attr == attr and not isinstance(n.ctx, ast.Load)) or n in stores:
            continue
        owner = facts.parents.get(n)
        while owner is not None and not isinstance(owner, ast.ClassDef):
            owner = facts.parents.get(owner)
        self_store = isinstance(n.value, ast.Name) and n.value.id == "self" and owner is not None
        if not self_store or id(owner) in related:
            return None, ()
    return stores, reads


def _keeps_grad_free(facts, read: ast.expr) -> bool:
    """A read of a value that cannot make it carry a graph: a harmless read
    (:func:`_harmless_read`), or the argument of a legacy ``Variable(..)`` that asks for no
    ``requires_grad`` (it makes an alias, and leaves the object as it is)."""
    if _harmless_read(facts, read):
        return True
    call = facts.parents.get(read)
    return (
        isinstance(call, ast.Call)
        and call.args[:1] == [read]
        and facts.call_qualname(call) == VARIABLE
        and len(call.args) == 1
        and all(k.arg != "requires_grad" for k in call.keywords)
    )


def _parameter_origin(facts, func, name: ast.Name, seen, depth) -> Origin | None:
    """A parameter that no statement of ``func`` rebinds before ``name`` reads it holds a loader
    batch when every call of ``func`` in the file hands it one (`train_batch(opt, batch, label)`
    inside `for batch, label in loader:`); a fresh tensor is not followed so (a caller in another
    file may hand in one that requires grad, and dropping the wrapper would then keep its graph)."""
    from gradfix.analysis.calls import argument_for, outside_callers  # calls builds on this module

    if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)) or (func, name.id) in seen:
        return None
    calls = outside_callers(facts, func)
    if not calls:
        return None
    for call in calls:
        argument = argument_for(func, call, name.id)
        found = _origin(facts, argument, seen | {(func, name.id)}, depth + 1) if argument is not None else None
        if found is None or found.kind != BATCH:
            return None
    return Origin(BATCH, name, func.lineno)


_ORDER_WRAPPERS = ("tqdm", "list", "sorted", "reversed", "iter")  # hand out the same elements


def _state_dict_call(node: ast.AST) -> bool:
    """``x.state_dict()`` (no ``keep_vars=True``): its tensors are detached (pinned in
    tests/facts/test_gf304_facts.py)."""
    return (
        isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "state_dict"
        and not node.args and not node.keywords
    )


def _state_dict_entries(iterated: ast.AST) -> bool:
    """``iterated`` walks a state dict's entries: ``sd.items()``/``values()`` of a
    ``x.state_dict()`` call, through ``tqdm``/``enumerate``-like wrappers of it."""
    while isinstance(iterated, ast.Call) and isinstance(iterated.func, ast.Name) and iterated.func.id in _ORDER_WRAPPERS and iterated.args:
        iterated = iterated.args[0]  # `tqdm(sd.items(), desc=..)`
    return (
        isinstance(iterated, ast.Call) and isinstance(iterated.func, ast.Attribute)
        and iterated.func.attr in ("items", "values") and _state_dict_call(iterated.func.value)
    )


def _comprehension_source(facts, name: ast.Name) -> ast.expr | None:
    """What a comprehension iterates when ``name`` is its own target there (``d`` in ``[f(d)
    for d in data]``, ``x`` in ``[f(x) for x, y in data]``, one generator); None otherwise."""
    node = facts.parents.get(name)
    while node is not None and not isinstance(node, ast.stmt):
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            targets = [g for g in node.generators if name.id in _target_names(g.target)]
            if targets:
                return targets[0].iter if len(node.generators) == 1 and not _within(facts, name, targets[0].iter) else None
        node = facts.parents.get(node)
    return None


def _target_names(target: ast.expr) -> set[str]:
    """The plain names a ``for`` target binds, unpacked tuples and lists included."""
    if isinstance(target, ast.Name):
        return {target.id}
    if isinstance(target, (ast.Tuple, ast.List)):
        return {n for e in target.elts for n in _target_names(e)}
    return set()


def _within(facts, node: ast.AST, root: ast.AST) -> bool:
    while node is not None:
        if node is root:
            return True
        node = facts.parents.get(node)
    return False


def _definition_origin(facts, flow, definition: Definition, seen, depth, conv=None) -> Origin | None:
    if definition.kind == "assign":
        return _origin(facts, definition.value, seen, depth, conv)
    if definition.kind == "loop":
        return _element_origin(facts, definition.value, seen, depth)
    if definition.kind == "aug":
        old = flow.augmented.get(definition.node, frozenset({UNKNOWN}))
        if UNKNOWN in old:
            return None
        # (its own earlier value in a loop, `norm += ...`, adds nothing: see _name_origin)
        parts = [_definition_origin(facts, flow, d, seen | {d}, depth + 1, conv) for d in old if d not in seen]
        if not parts:
            return None
        value = definition.value
        if not (isinstance(value, ast.Constant) and isinstance(value.value, (int, float))):
            parts.append(_origin(facts, value, seen, depth, conv))
        return _combine(parts)
    return None


def _element_origin(facts, iterated: ast.AST, seen, depth) -> Origin | None:
    """What a ``for`` loop over ``iterated`` binds: a batch from a loader, or from iterating a
    batch (`for img_a, img_b in zip(imgs["A"], imgs["B"])` after `imgs = next(iter(loader))`:
    its rows), a detached tensor from a state dict; through ``zip``/``enumerate`` (whose index
    is an int) and order-keeping wrappers. Anything else is not followed (a list may have
    gained other elements by `.append`)."""
    if loader_iterable(facts, iterated):
        return Origin(BATCH)
    if _state_dict_entries(iterated):
        return Origin(DETACHED)  # `for name, p in model.state_dict().items()` (a key is a str)
    if isinstance(iterated, ast.Call) and isinstance(iterated.func, ast.Name) and iterated.args and not iterated.keywords:
        if facts.resolve_name(iterated.func.id, iterated) is None:
            if iterated.func.id == "zip":
                return _combine([_element_origin(facts, a, seen, depth + 1) for a in iterated.args])
            if iterated.func.id in ("enumerate", *_ORDER_WRAPPERS) and len(iterated.args) == 1:
                return _element_origin(facts, iterated.args[0], seen, depth + 1)
    if not isinstance(iterated, (ast.Name, ast.Subscript)):
        return None  # (`range(n)`, `model.parameters()`, `self.layers`: no batch to take rows of)
    found = _origin(facts, iterated, seen, depth + 1)
    return found if found is not None and found.kind == BATCH else None


def _combine(parts: list[Origin | None]) -> Origin | None:
    """The weakest of ``parts``: unknown if any is, else a batch if any is, else an assumed
    number if any is, else proven."""
    if not parts or any(p is None for p in parts):
        return None
    for kind in (BATCH, ASSUMED):
        weak = [p for p in parts if p.kind == kind]
        if weak:
            return weak[0]
    return parts[0]


def loader_iterable(facts: FileFacts, expr: ast.AST, depth: int = 0) -> bool:
    """``train_loader``, ``enumerate(loader)``, ``tqdm(val_loader)``, ``DataLoader(...)``, a
    torchvision/torchaudio dataset (``ImageFolder(...)``, ``datasets.MNIST(...)``), and
    a wrapper handed a loader first (``IteratorTimer(loader)``, ``prefetch(loader, n)``), and a
    name every assignment reaching it binds to one of those."""
    if isinstance(expr, ast.Call):
        qual = facts.qualname(expr.func) or ""
        if qual.endswith("DataLoader") or qual.startswith(_DATASET_PACKAGES):
            return True  # a loader, or a dataset read from files (`dset.MNIST(..)`, `ImageFolder(..)`)
        func = expr.func
        called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if called in _LOADER_WRAPPERS:
            return any(loader_iterable(facts, a, depth + 1) for a in expr.args)
        if expr.args and not isinstance(expr.args[0], ast.Starred) and loader_iterable(facts, expr.args[0], depth + 1):
            return True
        expr = expr.func  # get_loader(), self.train_loader()
    if isinstance(expr, ast.Subscript):  # `dataloaders[phase]`, `kwargs['train_data']`
        key = expr.slice
        if isinstance(key, ast.Constant) and isinstance(key.value, str) and LOADER_NAME.search(key.value):
            return True
        return depth <= 3 and loader_iterable(facts, expr.value, depth + 1)
    name = dotted_name(expr)
    if name is not None and LOADER_NAME.search(name.rpartition(".")[2]):
        return True
    # `progress = tqdm(loader, ...)` ... `for batch in progress`: every binding is a loader
    func = facts.function_of.get(expr)
    if not isinstance(expr, ast.Name) or depth > 3 or isinstance(func, ast.Lambda):
        return False
    definitions = bound_definitions(facts, func, expr, reaching_definitions(facts, func).reaching.get(expr) or frozenset({UNKNOWN}))
    if definitions == {UNKNOWN}:  # `def finetune(model, text): for batch in text:` ... `finetune(m, train_data)`
        return _loader_parameter(facts, func, expr, depth)
    return all(d is not UNKNOWN and d.kind == "assign" and loader_iterable(facts, d.value, depth + 1) for d in definitions)


def _loader_parameter(facts: FileFacts, func, name: ast.Name, depth: int) -> bool:
    """``name`` is a parameter of ``func`` that every call of it in the file hands a loader."""
    from gradfix.analysis.calls import argument_for, outside_callers  # calls builds on this module

    if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    if name.id not in parameter_names(func, star=False):
        return False
    calls = outside_callers(facts, func)
    arguments = [argument_for(func, call, name.id) for call in calls]
    return bool(calls) and all(a is not None and loader_iterable(facts, a, depth + 1) for a in arguments)


# -- may the object stand for its detached alias -----------------------------------------------------
_HARMLESS_BUILTINS = frozenset({"print", "len", "isinstance", "type", "str", "repr", "int", "float", "bool", "format", "id"})
_LEAF_CHANGERS = frozenset({"requires_grad_", "retain_grad", "register_hook", "set_", "share_memory_"})


def sole_holder(facts: FileFacts, read: ast.Name | ast.Attribute) -> bool:
    """Whether a ``Variable(..)`` call wrapping the value that the name ``read`` holds may
    become that value itself: see the module docstring."""
    if isinstance(read, ast.Attribute):  # `self.grid`: see _self_attribute_origin
        return _shared_sole_holder(facts, read)
    func = facts.function_of.get(read)
    if isinstance(func, ast.Lambda):
        return False
    flow = reaching_definitions(facts, func, reads=True)
    definitions = flow.reaching.get(read, frozenset())
    if definitions == {UNKNOWN} and _module_definitions(facts, read) is not None:
        return _shared_sole_holder(facts, read)
    if not definitions or any(d.kind in ("unknown", "def") for d in definitions):
        return False
    # What takes the `Variable(..)` result cannot change its autograd state (`model(Variable(x))`
    # with a quiet module, `Variable(x).size()`): the alias and the object behave the same there,
    # so the value may be read again, or the call run again in a loop, and nobody can tell.
    quiet = _quiet_consumer(facts, read)
    if read in flow.previous_reads.get(read, ()) and not quiet:
        return False  # a loop runs the call again on the same value
    root = facts.tree if func is None else func
    for node in ast.walk(root):
        if not (isinstance(node, ast.Name) and node.id == read.id) or node is read:
            continue
        if node not in flow.reaching:  # in a nested scope or a comprehension: the value escapes
            if isinstance(node.ctx, ast.Load) and not _own_local(facts, node):
                return False
            continue
        if not (flow.reaching[node] & definitions):
            continue  # another value under the same name
        if read in flow.previous_reads.get(node, ()) and not quiet:
            return False  # read again after the call (not rebound by it): both would be visible
        if not _harmless_read(facts, node):
            return False
    return True


def _variable_call_around(facts: FileFacts, read: ast.expr) -> ast.Call | None:
    """The ``Variable(..)`` call whose argument ``read`` is (through a chain: ``Variable(g.cuda())``)."""
    call = facts.parents.get(read)
    while isinstance(call, (ast.Attribute, ast.Call)) and facts.call_qualname(call) != VARIABLE:
        call = facts.parents.get(call)
    return call if isinstance(call, ast.Call) else None


def _quiet_consumer(facts: FileFacts, read: ast.expr) -> bool:
    """The ``Variable(read)`` call asks no ``requires_grad`` and hands its result straight to a
    use that cannot change its autograd state (:func:`_harmless_read`)."""
    call = _variable_call_around(facts, read)
    if call is None or len(call.args) != 1 or call.keywords:
        return False
    return _harmless_read(facts, call)


def _own_local(facts: FileFacts, node: ast.Name) -> bool:
    """``node`` reads a parameter or a local of the def it is in (``def f(x): ..`` reading its
    own ``x``, ``def load(): img = cv2.imread(..)``): another variable than an outer ``x``."""
    func = facts.function_of.get(node)
    if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        return False
    if node.id in parameter_names(func):
        return True
    scope = facts.scope_of_node.get(func)
    return scope is not None and node.id in scope.locals and node.id not in scope.globals


def _shared_sole_holder(facts: FileFacts, read: ast.expr) -> bool:
    """A module-level name or a ``self`` attribute is seen by other code too (its other reads
    cannot make it carry a graph: :func:`_module_definitions`, :func:`_self_attribute_origin`):
    ``Variable(g)`` may become ``g`` when it asks no ``requires_grad`` and what it hands its
    value to cannot make it require grad either (``vgg_mean.type(t.type())``), or when it
    replaces the value it wraps (``self.grid = Variable(self.grid)``: no alias is left)."""
    call = _variable_call_around(facts, read)  # `Variable(g.cuda())`: the call around the chain
    if call is None or len(call.args) != 1 or any(k.arg == "requires_grad" for k in call.keywords):
        return False
    assign = facts.parents.get(call)
    if isinstance(assign, ast.Assign) and len(assign.targets) == 1 and dotted_name(assign.targets[0]) == dotted_name(read):
        return dotted_name(read) is not None
    return _harmless_read(facts, call)


def _harmless_read(facts, node: ast.expr) -> bool:
    """A read of the value that can neither make it require grad nor hand it on."""
    parent = facts.parents.get(node)
    if isinstance(parent, ast.Attribute) and parent.value is node:
        if not isinstance(parent.ctx, ast.Load):
            return False  # `x.requires_grad = True`, `x.data = ..`
        call = facts.parents.get(parent)
        if isinstance(call, ast.Call) and call.func is parent:
            method = parent.attr
            if method in _LEAF_CHANGERS:
                return False
            if method.endswith("_"):  # in place: the operands must need no grad
                operands = [*call.args, *(k.value for k in call.keywords)]
                return all(_constant(a) or (o := origin(facts, a)) is not None and o.kind in PROVEN for a in operands)
        return True
    if isinstance(parent, ast.Subscript) and parent.value is node:
        if isinstance(parent.ctx, ast.Load):
            return True
        assign = facts.parents.get(parent)
        value = getattr(assign, "value", None)
        return value is not None and (_constant(value) or (o := origin(facts, value)) is not None and o.kind in PROVEN)
    if isinstance(parent, (ast.BinOp, ast.UnaryOp, ast.Compare)):
        return True
    if isinstance(parent, (ast.List, ast.Tuple)) and isinstance(parent.ctx, ast.Load):
        holder = facts.parents.get(parent)  # `torch.cat([x, y])`: as harmless as what takes the list
        if isinstance(holder, ast.Call) and parent in holder.args or isinstance(holder, ast.keyword):
            return _harmless_read(facts, parent)
        return False
    if isinstance(parent, ast.Call) and node in parent.args or isinstance(parent, ast.keyword):
        call = parent if isinstance(parent, ast.Call) else facts.parents.get(parent)
        qual = facts.call_qualname(call) or ""
        if qual == VARIABLE:  # another alias: as harmless as what takes it
            return len(call.args) == 1 and not call.keywords and _harmless_read(facts, call)
        if qual.startswith("torch.") and qual != "torch.nn.Parameter" or autograd_unaware_call(facts, call):
            return True
        func = call.func
        if isinstance(func, ast.Name) and func.id in _HARMLESS_BUILTINS and qual == "":
            return True
        return _module_forward(facts, call)
    return False


def _module_forward(facts, call: ast.Call) -> bool:
    """``call`` runs the forward of a module that leaves its inputs' autograd state alone:
    ``model(x)``, ``criterion(out, y)``, ``self.net(x)`` where every assignment of that name in
    the file builds a ``torch.nn`` layer, loss or container of such (``nn.Sequential(...)``), or
    an instance of a class of the file that never calls ``requires_grad_``/``register_hook``/
    ``retain_grad`` nor sets ``.requires_grad``/``.grad`` (a forward may only compute with its
    inputs then, as a detached alias or as the tensor itself). A name that a parameter, a loop,
    a ``with`` or an import may bind is unknown."""
    from gradfix.analysis.project import strip_moves
    from gradfix.analysis.vocabulary import forward_callee

    name = forward_callee(call)
    if name is None or facts.qualname(call.func):
        return False
    if isinstance(call.func, ast.Name) and not facts.assignments_to(name) and name not in _other_bindings(facts):
        return _quiet_function(facts, name)
    root = name.split(".", 1)[0]
    if root != "self":
        func = facts.function_of.get(call)
        if func is not None and not isinstance(func, ast.Lambda) and root in parameter_names(func):
            return False
        if root in _other_bindings(facts):
            return False
    values = [node.value for node in facts.assignments_to(name)]
    return bool(values) and all(_quiet_module(facts, strip_moves(v), 0) for v in values)


def _quiet_function(facts, name: str) -> bool:
    """``name`` is a top-level def of the file (the only binding of the name) that cannot
    change its arguments' autograd state: no leaf changer in it, and every read of its
    parameters is harmless (:func:`_harmless_read`: ``def predict(x): return torch.mm(x, w) +
    b``); a def under judgement (recursion) is not."""
    defs = [n for n in facts.tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name]
    if len(defs) != 1:
        return False
    func = defs[0]
    busy = facts.memo(("provenance.quiet_busy",), set)
    if func in busy:
        return False
    busy.add(func)
    try:
        if _changes_leaves(func):
            return False
        params = parameter_names(func)
        return all(
            _harmless_read(facts, node)
            for node in ast.walk(func)
            if isinstance(node, ast.Name) and node.id in params and isinstance(node.ctx, ast.Load)
        )
    finally:
        busy.discard(func)


def _other_bindings(facts) -> frozenset[str]:
    """Names the file binds otherwise than by an assignment: parameters, loop and ``with``
    targets, imports, ``global``, ``except .. as``, comprehension targets."""

    def compute() -> frozenset[str]:
        found = set()
        for node in ast.walk(facts.tree):
            if isinstance(node, ast.arg):
                found.add(node.arg)
            elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
                found.update(n.id for n in ast.walk(node.target) if isinstance(n, ast.Name))
            elif isinstance(node, ast.withitem) and node.optional_vars is not None:
                found.update(n.id for n in ast.walk(node.optional_vars) if isinstance(n, ast.Name))
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                found.update((a.asname or a.name).split(".", 1)[0] for a in node.names)
            elif isinstance(node, (ast.Global, ast.Nonlocal)):
                found.update(node.names)
            elif isinstance(node, ast.ExceptHandler) and node.name:
                found.add(node.name)
            elif isinstance(node, ast.NamedExpr):
                found.add(node.target.id)
        return frozenset(found)

    return facts.memo(("provenance.other_bindings",), compute)


def _quiet_module(facts, value: ast.AST, depth: int) -> bool:
    """``value`` builds a module whose forward leaves its inputs' autograd state alone (see
    :func:`_module_forward`)."""
    if depth > 3 or not isinstance(value, ast.Call):
        return False
    qual = facts.call_qualname(value) or ""
    last = qual.rpartition(".")[2]
    if qual.startswith("torch.nn.") and last[:1].isupper() and qual != "torch.nn.Parameter":
        parts = [*value.args, *(k.value for k in value.keywords)]  # `nn.Sequential(Net(), nn.ReLU())`
        return all(_quiet_module(facts, p, depth + 1) for p in parts if _builds_module(p))
    if isinstance(value.func, ast.Name) and not qual.count("."):
        cls = next((n for n in facts.tree.body if isinstance(n, ast.ClassDef) and n.name == value.func.id), None)
        return cls is not None and not _changes_leaves(cls)
    return False


def _builds_module(expr: ast.AST) -> bool:
    """``expr`` is a call that may build a module (a class: its name starts with a capital)."""
    if not isinstance(expr, ast.Call):
        return False
    name = dotted_name(expr.func) or ""
    return name.rpartition(".")[2][:1].isupper()


def _changes_leaves(cls: ast.AST) -> bool:
    """``cls``'s code (a class or a def) may change a tensor's autograd state: a leaf changer, or a write of
    ``.requires_grad`` or ``.grad``."""
    for node in ast.walk(cls):
        if isinstance(node, ast.Attribute):
            if node.attr in _LEAF_CHANGERS:
                return True
            if node.attr in ("requires_grad", "grad") and not isinstance(node.ctx, ast.Load):
                return True
    return False
