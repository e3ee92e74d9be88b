"""GF102 backward-in-no-grad, and the grad-free analysis it shares with GF103.

The analysis walks one function's statements in execution order and tracks, per name, whether
the value it holds is *definitely* free of autograd history ("grad-free"): computed inside a
grad-disabled region, or derived from such values only through operations that cannot add
history (tensor methods, torch functions, loss criteria, data such as labels). Everything else
is "unknown" (it may require grad), and unknown always wins: the rules fire only when every
path to the differentiation site leaves the tensor grad-free. Branches are joined (a name is
grad-free after an ``if`` only when it is grad-free in both arms), loops are iterated to a fixed
point with ``continue``/``break`` states joined in, and any construct not modelled makes the
names it binds unknown.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Iterable

from gradfix.facts import FileFacts, GradRegion, dotted_name, literal_bool, target_names
from gradfix.rule import Invalid, Rule, Valid

# A status is a frozenset of grad-disabled regions (their owner nodes) the value was computed
# in: empty = grad-free data (labels, constants), non-empty = grad-free because of those
# regions. ``None`` = unknown: the value may carry autograd history.
Status = frozenset | None
NEUTRAL: frozenset = frozenset()

# Methods returning a view of, or the very same tensor as, the receiver: under ``no_grad`` a
# view of a tensor that requires grad still requires grad (pinned in the facts tests).
VIEW_METHODS = frozenset(
    "view view_as reshape reshape_as t transpose permute squeeze unsqueeze expand expand_as "
    "narrow select unbind split chunk flatten unflatten contiguous to cuda cpu float double "
    "half bfloat16 long int bool type type_as as_strided movedim swapaxes unfold".split()
)
# Methods that compute a new tensor from the receiver and their arguments (no parameters).
COMPUTE_METHODS = frozenset(
    "sum mean pow exp log log1p abs norm softmax log_softmax sigmoid tanh relu clamp clamp_min "
    "clamp_max max min argmax argmin std var prod cumsum neg sqrt rsqrt square clone masked_fill "
    "gather index_select add sub mul div matmul mm bmm dot sign floor ceil round topk sort "
    "logsumexp amax amin nansum nanmean repeat roll flip where".split()
) - {"argmax", "argmin"}
# Methods whose result never carries history (detached copies, shapes, integer/bool results).
DETACHING_METHODS = frozenset(
    "detach item tolist numpy size dim ndimension numel nelement stride element_size get_device "
    "eq ne gt lt ge le isnan isinf isfinite argmax argmin any all nonzero".split()
)
# Calls that hand back an object that already exists (it may carry history).
ELEMENT_BUILTINS = frozenset({"max", "min", "next", "getattr", "iter", "list", "tuple", "dict", "sorted", "reversed", "zip", "enumerate", "vars"})
ELEMENT_METHODS = frozenset({"get", "pop", "popitem", "setdefault", "values", "items", "keys", "copy", "__getitem__"})
TORCH_VIEW_FUNCTIONS = frozenset(
    f"torch.{n}" for n in "reshape squeeze unsqueeze transpose permute flatten narrow select t chunk split unbind".split()
)
# Loss criteria: instances named like a criterion (``criterion``, ``self.loss_fn``) and, for
# plain function names only, ``*_loss`` helpers. ``self.model.loss(...)``/``self.loss(...)``
# may run the model, so attribute calls need criterion-style names.
CRITERION_NAME = re.compile(
    r"^(crit|criterion|criteria|criterions|loss_?fn|loss_?func|loss_function|loss_module"
    r"|.*_(crit|criterion|loss_?fn|loss_?func)|criterion_.*)$",
    re.I,
)
LOSS_FUNCTION_NAME = re.compile(r"^(.*_)?loss(es)?$", re.I)
# Criteria whose name says they run a discriminator/critic or hold learned weights (centres,
# class proxies, margin heads): they may add history of their own.
LEARNED_CRITERION = re.compile(r"disc|adv|gan|critic|center|centre|arc_?face|cos_?face|proxy|margin|^d_|_d_|^g_|_g_", re.I)
# Function parameters that hold data (never autograd history in training code).
DATA_PARAM = re.compile(
    r"^(x|xb|y|yb|y_?true|inputs?|images?|imgs?|batch|samples?|data|targets?|labels?|gts?|masks?"
    r"|.*_(labels?|targets?|gts?|masks?|ids))$",
    re.I,
)
# Loop iterables that yield data batches.
DATA_ITERABLE = re.compile(r"loader|batch|data|dataset|\bdl\b|\bds\b|sampler|stream|sample", re.I)
PARAMETER_ITERATORS = frozenset({"parameters", "named_parameters", "modules", "named_modules", "children", "named_children", "buffers", "named_buffers", "state_dict"})


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


@dataclass
class Site:
    """A call that needs its tensor to carry history: ``t.backward()``, ``autograd.grad(t)``..."""

    call: ast.Call
    kind: str  # "backward" (method), "autograd.backward", "autograd.grad", "retain_grad"
    tensor: ast.expr
    stmt: ast.stmt
    status: Status = None


@dataclass
class Analysis:
    """The result for one function (None: module level)."""

    func: ast.AST | None
    sites: list[Site] = field(default_factory=list)


class GradFreeAnalysis:
    """Runs the walk described in the module docstring over one function.

    ``ignore``: grad-disabled regions to treat as absent (a hypothetical fix drops them).
    ``detached``: statements whose bound names, or expressions whose values, are grad-free data
    (a hypothetical fix detaches them).
    """

    def __init__(self, facts: FileFacts, func, ignore=frozenset(), detached=frozenset()):
        self.facts = facts
        self.func = func
        self.ignore = ignore
        self.detached = detached
        self.sites: dict[ast.Call, Site] = {}
        self._loops: list[tuple[list, list]] = []
        self._params = _parameters(func)
        self._grad_enabling_functions = _grad_enabling_functions(facts)

    def run(self) -> Analysis:
        body = getattr(self.func, "body", None) if self.func is not None else self.facts.tree.body
        if not isinstance(body, list):  # a lambda
            return Analysis(self.func)
        state = {p: NEUTRAL for p in self._params if DATA_PARAM.match(p)}
        self.block(body, state)
        return Analysis(self.func, sorted(self.sites.values(), key=lambda s: (s.call.lineno, s.call.col_offset)))

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
                    self.bind(item.optional_vars, None, None, state)
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
        elif isinstance(stmt, (ast.Return, ast.Raise, ast.Pass, ast.Assert, ast.Global, ast.Nonlocal, ast.Import, ast.ImportFrom)):
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
        if _data_iterable(iterable):
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
        if isinstance(func, ast.Attribute):
            method = func.attr
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
            if inner is not None and _parameter_free_loss_class(inner):
                return taint if taint is not None else arg_status()
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
            site = self._site(call, stmt)
            if site is not None:
                site.status = self.eval(site.tensor, state, self.region_at(call), stmt)
                self.sites[call] = site

    def _site(self, call: ast.Call, stmt) -> Site | None:
        func = call.func
        qual = self.facts.call_qualname(call)
        if qual in ("torch.autograd.grad", "torch.autograd.backward"):
            tensor = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg in ("outputs", "tensors")), None)
            if tensor is None:
                return None
            return Site(call, qual.replace("torch.", ""), tensor, stmt)
        if isinstance(func, ast.Attribute) and func.attr in ("backward", "retain_grad") and qual is None:
            return Site(call, func.attr, func.value, stmt)
        return None


# Calls whose result is an iterable over data when their arguments are (``enumerate(loader)``).
DATA_WRAPPERS = frozenset({"enumerate", "zip", "iter", "tqdm", "trange", "list", "tuple", "sorted", "reversed", "islice", "cycle", "chain"})


def _getter(call: ast.Call, name: str) -> bool:
    """``model.get_weight()``, ``get_parameter("w")``: hands back a tensor that already exists (a
    parameter, which requires grad even under ``no_grad``), unlike ``get_features(x)``."""
    if not name.startswith("get"):
        return False
    return (not call.args and not call.keywords) or "param" in name.lower() or "weight" in name.lower()


def _data_iterable(node: ast.AST) -> bool:
    """A loop iterable that yields data batches: ``loader``, ``self.train_loader``,
    ``enumerate(tqdm(loader))``, ``range(n)``, ``memory.sample(32)``, ``get_batch(i)``. The name
    decides, not any word in the source: ``student(batch)`` or ``model.forward_batches(data)``
    yield model outputs that may carry history."""
    if isinstance(node, ast.Subscript):
        return _data_iterable(node.value)
    if isinstance(node, (ast.Name, ast.Attribute)):
        name = dotted_name(node)
        return name is not None and bool(DATA_ITERABLE.search(name.rpartition(".")[2]))
    if isinstance(node, ast.Call):
        name = dotted_name(node.func)
        if name is None:
            return False
        last = name.rpartition(".")[2]
        if last == "range":
            return True
        if last in DATA_WRAPPERS:
            args = [a for a in node.args if not isinstance(a, ast.Constant)]
            return bool(args) and all(_data_iterable(a) for a in args)
        return bool(DATA_ITERABLE.search(last))
    return False


def _parameter_free_loss_class(qualname: str) -> bool:
    """A ``torch.nn`` loss class whose instances hold no parameters."""
    return qualname.startswith("torch.nn.") and qualname.endswith("Loss") and "AdaptiveLogSoftmax" not in qualname


_BUILTINS = frozenset(dir(__import__("builtins")))


def _learning_criteria(facts: FileFacts) -> frozenset[str]:
    """Names this file binds to a criterion that may hold parameters (see ``_may_learn``)."""
    cached = facts.__dict__.get("_gf102_learning")
    if cached is not None:
        return cached
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
    facts.__dict__["_gf102_learning"] = frozenset(out)
    return facts.__dict__["_gf102_learning"]


def _may_hold_parameters(facts: FileFacts, value: ast.AST, bound: dict) -> bool:
    if isinstance(value, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        return _calls_foreign_module(facts, value, bound)
    if isinstance(value, ast.Call):
        qual = facts.qualname(value.func) if isinstance(value.func, (ast.Name, ast.Attribute)) else None
        if qual is None:
            return True
        torch_function = qual.startswith("torch.") and not qual.rpartition(".")[2][:1].isupper()
        return not (_parameter_free_loss_class(qual) or torch_function)
    if isinstance(value, (ast.Name, ast.Attribute)):  # `loss_fn = F.cross_entropy`
        qual = facts.qualname(value)
        return qual is None or not qual.startswith("torch.")
    return not isinstance(value, ast.Constant)  # `criterion = None` placeholders are harmless


def _calls_foreign_module(facts: FileFacts, func, bound: dict) -> bool:
    """A function that calls something it neither receives nor makes: a global model, ``self.net``
    (torch, builtins and parameter-free criteria of this file excepted)."""
    a = func.args
    local = {p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg) if p is not None}
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
        if root.id in local or (root is node.func and root.id in _BUILTINS):
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
    cached = facts.__dict__.get("_gf102_calls_by_statement")
    if cached is None:
        cached = {}
        parents = facts.parents
        for call in facts.calls:
            node = parents.get(call)
            while node is not None and not isinstance(node, (ast.stmt, ast.Lambda)):
                node = parents.get(node)
            if isinstance(node, ast.stmt):
                cached.setdefault(node, []).append(call)
        facts.__dict__["_gf102_calls_by_statement"] = cached
    return cached


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
    cache = facts.__dict__.setdefault("_gf102_enabling", None)
    if cache is not None:
        return cache
    names = set()
    for region in facts.regions:
        if region.mode in ("enabled", "conditional"):
            funcs = [region.owner] if region.kind == "decorator" else list(facts.enclosing_functions(region.owner))
            names.update(f.name for f in funcs if hasattr(f, "name"))
    facts.__dict__["_gf102_enabling"] = frozenset(names)
    return facts.__dict__["_gf102_enabling"]


def analyses(facts: FileFacts) -> list[Analysis]:
    """The grad-free analysis of every function that differentiates something (cached)."""
    cached = facts.__dict__.get("_gf102_analyses")
    if cached is not None:
        return cached
    out = []
    for func in [None, *facts.functions]:
        if _has_site_call(facts, func) and not _toggles_grad_mode(facts, func):
            out.append(GradFreeAnalysis(facts, func).run())
    facts.__dict__["_gf102_analyses"] = out
    return out


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
    for name in ("backward", "retain_grad"):
        if facts.method_calls_in(func, name):
            return True
    return any(
        facts.call_qualname(c) in ("torch.autograd.grad", "torch.autograd.backward") for c in facts.calls_in(func)
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


def gf103_claims(facts: FileFacts, site: Site) -> bool:
    """GF103 reports this site (a ``.backward()`` fed by an overbroad ``with`` block)."""
    return site.kind == "backward" and bool(tainting_with_regions(facts, site))


_WHY = {
    "backward": "`{t}.backward()` raises RuntimeError (element 0 of tensors does not require grad and does not have a grad_fn)",
    "autograd.backward": "`torch.autograd.backward` raises RuntimeError (the tensor does not require grad and has no grad_fn)",
    "autograd.grad": "`torch.autograd.grad` raises RuntimeError (the output does not require grad and has no grad_fn)",
    "retain_grad": "`{t}.retain_grad()` raises RuntimeError (can't retain_grad on Tensor that has requires_grad=False)",
}


class BackwardInNoGrad(Rule):
    """
    ## What it does
    Finds `.backward()`, `torch.autograd.grad(...)`, `torch.autograd.backward(...)` and
    `.retain_grad()` applied to a tensor that was computed inside a grad-disabled region
    (`with torch.no_grad()`, `inference_mode()`, `set_grad_enabled(False)`, or a function
    decorated with one of them), following names through assignments within the function.

    ## Why is this bad?
    Nothing computed under `no_grad` records a graph: the tensor has no `grad_fn`, so
    `backward()` raises `RuntimeError: element 0 of tensors does not require grad and does
    not have a grad_fn`, and `retain_grad()` raises `can't retain_grad on Tensor that has
    requires_grad=False` (both pinned in `tests/facts/test_gf102_facts.py`).

    Calling `loss.backward()` *inside* a `no_grad` block on a graph built before the block is
    fine and is not reported; neither is a name re-assigned from a grad-enabled computation
    before it is differentiated. The rule fires only when every path to the call leaves the
    tensor grad-free; values from function parameters or opaque calls are assumed to carry
    history. Also silent: criteria that may hold parameters (a class with weights such as a
    center loss, a loss helper that runs a model of its own), getters that hand back an
    existing parameter under `no_grad` (`model.get_parameter("w")`), and in-place methods
    (`x = x.clamp_(0, 1)` keeps `x`'s history).

    ## Example
    ```python
    @torch.no_grad()
    def probe(model, x):
        h = model.encoder(x)
        h.retain_grad()
    ```

    ## Use instead
    ```python
    def probe(model, x):
        h = model.encoder(x)
        h.retain_grad()
    ```

    ## Fix safety
    No fix: whether the region or the differentiation is the mistake is a design decision.
    The message names the region's line. A `.backward()` fed by a grad-disabled `with` block
    in the same function is reported by GF103 (overbroad-no-grad), which can rewrite it;
    GF102 does not report it again.
    """

    code = "GF102"
    name = "backward-in-no-grad"
    summary = "Differentiating a tensor computed under no_grad"
    fix_safety = None
    triggers = ("backward", "retain_grad", "autograd")

    VALID = [
        # A graph built before the block may be differentiated inside it.
        Valid("import torch\ndef step(model, x, opt):\n    loss = model(x).sum()\n    with torch.no_grad():\n        loss.backward()\n        opt.step()\n"),
        # Re-assigned from a grad-enabled computation before the backward.
        Valid(
            "import torch\ndef f(model, x):\n    with torch.no_grad():\n        h = model(x)\n    h = model(x)\n    h.retain_grad()\n"
        ),
        # Made a leaf that requires grad again.
        Valid("import torch\ndef f(model, x):\n    with torch.no_grad():\n        h = model(x)\n    h.requires_grad_()\n    h.retain_grad()\n"),
        # An enable_grad block inside no_grad records a graph.
        Valid(
            "import torch\n@torch.no_grad()\ndef f(model, x):\n    with torch.enable_grad():\n        out = model(x)\n"
            "        g = torch.autograd.grad(out.sum(), x)\n"
        ),
        # Only one branch computes under no_grad.
        Valid(
            "import torch\ndef f(model, x, frozen):\n    if frozen:\n        with torch.no_grad():\n            h = model(x)\n"
            "    else:\n        h = model(x)\n    h.retain_grad()\n"
        ),
        # A conditional region is not a grad-disabled one.
        Valid("import torch\n@torch.set_grad_enabled(mode)\ndef f(model, x):\n    h = model(x)\n    h.retain_grad()\n"),
        # A local `torch` that is not the module.
        Valid("def f(torch, model, x):\n    with torch.no_grad():\n        h = model(x)\n    h.retain_grad()\n"),
        # Views of a tensor that requires grad still require grad under no_grad.
        Valid("import torch\n@torch.no_grad()\ndef f(w):\n    v = w.view(-1)\n    v.retain_grad()\n"),
        # The toggle hack (GF202) switches grad back on inside the block: not analysed.
        Valid(
            "import torch as T\ndef saliency(model, x):\n    with T.no_grad():\n        T.set_grad_enabled(True)\n"
            "        score = model(x).max()\n        g = T.autograd.grad(score, x)\n        T.set_grad_enabled(False)\n"
        ),
        # A helper of this file that enables grad itself.
        Valid(
            "import torch\n@torch.enable_grad()\ndef loss_of(model, x):\n    return model(x).sum()\n"
            "def step(model, x):\n    with torch.no_grad():\n        loss = loss_of(model, x)\n    loss.retain_grad()\n"
        ),
        # A criterion that holds parameters (learned class centres) gives its loss a grad_fn
        # even on frozen features.
        Valid(
            "import torch\ndef probe(model, center_loss, x, y):\n    with torch.no_grad():\n        feats = model(x)\n"
            "    return torch.autograd.grad(center_loss(feats, y), center_loss.centers)\n"
        ),
        Valid(
            "import torch\nfrom losses import CenterLoss\ncrit = CenterLoss(10, 2)\ndef probe(model, x, y):\n    with torch.no_grad():\n"
            "        feats = model(x)\n    return torch.autograd.grad(crit(feats, y), crit.centers)\n"
        ),
        # An in-place method returns its receiver: a leaf that requires grad stays one.
        Valid(
            "import torch\ndef fit_image(img, target_net, ref):\n    img.requires_grad_(True)\n    with torch.no_grad():\n"
            "        target = target_net(ref)\n        img = img.clamp_(0, 1)\n    loss = ((img - target) ** 2).sum()\n    loss.backward()\n"
        ),
        # A getter under no_grad hands back an existing parameter, which requires grad.
        Valid(
            "import torch\ndef reg_step(model, opt):\n    with torch.no_grad():\n        w = model.get_weight()\n"
            "        b = model.get_parameter('bias')\n    penalty = (w ** 2).sum() + b.abs().sum()\n    penalty.backward()\n"
        ),
        # A leaf created with requires_grad=True under no_grad requires grad.
        Valid("import torch\n@torch.no_grad()\ndef f():\n    w = torch.zeros(3, requires_grad=True)\n    w.retain_grad()\n"),
    ]
    INVALID = [
        Invalid(
            "import torch\n@torch.no_grad()\ndef probe(model, x):\n    h = model.encoder(x)\n    h.retain_grad()\n",
            None,
        ),
        Invalid(
            "import torch as T\ndef saliency(model, x):\n    with T.no_grad():\n        score = model(x).max()\n"
            "    return T.autograd.grad(score, x)\n",
            None,
        ),
        Invalid(
            "from torch.autograd.grad_mode import no_grad\n@no_grad()\ndef step(model, x, y, crit):\n"
            "    loss = crit(model(x), y)\n    loss.backward()\n",
            None,
        ),
        Invalid(
            "import torch\ndef f(model, x):\n    with torch.inference_mode():\n        h = model(x)\n    h = h * 2\n    h.retain_grad()\n",
            None,
        ),
        Invalid(
            "import torch\ndef f(model, loader):\n    for x, y in loader:\n        with torch.set_grad_enabled(False):\n"
            "            feats = model(x)\n        torch.autograd.backward([feats.sum()])\n",
            None,
        ),
    ]

    def check(self, facts):
        for analysis in analyses(facts):
            for site in analysis.sites:
                if not site.status or gf103_claims(facts, site):
                    continue
                regions = sorted({r.expr.lineno for r in facts.regions if r.owner in site.status and r.disables})
                where = ", ".join(str(n) for n in regions)
                tensor = short_code(facts, site.tensor)
                yield self.report(
                    facts,
                    site.call,
                    f"`{tensor}` is computed inside the grad-disabled region at line{'s' if len(regions) > 1 else ''} "
                    f"{where}, so it has no grad_fn: " + _WHY[site.kind].format(t=tensor),
                    fix=False,
                    anchors=[site.stmt],
                )

    @staticmethod
    def contract():
        # gradfix verify: no fix; running the original must show the RuntimeError reported.
        from gradfix.verify.contract import Diagnosis, Raises

        return Diagnosis(
            "the original raises the RuntimeError the diagnostic names",
            (Raises("RuntimeError", "does not require grad|retain_grad|Inference tensors"),),
        )
