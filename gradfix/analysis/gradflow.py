"""Which values are computed under which grad mode: one data flow for every rule.

The analysis walks one function's statements in execution order and tracks, per name, whether
the value it holds is *definitely* free of autograd history ("grad-free"): computed inside a
grad-disabled region, or derived from such values only through operations that cannot add
history (tensor methods, torch functions, loss criteria, data such as labels). Everything else
is "unknown" (it may require grad), and unknown always wins: a rule fires only when every path
to the differentiation site leaves the tensor grad-free. Branches are joined (a name is
grad-free after an ``if`` only when it is grad-free in both arms), loops are iterated to a fixed
point with ``continue``/``break`` states joined in, and any construct not modelled makes the
names it binds unknown.

Across the functions of a file the flow goes through **summaries** (:class:`Summary`), computed
on demand, once per file and per hypothesis (regions ignored / values detached by a fix):

- what a function *returns*: grad-free because of regions inside it (``def forward_pass(...):
  with torch.no_grad(): ... return out``), possibly only when some of its arguments are;
- which of its arguments it *differentiates*: ``def step(loss, opt): loss.backward()``, or
  ``def update(out, y): crit(out, y).backward()`` (the loss is grad-free when ``out`` is).

So the modern shape, a forward in one function and the backward in another, is one flow.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Iterable

from gradfix.analysis.calls import callee as file_callee
from gradfix.analysis.statements import caught
from gradfix.analysis.vocabulary import (
    COMPUTE_METHODS,
    CRITERION_NAME,
    DATA_PARAM,
    DETACHING_METHODS,
    LEARNED_CRITERION,
    LOSS_FUNCTION_NAME,
    PARAMETER_ITERATORS,
    VIEW_METHODS,
    backward_tensor,
    framework_loss,
    forward_callee,
    framework_method,
    is_data_iterable,
    parameter_free_loss_class,
)
from gradfix.facts import FileFacts, GradRegion, dotted_name, literal_bool, parameter_names, target_names

# A status is a frozenset of grad-disabled regions (their owner nodes) the value was computed
# in: empty = grad-free data (labels, constants), non-empty = grad-free because of those
# regions. ``None`` = unknown: the value may carry autograd history.
Status = frozenset | None
NEUTRAL: frozenset = frozenset()


ELEMENT_BUILTINS = frozenset({"max", "min", "next", "getattr", "iter", "list", "tuple", "dict", "sorted", "reversed", "zip", "enumerate", "vars"})
ELEMENT_METHODS = frozenset({"get", "pop", "popitem", "setdefault", "values", "items", "keys", "copy", "__getitem__"})
TORCH_VIEW_FUNCTIONS = frozenset(
    f"torch.{n}" for n in "reshape squeeze unsqueeze transpose permute flatten narrow select t chunk split unbind".split()
)
#: The Python builtins: a call of one is no call of a file function.
BUILTINS = frozenset(dir(__import__("builtins")))


def combine(*statuses: Status) -> Status:
    out: set = set()
    for s in statuses:
        if s is None:
            return None
        out |= s
    return frozenset(out)


def join(states: Iterable[dict]) -> dict:
    """Names grad-free on every incoming path (taints merged)."""
    states = list(states)
    if not states:
        return {}
    first, rest = states[0], states[1:]
    return {n: frozenset().union(s, *(r[n] for r in rest)) for n, s in first.items() if all(n in r for r in rest)}


@dataclass(frozen=True)
class Param:
    """In a summary: "grad-free when the caller's argument for this parameter is"."""

    name: str


@dataclass
class Site:
    """A call that needs its tensor to carry history: ``t.backward()``, ``autograd.grad(t)``,
    or a call of a file function that differentiates the argument ``tensor`` (``via`` names it)."""

    call: ast.Call
    kind: str  # "backward" (method), "autograd.backward", "autograd.grad", "retain_grad"
    tensor: ast.expr
    stmt: ast.stmt
    status: Status = None
    via: "Site | None" = None  # the site inside the called function

    @property
    def origin(self) -> "Site":
        """The call that really differentiates (the innermost ``via``)."""
        return self if self.via is None else self.via.origin


@dataclass
class Analysis:
    """The result for one function (None: module level)."""

    func: ast.AST | None
    sites: list[Site] = field(default_factory=list)
    returns: Status = None  # the status of what it returns (None: unknown, or returns nothing)


@dataclass
class Summary:
    """What calling a file function does to grad-free values (see the module docstring).

    ``returns``: status of the result, with :class:`Param` members for arguments it depends
    on; ``differentiates``: sites inside it whose tensor is grad-free when the :class:`Param`
    members of their status are.
    """

    returns: Status
    differentiates: list[Site]


class Flow:
    """The data flow of one file under one hypothesis (regions ignored, values detached by a
    fix), with the summaries of its functions computed on demand and kept."""

    def __init__(self, facts: FileFacts, ignore=frozenset(), detached=frozenset()):
        self.facts = facts
        self.ignore = frozenset(ignore)
        self.detached = frozenset(detached)
        self._summaries: dict[ast.AST, Summary | None] = {}

    def analyse(self, func) -> Analysis:
        return GradFreeAnalysis(self, func).run()

    def summary(self, func) -> Summary | None:
        if func in self._summaries:
            return self._summaries[func]
        self._summaries[func] = None  # recursion: unknown while it is being computed
        if _toggles_grad_mode(self.facts, func) or isinstance(func, ast.Lambda):
            return None
        result = GradFreeAnalysis(self, func, summary=True).run()
        # Only an unconditional differentiation is a fact about every call: `if opt is not
        # None: loss.backward()` (the Annotated Transformer's loss helper, called with opt=None
        # for validation under no_grad) depends on arguments the summary does not follow.
        differentiates = [
            s
            for s in result.sites
            if s.status is not None and any(isinstance(m, Param) for m in s.status) and self._unconditional(s.stmt, func)
        ]
        self._summaries[func] = summary = Summary(result.returns, differentiates)
        return summary

    def _unconditional(self, stmt: ast.stmt, func) -> bool:
        node = self.facts.parents.get(stmt)
        while node is not None and node is not func:
            if isinstance(node, (ast.If, ast.Try, ast.While, ast.Match)) or type(node).__name__ == "TryStar":
                return False
            node = self.facts.parents.get(node)
        return True

    def bind_arguments(self, callee, call: ast.Call) -> dict[str, ast.expr | None] | None:
        """Parameter name -> the argument the call passes (None: the default); None when the
        call unpacks ``*args``/``**kwargs``."""
        if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
            return None
        a = callee.args
        positional = [p.arg for p in (*a.posonlyargs, *a.args)]
        if isinstance(call.func, ast.Attribute) and positional[:1] in (["self"], ["cls"]):
            positional = positional[1:]
        bound: dict[str, ast.expr | None] = {p: None for p in (*positional, *(k.arg for k in a.kwonlyargs))}
        for name, arg in zip(positional, call.args):
            bound[name] = arg
        for kw in call.keywords:
            bound[kw.arg] = kw.value
        return bound


class GradFreeAnalysis:
    """Runs the walk described in the module docstring over one function.

    In ``summary`` mode every parameter stands for "what the caller passes" (:class:`Param`),
    and the statuses of returned values are collected.
    """

    def __init__(self, flow: Flow, func, summary: bool = False):
        self.flow = flow
        self.facts = flow.facts
        self.func = func
        self.ignore = flow.ignore
        self.detached = flow.detached
        self.summary_mode = summary
        self.sites: dict[ast.Call, Site] = {}
        self.returned: list[Status] = []
        self._loops: list[tuple[list, list]] = []
        self._params = _parameters(func)
        self._grad_enabling_functions = _grad_enabling_functions(self.facts)

    def run(self) -> Analysis:
        body = getattr(self.func, "body", None) if self.func is not None else self.facts.tree.body
        if not isinstance(body, list):  # a lambda
            return Analysis(self.func)
        if self.summary_mode:
            state = {p: frozenset({Param(p)}) for p in self._params if p not in ("self", "cls")}
        else:
            state = {p: NEUTRAL for p in self._params if DATA_PARAM.match(p)}
        self.block(body, state)
        returns = combine(*self.returned) if self.returned else None
        sites = sorted(self.sites.values(), key=lambda s: (s.call.lineno, s.call.col_offset))
        return Analysis(self.func, sites, returns)

    # -- regions ------------------------------------------------------------------------
    def region_at(self, node: ast.AST) -> GradRegion | None:
        """The innermost grad region around ``node`` that is not ignored, if it disables grad."""
        for region in self.facts.regions_around(node):
            if region.owner in self.ignore:
                continue
            return region if region.disables else None
        return None

    # -- statements ------------------------------------------------------------------------
    def block(self, body: list[ast.stmt], state: dict) -> dict:
        for stmt in body:
            state = self.statement(stmt, state)
        return state

    def statement(self, stmt: ast.stmt, state: dict) -> dict:
        region = self.region_at(stmt)
        if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            self._record_sites(stmt, state, region)
        state = dict(state)
        if isinstance(stmt, ast.Assign):
            for target in stmt.targets:
                self.assign(target, stmt.value, state, region, stmt)
        elif isinstance(stmt, ast.AnnAssign):
            if stmt.value is not None:
                self.assign(stmt.target, stmt.value, state, region, stmt)
        elif isinstance(stmt, ast.AugAssign):
            old = self.eval(stmt.target, state, None, stmt)
            value = self.eval(stmt.value, state, None, stmt)
            # In-place under no_grad keeps the target's history: only the old status counts.
            self.bind(stmt.target, None, old if region is not None else combine(old, value), state)
        elif isinstance(stmt, ast.Expr):
            self._expression_statement(stmt, state, region)
        elif isinstance(stmt, (ast.If,)):
            a = self.block(stmt.body, state)
            b = self.block(stmt.orelse, state)
            state = join([a, b])
        elif isinstance(stmt, (ast.For, ast.AsyncFor, ast.While)):
            state = self._loop(stmt, state, region)
        elif isinstance(stmt, (ast.With, ast.AsyncWith)):
            for item in stmt.items:
                if item.optional_vars is not None:
                    self.bind(item.optional_vars, None, self._scaled_loss(item.context_expr, state, stmt), state)
            state = self.block(stmt.body, state)
        elif isinstance(stmt, ast.Try) or type(stmt).__name__ == "TryStar":
            after_body = self.block(stmt.body, state)
            handler_entry = join([state, after_body])
            ends = [self.block(stmt.orelse, after_body)]
            ends += [self.block(h.body, self._forget(handler_entry, [h.name] if h.name else [])) for h in stmt.handlers]
            state = self.block(stmt.finalbody, join(ends))
        elif isinstance(stmt, (ast.Continue, ast.Break)):
            if self._loops:
                self._loops[-1][0 if isinstance(stmt, ast.Continue) else 1].append(dict(state))
        elif isinstance(stmt, ast.Return):
            self.returned.append(NEUTRAL if stmt.value is None else self.eval(stmt.value, state, region, stmt))
            loss = framework_loss(self.facts, self.func, stmt)
            if loss is not None:  # Lightning backpropagates what `training_step` returns
                self.sites[stmt] = Site(stmt, "backward", loss, stmt, self.eval(loss, state, region, stmt))
        elif isinstance(stmt, (ast.Raise, ast.Pass, ast.Assert, ast.Global, ast.Nonlocal, ast.Import, ast.ImportFrom)):
            pass
        elif isinstance(stmt, ast.Delete):
            for t in stmt.targets:
                state = self._forget(state, target_names(t))
        else:  # def, class, match, ...: whatever they bind is unknown
            state = self._forget(state, _stored_names(stmt))
        return state

    def _forget(self, state: dict, names) -> dict:
        return {n: s for n, s in state.items() if n not in set(names)}

    def _loop(self, stmt, state: dict, region) -> dict:
        entry = state
        head = entry
        breaks: list = []
        for _ in range(8):
            self._loops.append(([], []))
            body_state = dict(head)
            if isinstance(stmt, (ast.For, ast.AsyncFor)):
                self.bind(stmt.target, None, self._iteration_status(stmt, head, region), body_state)
            end = self.block(stmt.body, body_state)
            continues, breaks = self._loops.pop()
            new_head = join([entry, end, *continues])
            if new_head == head:
                break
            head = new_head
        else:  # no fixed point: forget everything the loop binds
            head = self._forget(entry, _stored_names(stmt))
        return join([self.block(stmt.orelse, head), *breaks])

    def _iteration_status(self, loop, state, region) -> Status:
        iterable = loop.iter
        status = self.eval(iterable, state, None, loop)
        if status:  # iterating over a grad-free container
            return status
        if isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Attribute) and iterable.func.attr in PARAMETER_ITERATORS:
            return None
        if is_data_iterable(iterable):
            return NEUTRAL
        return None

    def _expression_statement(self, stmt: ast.Expr, state: dict, region) -> None:
        call = stmt.value
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)):
            return
        names = target_names(call.func.value) if isinstance(call.func.value, (ast.Name, ast.Attribute, ast.Subscript)) else []
        if not names:
            return
        method = call.func.attr
        if method in ("requires_grad_", "retain_grad"):
            new = None if method == "requires_grad_" else state.get(names[0])
        elif region is not None and method.endswith("_"):
            new = state.get(names[0])  # in-place under no_grad keeps the receiver's history
        else:
            args = [self.eval(a, state, region, stmt) for a in (*call.args, *(k.value for k in call.keywords))]
            new = combine(state.get(names[0]) if names[0] in state else None, *args)
        self._set(state, names[0], new)

    def _set(self, state: dict, name: str, status: Status) -> None:
        if status is None:
            state.pop(name, None)
        else:
            state[name] = status

    def assign(self, target: ast.AST, value: ast.expr, state: dict, region, stmt) -> None:
        """``target = value``; ``a, b = c, d`` pairs the elements up."""
        if stmt in self.detached:  # a hypothetical fix detaches what this statement binds
            self.bind(target, None, NEUTRAL, state)
            return
        pairs = (
            isinstance(target, (ast.Tuple, ast.List))
            and isinstance(value, (ast.Tuple, ast.List))
            and len(target.elts) == len(value.elts)
            and not any(isinstance(e, ast.Starred) for e in (*target.elts, *value.elts))
        )
        if pairs:
            statuses = [self.eval(v, state, region, stmt) for v in value.elts]  # all read before any write
            for elt, status in zip(target.elts, statuses):
                self.bind(elt, None, status, state)
        else:
            self.bind(target, value, self.eval(value, state, region, stmt), state)

    def bind(self, target: ast.AST, value_node, status: Status, state: dict) -> None:
        if isinstance(target, ast.Name):
            self._set(state, target.id, status)
        elif isinstance(target, (ast.Tuple, ast.List)):
            for elt in target.elts:
                self.bind(elt, None, status, state)
        elif isinstance(target, ast.Starred):
            self.bind(target.value, None, status, state)
        else:  # ``a.b = v`` / ``a[i] = v`` mutate ``a``: unknown from now on
            for name in target_names(target):
                state.pop(name, None)

    # -- expressions ---------------------------------------------------------------------------
    def eval(self, node: ast.AST, state: dict, region: GradRegion | None, stmt: ast.stmt) -> Status:
        if node in self.detached:
            return NEUTRAL
        taint = frozenset({region.owner}) if region is not None else None
        if isinstance(node, ast.Constant) or isinstance(node, (ast.JoinedStr, ast.Compare)):
            return NEUTRAL
        if isinstance(node, ast.Name):
            return state.get(node.id)
        if isinstance(node, ast.Attribute):
            return self.eval(node.value, state, region, stmt)
        if isinstance(node, ast.Subscript):
            return combine(self.eval(node.value, state, region, stmt), self.eval(node.slice, state, None, stmt))
        if isinstance(node, ast.Slice):
            return combine(*(self.eval(p, state, None, stmt) for p in (node.lower, node.upper, node.step) if p is not None))
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return combine(*(self.eval(e, state, region, stmt) for e in node.elts))
        if isinstance(node, ast.Dict):
            return combine(*(self.eval(v, state, region, stmt) for v in node.values))
        if isinstance(node, ast.Starred):
            return self.eval(node.value, state, region, stmt)
        if isinstance(node, ast.IfExp):
            return combine(self.eval(node.body, state, region, stmt), self.eval(node.orelse, state, region, stmt))
        if isinstance(node, (ast.BinOp, ast.UnaryOp, ast.BoolOp)):
            if taint is not None and not isinstance(node, ast.BoolOp):
                return taint
            parts = [node.left, node.right] if isinstance(node, ast.BinOp) else [node.operand] if isinstance(node, ast.UnaryOp) else node.values
            return combine(*(self.eval(p, state, region, stmt) for p in parts))
        if isinstance(node, ast.Call):
            return self._eval_call(node, state, region, stmt, taint)
        return None

    def _eval_call(self, call: ast.Call, state, region, stmt, taint) -> Status:
        if any(k.arg == "requires_grad" and literal_bool(k.value) is not False for k in call.keywords):
            return None
        args = [*call.args, *(k.value for k in call.keywords)]
        arg_status = lambda: combine(*(self.eval(a, state, region, stmt) for a in args))  # noqa: E731
        func = call.func
        if taint is None:  # a file function computes its result in its own regions
            via = self._call_of_file_function(call, state, region, stmt)
            if via is not None:
                return via
        if isinstance(func, ast.Attribute):
            method = func.attr
            if method == "scale" and call.args and "scaler" in (dotted_name(func.value) or "").lower():
                return self.eval(call.args[0], state, region, stmt)  # `scaler.scale(loss)` (AMP)
            qual = self.facts.qualname(func)
            if qual is None or not qual.startswith("torch."):
                if method in DETACHING_METHODS:
                    return NEUTRAL
                if method == "requires_grad_" or method in ELEMENT_METHODS or _getter(call, method):
                    return None
                if method.endswith("_") and not method.startswith("_"):
                    # `adv = adv.clamp_(0, 1)`: an in-place method returns its receiver, and under
                    # no_grad the receiver keeps its history (or its requires_grad leaf flag).
                    return self.eval(func.value, state, region, stmt)
                if method in VIEW_METHODS:  # arguments are shapes, devices, dtypes or a tensor to mimic
                    return self.eval(func.value, state, region, stmt)
                if method in COMPUTE_METHODS:
                    return taint if taint is not None else combine(self.eval(func.value, state, region, stmt), arg_status())
                if dotted_name(func) is not None and CRITERION_NAME.match(method) and not self._may_learn(method):
                    return taint if taint is not None else arg_status()
                return taint if taint is not None and not method[:1].isupper() else None
        qual = self.facts.qualname(func) if isinstance(func, (ast.Name, ast.Attribute)) else None
        if qual is not None and qual.startswith("torch."):
            last = qual.rpartition(".")[2]
            if last[:1].isupper():  # a class: nn.Parameter, nn.Linear(...) create parameters
                return None
            if qual in TORCH_VIEW_FUNCTIONS:
                return arg_status()
            return taint if taint is not None else arg_status()
        if isinstance(func, ast.Call):  # nn.MSELoss()(out, y)
            inner = self.facts.qualname(func.func) if isinstance(func.func, (ast.Name, ast.Attribute)) else None
            if inner is not None and parameter_free_loss_class(inner):
                return taint if taint is not None else arg_status()
            if forward_callee(call) is not None:
                return taint  # `enc.to(dev)(x)`: a module call, as `enc(x)` below
            return None
        if isinstance(func, ast.Name):
            name = func.id
            if name in ELEMENT_BUILTINS or name[:1].isupper() or name in self._grad_enabling_functions:
                return None
            if _getter(call, name):
                return None
            if name == "sum":
                return taint if taint is not None else arg_status()
            if (CRITERION_NAME.match(name) or LOSS_FUNCTION_NAME.match(name)) and not self._may_learn(name):
                return taint if taint is not None else arg_status()
        return taint  # a module or helper call: grad-free inside a region, unknown outside

    def _may_learn(self, name: str) -> bool:
        """Whether the criterion ``name`` (``criterion``, ``self.loss_fn``, ``kd_loss``) may hold
        parameters, judged from what this file binds to that name: a criterion built from a
        class that is not a parameter-free ``torch.nn`` loss (``CenterLoss(...)``,
        ``losses.ArcFaceLoss(...)``, ``nn.AdaptiveLogSoftmaxWithLoss``), a value of unknown origin,
        or a function of this file that calls a module it does not receive as an argument
        (``def d_loss(real, fake): return bce(D(real), ...)``), or a name that says so
        (``center_loss``, ``disc_loss_fn``, ``adv_criterion``). Any other name this file never binds
        (a parameter, an import) keeps the assumption that a criterion adds no history."""
        return name in _learning_criteria(self.facts) or bool(LEARNED_CRITERION.search(name))

    # -- differentiation sites ---------------------------------------------------------------
    def _record_sites(self, stmt: ast.stmt, state: dict, region) -> None:
        # Loops are analysed to a fixed point, so a statement is visited many times: its calls
        # are collected once per file.
        for call in _calls_by_statement(self.facts).get(stmt, ()):
            site = self._site(call, stmt, state)
            if site is not None:
                self.sites[call] = site

    def _site(self, call: ast.Call, stmt, state) -> Site | None:
        site = self._differentiation(call, stmt, state)
        if site is not None and caught(self.facts, call, "RuntimeError"):
            return None  # the code expects the differentiation to fail there
        return site

    def _differentiation(self, call: ast.Call, stmt, state) -> Site | None:
        found = backward_tensor(self.facts, call)
        if found is not None:
            kind, tensor = found
            site = Site(call, kind, tensor, stmt)
            site.status = self.eval(tensor, state, self.region_at(call), stmt)
            return site
        # A file function that differentiates (what it computes from) some of its arguments.
        callee = file_callee(self.facts, call)
        summary = self.flow.summary(callee) if callee is not None and callee is not self.func else None
        if not summary or not summary.differentiates:
            return None
        bound = self.flow.bind_arguments(callee, call)
        if bound is None:
            return None
        region = self.region_at(call)
        for inner in summary.differentiates:
            status = self._instantiate(inner.status, bound, state, region, stmt)
            if status is not None:
                params = [m.name for m in inner.status if isinstance(m, Param)]
                tensor = next((bound[p] for p in params if bound.get(p) is not None), call)
                return Site(call, inner.kind, tensor, stmt, status, via=inner)
        return None

    def _instantiate(self, status: Status, bound: dict, state: dict, region, stmt) -> Status:
        """A summary's status at a call: each :class:`Param` replaced by its argument's status."""
        if status is None:
            return None
        parts: list[Status] = [frozenset(m for m in status if not isinstance(m, Param))]
        for member in status:
            if isinstance(member, Param):
                arg = bound.get(member.name)
                if arg is None:
                    return None  # a default or **kwargs: unknown
                parts.append(self.eval(arg, state, region, stmt))
        return combine(*parts)

    def _call_of_file_function(self, call: ast.Call, state: dict, region, stmt) -> Status:
        """What a call of a file function returns, from its summary (None: unknown)."""
        callee = file_callee(self.facts, call)
        if callee is None or callee is self.func:
            return None
        summary = self.flow.summary(callee)
        if summary is None or summary.returns is None:
            return None
        bound = self.flow.bind_arguments(callee, call)
        return None if bound is None else self._instantiate(summary.returns, bound, state, region, stmt)

    def _scaled_loss(self, manager: ast.expr, state: dict, stmt) -> Status:
        """``with amp.scale_loss(loss, opt) as scaled:``: ``scaled`` carries ``loss``'s history."""
        if isinstance(manager, ast.Call) and isinstance(manager.func, ast.Attribute) and manager.func.attr == "scale_loss":
            if manager.args:
                return self.eval(manager.args[0], state, None, stmt)
        return None



