"""One vocabulary of what training code says: every rule asks these, none spells its own.

- **Training scope**: a function (or module-level code) that calls ``.backward()`` (or
  ``torch.autograd.backward``, ``accelerator.backward(loss)``, ``self.manual_backward(loss)``)
  or steps an optimizer (``opt.step()``, ``scaler.step(opt)``).
- **Environment step** (``env.step(action)``) is *not* an optimizer step: it advances a
  simulator and touches no parameter. A scope that steps an environment is *acting*
  (reinforcement-learning rollouts): part of training, but it computes no gradient, and the
  mode of the networks it runs is the caller's (exploration through noisy layers/dropout).
  Rules that need "this is training, not evaluation" ask :func:`acts_in_environment` as well.
- **Caller-owned mode**: functions that run under whatever mode their caller set: ``forward``,
  ``__call__``, framework methods (Lightning ``*_step``/``on_*`` hooks, Ignite handlers,
  Accelerate/Keras-like callbacks) and hooks registered with ``register_*_hook``.
- **Forward calls**: the module whose forward a call runs (:func:`forward_callee`): ``model(x)``,
  ``model.forward(x)``, and a call of a chain of ``nn.Module`` methods that return the module
  itself (``model.to(device)(x)``, ``model.cuda().eval()(x)``).
- **Tensor provenance**: fresh constructors (``torch.zeros``...), loader batches (loop targets
  over something named like a loader), parameters (``.parameters()``), ``.data``.
"""

from __future__ import annotations

import ast
import re

from gradfix.analysis.project import MODULE_RETURNS_SELF  # nn.Module methods that return the module
from gradfix.facts import FileFacts, dotted_name, literal_bool, parameter_names

FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
LOOPS = (ast.For, ast.AsyncFor, ast.While)

# -- optimizer steps, backward calls, environments --------------------------------------------

_OPTIMIZER_RECEIVER = re.compile(r"opt|scaler|solver", re.I)
_SCHEDULER_RECEIVER = re.compile(r"sched", re.I)
_ENV_RECEIVER = re.compile(r"env", re.I)
#: Receivers whose ``.backward(loss)`` method backpropagates ``loss`` (Accelerate, Fabric, DeepSpeed).
BACKWARD_RUNNERS = re.compile(r"^(accelerator|fabric|engine|model_engine|deepspeed_engine|self\.accelerator|self\.fabric)$")


def is_optimizer_step(call: ast.Call) -> bool:
    """``opt.step()``, ``self.optimizer.step()``, ``scaler.step(opt)``; not ``scheduler.step()``,
    not ``env.step(action)``."""
    func = call.func
    if not isinstance(func, ast.Attribute) or func.attr != "step":
        return False
    receiver = dotted_name(func.value)
    if receiver is None:
        return False
    last = receiver.rsplit(".", 1)[-1]
    return bool(_OPTIMIZER_RECEIVER.search(last)) and not _SCHEDULER_RECEIVER.search(last)


def is_environment_step(call: ast.Call) -> bool:
    func = call.func
    if not isinstance(func, ast.Attribute) or func.attr != "step":
        return False
    receiver = dotted_name(func.value) or ""
    return bool(_ENV_RECEIVER.search(receiver.rsplit(".", 1)[-1]))


def backward_tensor(facts: FileFacts, call: ast.Call) -> tuple[str, ast.expr] | None:
    """``(kind, tensor)`` when ``call`` differentiates ``tensor``.

    Kinds: ``backward`` (``t.backward()``, ``accelerator.backward(t)``,
    ``self.manual_backward(t)``), ``autograd.backward``, ``autograd.grad``, ``retain_grad``.
    """
    func = call.func
    qual = facts.call_qualname(call)
    if qual in ("torch.autograd.grad", "torch.autograd.backward"):
        keys = ("outputs", "tensors")
        tensor = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg in keys), None)
        return (qual.replace("torch.", ""), tensor) if tensor is not None else None
    if not isinstance(func, ast.Attribute) or qual is not None:
        return None
    if func.attr == "manual_backward" and call.args:
        return ("backward", call.args[0])
    if func.attr == "backward":
        if call.args and BACKWARD_RUNNERS.match(dotted_name(func.value) or ""):
            return ("backward", call.args[0])
        return ("backward", func.value)
    if func.attr == "retain_grad":
        return ("retain_grad", func.value)
    return None