def _getter(call: ast.Call, name: str) -> bool:
    """``model.get_weight()``, ``get_parameter("w")``: hands back a tensor that already exists (a
    parameter, which requires grad even under ``no_grad``), unlike ``get_features(x)``."""
    if not name.startswith("get"):
        return False
    return (not call.args and not call.keywords) or "param" in name.lower() or "weight" in name.lower()



_BUILTINS = frozenset(dir(__import__("builtins")))


def _learning_criteria(facts: FileFacts) -> frozenset[str]:
    """Names this file binds to a criterion that may hold parameters (see ``_may_learn``)."""
    return facts.memo(("gradflow.learning_criteria",), lambda: _find_learning_criteria(facts))


def _find_learning_criteria(facts: FileFacts) -> frozenset[str]:
    bound: dict[str, list] = {}
    for node in facts.function_of:  # every node of the file, already collected
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, (ast.Name, ast.Attribute)):
                    last = target.id if isinstance(target, ast.Name) else target.attr
                    bound.setdefault(last, []).append(node.value)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            bound.setdefault(node.name, []).append(node)
    out = set()
    for name, values in bound.items():
        if not (CRITERION_NAME.match(name) or LOSS_FUNCTION_NAME.match(name)):
            continue
        if any(_may_hold_parameters(facts, v, bound) for v in values):
            out.add(name)
    return frozenset(out)


def _may_hold_parameters(facts: FileFacts, value: ast.AST, bound: dict) -> bool:
    if isinstance(value, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        return _calls_foreign_module(facts, value, bound)
    if isinstance(value, ast.Call):
        qual = facts.qualname(value.func) if isinstance(value.func, (ast.Name, ast.Attribute)) else None
        if qual is None:
            return True
        torch_function = qual.startswith("torch.") and not qual.rpartition(".")[2][:1].isupper()
        return not (parameter_free_loss_class(qual) or torch_function)
    if isinstance(value, (ast.Name, ast.Attribute)):  # `loss_fn = F.cross_entropy`
        qual = facts.qualname(value)
        return qual is None or not qual.startswith("torch.")
    return not isinstance(value, ast.Constant)  # `criterion = None` placeholders are harmless


def _calls_foreign_module(facts: FileFacts, func, bound: dict) -> bool:
    """A function that calls something it neither receives nor makes: a global model, ``self.net``
    (torch, builtins and parameter-free criteria of this file excepted)."""
    local = parameter_names(func)
    local |= {n.id for n in ast.walk(func) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    local.discard("self")
    for node in ast.walk(func):
        if not isinstance(node, ast.Call):
            continue
        qual = facts.qualname(node.func) if isinstance(node.func, (ast.Name, ast.Attribute)) else None
        if qual is not None and qual.startswith("torch."):
            continue
        root = node.func
        while isinstance(root, (ast.Attribute, ast.Subscript, ast.Call)):
            root = root.func if isinstance(root, ast.Call) else root.value
        if not isinstance(root, ast.Name):
            continue  # (a + b).sum(): a method of a computed value
        if root.id in local or (root is node.func and root.id in BUILTINS):
            continue
        root_qual = facts.qualname(root)
        if root_qual is not None and (root_qual == "torch" or root_qual.startswith("torch.")):
            continue
        values = bound.get(root.id, ())
        if (
            root is node.func
            and CRITERION_NAME.match(root.id)
            and values
            and not any(isinstance(v, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) for v in values)
            and not any(_may_hold_parameters(facts, v, {}) for v in values)
        ):
            continue  # `criterion(out, y)` with `criterion = nn.CrossEntropyLoss()` in this file
        if isinstance(node.func, ast.Attribute) and root.id in ("math", "np", "numpy"):
            continue
        return True
    return False


def _calls_by_statement(facts: FileFacts) -> dict[ast.stmt, list[ast.Call]]:
    """Each statement's own calls (in its own expressions: not in nested statements or lambdas),
    for the whole file in one pass over the calls the facts already hold; the fixed-point loop
    visits statements many times."""
    def compute():
        out: dict[ast.stmt, list[ast.Call]] = {}
        parents = facts.parents
        for call in facts.calls:
            node = parents.get(call)
            while node is not None and not isinstance(node, (ast.stmt, ast.Lambda)):
                node = parents.get(node)
            if isinstance(node, ast.stmt):
                out.setdefault(node, []).append(call)
        return out

    return facts.memo(("gradflow.calls_by_statement",), compute)


def _stored_names(stmt: ast.AST) -> set[str]:
    names = {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del))}
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        names.add(stmt.name)
    return names