def calls_backward(facts: FileFacts, scope) -> bool:
    return facts.memo(("calls_backward", scope), lambda: _calls_backward(facts, scope))


def _calls_backward(facts: FileFacts, scope) -> bool:
    return bool(_backward_calls(facts, scope))


def _backward_calls(facts: FileFacts, scope) -> list[ast.Call]:
    calls = [m.call for name in ("backward", "manual_backward") for m in facts.method_calls_in(scope, name)]
    # `torch.autograd.backward(t)` is a method call of that name: only a bare name can be
    # another spelling of it (`from torch.autograd import backward as bw`)
    return calls + [c for c in facts.calls_in(scope) if isinstance(c.func, ast.Name) and facts.call_qualname(c) == "torch.autograd.backward"]


def backpropagates_a_loss(facts: FileFacts, scope) -> bool:
    """``scope`` calls a backward that starts from its own loss: ``loss.backward()`` (a
    ``retain_graph=`` aside), ``torch.autograd.backward(loss)``. One handed the gradient of its
    outputs (``torch.autograd.backward(outs, grads)``, ``out.backward(grad)``) passes on a
    gradient computed elsewhere: a chunked vector-Jacobian product inside an autograd object's
    own backward, which trains nothing by itself."""
    for call in _backward_calls(facts, scope):
        loss_first = isinstance(call.func, ast.Name) or call.func.attr == "manual_backward" or facts.call_qualname(call) == "torch.autograd.backward"
        given = call.args[1:] if loss_first else call.args
        if not given and not any(k.arg in ("gradient", "grad_tensors") for k in call.keywords):
            return True
    return False


def parameter_update_loop(facts: FileFacts, node: ast.AST) -> ast.For | None:
    """The outermost loop of an optimizer's update that holds ``node`` in its function: a
    ``for`` over ``X.param_groups`` or over a group's ``['params']`` (``for group in
    self.param_groups: for p in group['params']:``), the loops torch.optim runs under ``no_grad``."""
    found = None
    parent = facts.parents.get(node)
    while parent is not None and not isinstance(parent, (*FUNCTIONS, ast.Lambda, ast.ClassDef)):
        if isinstance(parent, ast.For) and _iterates_parameter_groups(parent.iter):
            found = parent
        parent = facts.parents.get(parent)
    return found


def optimizer_step(facts: FileFacts, node: ast.AST):
    """The optimizer ``step`` method that holds ``node`` (not in a nested def): a method named
    ``step`` with a loop over ``X.param_groups`` or a group's ``['params']``, which torch.optim
    runs whole under ``no_grad`` (its closure under ``enable_grad``); None otherwise."""
    func = facts.function_of.get(node)
    if not isinstance(func, FUNCTIONS) or func.name != "step" or not isinstance(facts.parents.get(func), ast.ClassDef):
        return None
    found = facts.memo(
        ("optimizer_step", func),
        lambda: any(isinstance(s, ast.For) and _iterates_parameter_groups(s.iter) for s in facts.statements(func)),
    )
    return func if found else None


def closure_evaluation(facts: FileFacts, func, stmt: ast.stmt) -> list[ast.stmt] | None:
    """The statements of an optimizer's ``step(closure)`` that re-evaluate the loss: ``loss =
    closure()`` (a call of a parameter of ``func``), alone or under ``if closure is not None:``.
    They need grad mode (the closure calls ``backward()``): torch.optim's ``step()`` runs them
    under ``torch.enable_grad()`` inside its ``@torch.no_grad()``. None: ``stmt`` is not one."""
    if func is None or isinstance(func, ast.Lambda):
        return None
    params = parameter_names(func, star=False) - {"self", "cls"}
    if isinstance(stmt, ast.If) and not stmt.orelse and stmt.body:
        parts = [closure_evaluation(facts, func, s) for s in stmt.body]
        test_names = {n.id for n in ast.walk(stmt.test) if isinstance(n, ast.Name)}
        if all(parts) and test_names <= params and not any(isinstance(n, ast.Call) for n in ast.walk(stmt.test)):
            return [s for part in parts for s in part]
        return None
    if isinstance(stmt, ast.Assign) and all(isinstance(t, ast.Name) for t in stmt.targets):
        value = stmt.value
    elif isinstance(stmt, ast.Expr):
        value = stmt.value
    else:
        return None
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in params and not value.args and not value.keywords:
        return [stmt]
    return None


def optimizer_state(facts: FileFacts, expr: ast.AST, depth: int = 0) -> bool:
    """``expr`` is the optimizer's per-parameter state or read from it: ``self.state[p]``, a
    method or item of it, or a name every assignment reaching it binds to one
    (``slow = param_state["slow"]`` after ``param_state = self.state[p]``): tensors torch.optim
    keeps without grad."""
    from gradfix.analysis.provenance import UNKNOWN, reaching_definitions

    while isinstance(expr, (ast.Attribute, ast.Subscript, ast.Call)):
        if isinstance(expr, ast.Subscript) and isinstance(expr.value, ast.Attribute) and expr.value.attr == "state":
            if isinstance(expr.value.value, ast.Name) and expr.value.value.id == "self":
                return True
        expr = expr.func if isinstance(expr, ast.Call) else expr.value
    func = facts.function_of.get(expr)
    if not isinstance(expr, ast.Name) or depth > 3 or not isinstance(func, FUNCTIONS):
        return False
    definitions = reaching_definitions(facts, func).reaching.get(expr) or {UNKNOWN}
    return all(d is not UNKNOWN and d.kind == "assign" and optimizer_state(facts, d.value, depth + 1) for d in definitions)


def _iterates_parameter_groups(expr: ast.AST) -> bool:
    """``self.param_groups``, ``group['params']``, and those under ``zip``/``enumerate``."""
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id in ("zip", "enumerate"):
        return any(_iterates_parameter_groups(a) for a in expr.args)
    if isinstance(expr, ast.Attribute):
        return expr.attr == "param_groups"
    return (
        isinstance(expr, ast.Subscript)
        and isinstance(expr.slice, ast.Constant)
        and expr.slice.value == "params"
    )


def steps_optimizer(facts: FileFacts, scope) -> bool:
    return facts.memo(("steps_optimizer", scope), lambda: any(is_optimizer_step(c) for c in facts.calls_in(scope)))


def is_training_scope(facts: FileFacts, scope) -> bool:
    """Calls ``.backward()`` or steps an optimizer (an environment step does not count)."""
    return calls_backward(facts, scope) or steps_optimizer(facts, scope)


def optimizer_steps(facts: FileFacts, scope) -> list[ast.Call]:
    return [c for c in facts.calls_in(scope) if is_optimizer_step(c)]


_ACTING_NAME = re.compile(r"(^|_)(act|acts|action|actions|explore|exploration|rollout|rollouts|collect)(_|$)", re.I)


def acts_in_environment(facts: FileFacts, func) -> bool:
    """Reinforcement-learning action selection: an ``act``-like name, or it steps an environment."""
    if func is None:
        return False
    return bool(_ACTING_NAME.search(func.name)) or any(is_environment_step(c) for c in facts.calls_in(func))


# -- forward calls ------------------------------------------------------------------------------


def module_expression(expr: ast.AST) -> str | None:
    """The dotted name of the module ``expr`` evaluates to when it is a name chain, or such a
    chain followed by methods that return the module itself: ``self.net``, ``model.to(dev)``,
    ``model.cuda().eval()`` -> ``self.net``, ``model``, ``model``. Syntax only: whether the name
    is a module at all is the caller's evidence to find (on a tensor, ``x.to(dev)`` is a tensor;
    only a call of it, which a tensor cannot take, makes it a module)."""
    while isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr in MODULE_RETURNS_SELF:
        expr = expr.func.value
    return dotted_name(expr)