def _parameters(func) -> list[str]:
    if func is None:
        return []
    a = func.args
    return [p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg) if p is not None]


def _grad_enabling_functions(facts: FileFacts) -> frozenset[str]:
    """Functions of this file that switch grad on themselves: their results may carry history."""

    def compute():
        names = set()
        for region in facts.regions:
            if region.mode in ("enabled", "conditional"):
                funcs = [region.owner] if region.kind == "decorator" else list(facts.enclosing_functions(region.owner))
                names.update(f.name for f in funcs if hasattr(f, "name"))
        return frozenset(names)

    return facts.memo(("gradflow.grad_enabling_functions",), compute)


def flow(facts: FileFacts) -> Flow:
    """The file's data flow as it is (no hypothesis), shared by every rule."""
    return facts.memo(("gradflow.flow",), lambda: Flow(facts))


def analyses(facts: FileFacts, hypothesis: Flow | None = None) -> list[Analysis]:
    """The grad-free analysis of every scope that differentiates something, directly or by
    calling a file function that differentiates its arguments (cached for the file as it is)."""
    if hypothesis is not None:
        return _analyses(facts, hypothesis)
    return facts.memo(("gradflow.analyses",), lambda: _analyses(facts, flow(facts)))


def _analyses(facts: FileFacts, the_flow: Flow) -> list[Analysis]:
    scopes = [None, *facts.functions]
    chosen = [f for f in scopes if _has_site_call(facts, f)]
    if not chosen:
        return []
    # Callers of functions that differentiate an argument differentiate too (to a fixed point).
    names: set[str] = set()
    todo = [f for f in chosen if f is not None]
    while todo:
        func = todo.pop()
        summary = the_flow.summary(func)
        if summary and summary.differentiates and func.name not in names:
            names.add(func.name)
            for scope in scopes:
                if scope not in chosen and _calls_name(facts, scope, func.name):
                    chosen.append(scope)
                    if scope is not None:
                        todo.append(scope)
    out = []
    for func in scopes:
        if func in chosen and not _toggles_grad_mode(facts, func) and not isinstance(func, ast.Lambda):
            out.append(the_flow.analyse(func))
    return out