def forward_callee(call: ast.Call) -> str | None:
    """The dotted name of what ``call`` runs the forward of, if it is a module: ``m(x)`` and
    ``m.forward(x)`` -> ``m``; ``m.to(dev)(x)``, ``m.float()(x)``, ``m.eval()(x)``,
    ``m.cuda().forward(x)`` -> ``m``; ``self.enc(x)`` -> ``self.enc``; ``f.relu(x)`` -> ``f.relu``
    (a name chain is returned as it is: callers ask whether it is a module, with the same evidence
    for every form). None when the callee is no such chain (``Net()(x)``, ``fns[0](x)``)."""
    func = call.func
    if isinstance(func, ast.Attribute) and func.attr == "forward":
        return module_expression(func.value)
    if isinstance(func, ast.Call):
        return module_expression(func) if isinstance(func.func, ast.Attribute) and func.func.attr in MODULE_RETURNS_SELF else None
    return dotted_name(func)


# -- functions whose caller owns the mode -------------------------------------------------------

#: Framework methods and hooks called by a framework that set the mode before calling them:
#: Lightning (``training_step``, ``validation_step``, ``on_validation_epoch_end``...), Ignite
#: (``*_step``/handlers taking an engine), Accelerate/Keras-style callbacks (``on_*``).
CALLER_OWNS_MODE = re.compile(r"^(forward|__call__|on_\w+|\w+_step|\w+_epoch_(end|start)|\w+_hook)$")
_FRAMEWORK_BASES = re.compile(r"Lightning|\bpl\.|Callback|Hook")
HOOK_REGISTRARS = frozenset(
    {"register_forward_hook", "register_forward_pre_hook", "register_full_backward_hook", "register_backward_hook", "register_hook"}
)


def owner_class(facts: FileFacts, node: ast.AST) -> ast.ClassDef | None:
    """The class whose method (or a def nested in one) holds ``node``; None outside classes."""
    current = facts.parents.get(node)
    while current is not None:
        if isinstance(current, ast.ClassDef):
            return current
        current = facts.parents.get(current)
    return None


def framework_method(facts: FileFacts, func) -> bool:
    """A method of a class deriving from a framework base (LightningModule, a Callback...)."""
    parent = facts.parents.get(func)
    if not isinstance(parent, ast.ClassDef):
        return False
    return any(_FRAMEWORK_BASES.search(facts.segment(b) or "") for b in parent.bases)


def registered_hooks(facts: FileFacts) -> frozenset[str]:
    """Names of this file's functions passed to ``register_*_hook`` (run inside a forward)."""

    def compute():
        out = set()
        for call in facts.calls:
            if isinstance(call.func, ast.Attribute) and call.func.attr in HOOK_REGISTRARS:
                for arg in call.args:
                    name = dotted_name(arg)
                    if name:
                        out.add(name.rsplit(".", 1)[-1])
        return frozenset(out)

    return facts.memo(("registered_hooks",), compute)


def framework_loss(facts: FileFacts, func, ret: ast.Return) -> ast.expr | None:
    """The loss a framework backpropagates from ``return``: a LightningModule's
    ``training_step`` returns the loss, or a dict holding it under ``"loss"``."""
    if func is None or getattr(func, "name", None) != "training_step" or ret.value is None:
        return None
    if not framework_method(facts, func):
        return None
    value = ret.value
    if isinstance(value, ast.Dict):
        return next((v for k, v in zip(value.keys, value.values) if isinstance(k, ast.Constant) and k.value == "loss"), None)
    return None if isinstance(value, ast.Constant) else value


def event_handler(func) -> bool:
    """An Ignite-style handler: ``@trainer.on(Events.EPOCH_COMPLETED)`` (the engine that runs it
    owns the mode; Ignite's evaluators set eval mode themselves)."""
    return any(
        isinstance(d, ast.Call) and isinstance(d.func, ast.Attribute) and d.func.attr in ("on", "add_event_handler")
        for d in getattr(func, "decorator_list", ())
    )


def caller_owns_mode(facts: FileFacts, func) -> bool:
    """``func`` runs in whatever mode its caller set: forward, framework method, hook, handler,
    or a function its enclosing function hands back (``def get_model_fn(model): def model_fn(x):
    ...; return model_fn``): a stand-in for the model's forward, whose caller (often in another
    file) may differentiate what it returns."""
    if func is None:
        return False
    return (
        bool(CALLER_OWNS_MODE.match(func.name))
        or framework_method(facts, func)
        or func.name in registered_hooks(facts)
        or event_handler(func)
        or returned_closure(facts, func)
    )


def returned_closure(facts: FileFacts, func) -> bool:
    """``func`` is defined in a function that returns it (alone or in a tuple)."""
    outer = facts.function_of.get(func)
    return isinstance(outer, FUNCTIONS) and func.name in _returned_names(facts, outer)


def _returned_names(facts: FileFacts, func) -> frozenset[str]:
    """The names ``func``'s own `return` statements give back (alone or in a tuple)."""

    def compute():
        out = set()
        for stmt in facts.statements(func):
            if isinstance(stmt, ast.Return) and stmt.value is not None:
                values = stmt.value.elts if isinstance(stmt.value, ast.Tuple) else [stmt.value]
                out.update(v.id for v in values if isinstance(v, ast.Name))
        return frozenset(out)

    return facts.memo(("vocabulary.returned_names", func), compute)


# -- tensor provenance ---------------------------------------------------------------------------

# Methods returning a view of, or the very same tensor as, the receiver: under ``no_grad`` a
# view of a tensor that requires grad still requires grad (pinned in the facts tests).
VIEW_METHODS = frozenset(
    "view view_as reshape reshape_as t transpose permute squeeze unsqueeze expand expand_as "
    "narrow select unbind split chunk flatten unflatten contiguous to cuda cpu float double "
    "half bfloat16 long int bool type type_as as_strided movedim swapaxes unfold".split()
)
# Methods whose result always shares the receiver's memory (never a copy): an in-place write
# to it writes the receiver (`p.data.narrow(0, 0, k).fill_(0)`; pinned in the facts tests).
STORAGE_VIEWS = frozenset(
    "view view_as narrow select t transpose permute squeeze unsqueeze diagonal expand expand_as "
    "as_strided unflatten movedim swapaxes unfold".split()
)
# Methods that compute a new tensor from the receiver and their arguments (no parameters).
COMPUTE_METHODS = frozenset(
    "sum mean pow exp log log1p abs norm softmax log_softmax sigmoid tanh relu clamp clamp_min "
    "clamp_max max min std var prod cumsum neg sqrt rsqrt square clone masked_fill "
    "gather index_select add sub mul div matmul mm bmm dot sign floor ceil round topk sort "
    "logsumexp amax amin nansum nanmean repeat roll flip where".split()
)
# Methods (and torch functions) whose result is an integer or bool tensor: indices and
# comparisons, which cannot require grad (only floating and complex tensors can).
INTEGER_METHODS = frozenset("eq ne gt lt ge le isnan isinf isfinite argmax argmin argsort any all nonzero".split())
# Methods whose result never carries history (detached copies, shapes, integer/bool results).
DETACHING_METHODS = INTEGER_METHODS | frozenset(
    "detach item tolist numpy size dim ndimension numel nelement stride element_size get_device".split()
)
# Libraries that know nothing of autograd: handed a tensor, they read it (plot it, log it,
# convert it) and can neither make it require grad nor give it a graph.
AUTOGRAD_UNAWARE = frozenset(
    "numpy matplotlib visdom tensorboardX torch.utils.tensorboard wandb PIL cv2 scipy sklearn pandas "
    "seaborn imageio plotly logging".split()
)


def autograd_unaware_call(facts: FileFacts, call: ast.Call) -> bool:
    """``call`` runs a function of an :data:`AUTOGRAD_UNAWARE` library (``plt.plot(x)``,
    ``np.asarray(x)``) or a method of an object every assignment of its name builds with one
    (``viz = Visdom()`` ... ``viz.line(X=x)``; ``writer = SummaryWriter()`` ... ``writer.add_image``)."""
    qual = facts.call_qualname(call)
    if qual is None and isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Name):
        values = _bound_values(facts, call.func.value.id)
        if not values or not all(isinstance(v, ast.Call) for v in values):
            return False
        return all(_unaware(facts.call_qualname(v)) for v in values)
    return _unaware(qual)


def _unaware(qual: str | None) -> bool:
    return qual is not None and any(qual == p or qual.startswith(p + ".") for p in AUTOGRAD_UNAWARE)