def _calls_name(facts: FileFacts, scope, name: str) -> bool:
    for call in facts.calls_in(scope):
        func = call.func
        if (isinstance(func, ast.Name) and func.id == name) or (isinstance(func, ast.Attribute) and func.attr == name):
            return True
    return False


def _toggles_grad_mode(facts: FileFacts, func) -> bool:
    """A bare ``torch.set_grad_enabled(x)`` statement (the toggle hack, GF201/GF202) makes the
    ``with`` regions an unreliable guide to the mode: such functions are not analysed."""
    return any(
        isinstance(stmt, ast.Expr)
        and isinstance(stmt.value, ast.Call)
        and facts.call_qualname(stmt.value) in ("torch.set_grad_enabled", "torch._C._set_grad_enabled")
        for stmt in facts.statements(func)
    )


def _has_site_call(facts: FileFacts, func) -> bool:
    if func is not None and getattr(func, "name", None) == "training_step" and framework_method(facts, func):
        return True
    for name in ("backward", "retain_grad", "manual_backward"):
        if facts.method_calls_in(func, name):
            return True
    return any(
        facts.call_qualname(c) in ("torch.autograd.grad", "torch.autograd.backward")
        for c in facts.calls_in(func)
        # (a call of an attribute is one of them only when named so: skip resolving the others)
        if isinstance(c.func, ast.Name) or (isinstance(c.func, ast.Attribute) and c.func.attr in ("grad", "backward"))
    )


def short_code(facts: FileFacts, node: ast.AST, limit: int = 60) -> str:
    """The node's source on one line, shortened for messages."""
    text = " ".join(facts.segment(node).split()) or "the tensor"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def tainting_with_regions(facts: FileFacts, site: Site) -> list[GradRegion]:
    """Grad-disabled ``with`` regions (not nested in another disabled region) a site's tensor comes from."""
    if not site.status:
        return []
    out = []
    for region in facts.regions:
        if region.owner in site.status and region.kind == "with" and region.disables:
            if not any(r.disables for r in facts.regions_around(region.owner)):
                out.append(region)
    return out


def overbroad_block_feeds(facts: FileFacts, site: Site) -> bool:
    """A ``.backward()`` (here or in a called function) fed by a grad-disabled ``with`` block:
    the shape GF103 (overbroad-no-grad) reports and can rewrite."""
    return site.kind == "backward" and bool(tainting_with_regions(facts, site))