PARAMETER_ITERATORS = frozenset(
    {"parameters", "named_parameters", "modules", "named_modules", "children", "named_children", "buffers", "named_buffers", "state_dict"}
)
# Function parameters that hold data (never autograd history in training code).
DATA_PARAM = re.compile(
    r"^(x|xb|y|yb|y_?true|inputs?|images?|imgs?|batch|samples?|data|targets?|labels?|gts?|masks?"
    r"|.*_(labels?|targets?|gts?|masks?|ids))$",
    re.I,
)
# Loop iterables that yield data batches.
DATA_ITERABLE = re.compile(r"loader|batch|data|dataset|\bdl\b|\bds\b|sampler|stream|sample", re.I)
# Calls whose result is an iterable over data when their arguments are (``enumerate(loader)``).
DATA_WRAPPERS = frozenset({"enumerate", "zip", "iter", "tqdm", "trange", "list", "tuple", "sorted", "reversed", "islice", "cycle", "chain"})


def frozen_at(facts: FileFacts, module: str, at: ast.AST) -> bool:
    """Whether every parameter of ``module``, as ``at`` sees it, was set not to require grad
    (``model.requires_grad_(False)``, ``for p in model.parameters(): p.requires_grad = False``
    or ``p.requires_grad_(False)``) by ``at``'s own function, or at module level for a module
    it reads as a global: a call of it records no graph unless its input requires grad (pinned
    in tests/facts/test_gf302_facts.py). Another function's parameter of that name (a
    ``freeze(model)`` helper) is another object."""
    func = facts.function_of.get(at)
    scopes = {func}
    root = module.split(".", 1)[0]
    if func is not None and root not in facts.scope_of_node[func].locals:
        scopes.add(None)  # a global of the module
    return any((module, scope) in _frozen(facts) for scope in scopes)


def _frozen(facts: FileFacts) -> frozenset[tuple[str, object]]:
    """(module, the function that freezes it, None at module level) for each freeze."""

    def compute():
        out = set()
        for m in facts.method_calls:
            if m.method == "requires_grad_" and _false_flag(m.call):
                in_loop = _frozen_by_loop(facts, m.call, m.call.func.value)  # `p.requires_grad_(False)`
                receiver = module_expression(m.call.func.value)
                for name in in_loop or ([receiver] if receiver is not None else []):
                    out.add((name, facts.function_of.get(m.call)))
        for stmt in facts.nodes_of(ast.Assign):
            target = stmt.targets[0] if len(stmt.targets) == 1 else None
            if isinstance(target, ast.Attribute) and target.attr == "requires_grad" and literal_bool(stmt.value) is False:
                out.update((name, facts.function_of.get(stmt)) for name in _frozen_by_loop(facts, stmt, target.value))
        return frozenset(out)

    return facts.memo(("vocabulary.frozen",), compute)


def _false_flag(call: ast.Call) -> bool:
    flag = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "requires_grad"), None)
    return flag is not None and literal_bool(flag) is False


def _frozen_by_loop(facts: FileFacts, node: ast.AST, param: ast.AST) -> list[str]:
    """The module whose parameters the ``for`` holding ``node``'s statement in its body (not
    under an ``if``: that freezes only some) binds ``param`` to."""
    if not isinstance(param, ast.Name):
        return []
    stmt = node if isinstance(node, ast.stmt) else facts.parents.get(node)
    loop = facts.parents.get(stmt)
    if not isinstance(loop, ast.For) or stmt not in loop.body:
        return []
    if not isinstance(loop.iter, ast.Call) or not isinstance(loop.iter.func, ast.Attribute):
        return []
    method = loop.iter.func.attr
    bound = loop.target.elts[-1] if method == "named_parameters" and isinstance(loop.target, ast.Tuple) and loop.target.elts else loop.target
    if method not in ("parameters", "named_parameters") or not (isinstance(bound, ast.Name) and bound.id == param.id):
        return []
    module = module_expression(loop.iter.func.value)
    return [module] if module is not None else []


def is_data_iterable(node: ast.AST) -> bool:
    """A loop iterable that yields data batches: ``loader``, ``self.train_loader``,
    ``enumerate(tqdm(loader))``, ``range(n)``, ``memory.sample(32)``, ``get_batch(i)``. The name
    decides, not any word in the source: ``student(batch)`` yields model outputs."""
    if isinstance(node, ast.Subscript):
        return is_data_iterable(node.value)
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
            return bool(args) and all(is_data_iterable(a) for a in args)
        return bool(DATA_ITERABLE.search(last))
    return False


# -- loss criteria --------------------------------------------------------------------------------

# Instances named like a criterion (``criterion``, ``self.loss_fn``) and, for plain function
# names only, ``*_loss`` helpers. ``self.model.loss(...)`` may run the model.
CRITERION_NAME = re.compile(
    r"^(crit|criterion|criteria|criterions|loss_?fn|loss_?func|loss_function|loss_module"
    r"|.*_(crit|criterion|loss_?fn|loss_?func)|criterion_.*)$",
    re.I,
)
LOSS_FUNCTION_NAME = re.compile(r"^(.*_)?loss(es)?$", re.I)
# Criteria whose name says they run a discriminator/critic or hold learned weights.
LEARNED_CRITERION = re.compile(r"disc|adv|gan|critic|center|centre|arc_?face|cos_?face|proxy|margin|^d_|_d_|^g_|_g_", re.I)
#: Names of values that are losses/metrics, not modules whose mode matters.
LOSS_LIKE = re.compile(r"loss|criterion|crit$|metric|accuracy|^acc$|score|distance", re.I)


def parameter_free_loss_class(qualname: str) -> bool:
    """A ``torch.nn`` loss class whose instances hold no parameters."""
    return qualname.startswith("torch.nn.") and qualname.endswith("Loss") and "AdaptiveLogSoftmax" not in qualname


# -- code for another torch version -------------------------------------------------------------

#: Names that hold torch's version, or a flag set from it, by convention (`TORCH_VERSION`,
#: `torch_ver`, `cfg.PYTORCH_VERSION_LESS_THAN_040`, `TORCH_VERSION_GE_1_5`).
_VERSION_NAME = re.compile(r"^_?(torch|pt|pytorch)_?(version|ver)(_\w*)?$", re.I)


def in_torch_version_branch(facts: FileFacts, node: ast.AST) -> bool:
    """Whether ``node`` lies in a branch of an ``if`` (or conditional expression) whose test
    reads torch's version: ``torch.__version__``, a name bound from an expression that reads it
    (``version = torch.__version__``), or a name or attribute like ``TORCH_VERSION``
    (``cfg.PYTORCH_VERSION_LESS_THAN_040``, a flag a config module sets from the version). Such code is written
    for the torch its branch selects (``else:  # torch 0.3`` beside the 0.4 code): legacy API in
    it is the author's compatibility, not a bug on the torch that runs it."""
    child, parent = node, facts.parents.get(node)
    while parent is not None:
        if isinstance(parent, (ast.If, ast.IfExp)) and child is not parent.test and _reads_torch_version(facts, parent.test):
            return True
        child, parent = parent, facts.parents.get(parent)
    return False


def _reads_torch_version(facts: FileFacts, test: ast.AST) -> bool:
    return facts.memo(("vocabulary.reads_torch_version", id(test)), lambda: _reads_version(facts, test, 0))


def _reads_version(facts: FileFacts, expr: ast.AST, depth: int) -> bool:
    for node in ast.walk(expr):
        if isinstance(node, ast.Attribute) and node.attr in ("__version__", "version") and facts.qualname(node.value) == "torch":
            return True
        if isinstance(node, ast.Attribute) and _VERSION_NAME.match(node.attr):  # a config flag
            return True
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            if _VERSION_NAME.match(node.id):
                return True
            if depth < 2 and any(_reads_version(facts, value, depth + 1) for value in _bound_values(facts, node.id)):
                return True
    return False


def _bound_values(facts: FileFacts, name: str) -> list[ast.AST]:
    """What the file assigns to ``name`` anywhere (by name: a version is bound once)."""
    return [
        stmt.value for stmt in facts.assignments_to(name)
        if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in stmt.targets)
    ]
