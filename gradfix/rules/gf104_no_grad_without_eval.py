"""GF104 no-grad-without-eval.

The analysis of "which module is evaluated under a grad-disabled region without `.eval()`"
lives here as plain functions: GF105 (train-without-train-mode) asks the same question to
learn which modules GF104's fix will put into eval mode.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from gradfix.lazy import cst

from gradfix.facts import FileFacts, GradRegion, dotted_name, literal_bool
from gradfix.model import FixSafety
from gradfix.rule import Invalid, Option, Rule, Valid

LOOPS = (ast.For, ast.AsyncFor, ast.While)
FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)

# nn.Module methods that do not run the module's forward: `model.parameters()` under
# `no_grad` (a manual SGD update, an EMA copy) is not evaluation.
NOT_FORWARD = frozenset(
    """parameters named_parameters buffers named_buffers children named_children modules
    named_modules state_dict load_state_dict zero_grad to cuda cpu half float double bfloat16
    type eval train apply requires_grad_ register_buffer register_parameter add_module
    register_forward_hook register_forward_pre_hook register_full_backward_hook
    register_backward_hook get_submodule get_parameter get_buffer share_memory extra_repr
    save save_pretrained from_pretrained num_parameters numel size item detach clone copy_
    fill_ zero_ mul_ add_ sub_ div_ data weight bias grad update step reset reset_parameters
    append extend pop keys values items get""".split()
)
# Uses that show a name is an nn.Module whose mode matters (a criterion is called in
# training too, but nobody optimises its parameters or switches its mode).
MODULE_USES = frozenset(
    """parameters named_parameters zero_grad state_dict load_state_dict eval train
    requires_grad_ modules named_modules buffers named_buffers""".split()
)
LOSS_LIKE = re.compile(r"loss|criterion|crit$|metric|accuracy|^acc$|score|distance", re.IGNORECASE)
# Functions whose caller owns the mode: forward passes, framework steps and hooks.
CALLER_OWNS_MODE = re.compile(r"^(forward|__call__|on_\w+|\w+_step|\w+_epoch_(end|start))$")
# Batch-norm recalibration runs the model in train mode under no_grad on purpose.
RECALIBRATION = re.compile(r"(^|_)(bn|batch_?norm|calib\w*|recalib\w*|swa)(_|$)", re.IGNORECASE)
EVALISH = re.compile(r"(^|_)(eval|evaluate|evaluation|validate|validation|val|valid|test|infer|inference|predict)", re.I)
# Reinforcement learning: choosing actions under no_grad is part of training (rollouts,
# exploration with noisy layers or dropout), not an evaluation, and its mode is the caller's.
ACTING = re.compile(r"(^|_)(act|acts|action|actions|explore|exploration|rollout|rollouts|collect)(_|$)", re.I)
ENV_LIKE = re.compile(r"env", re.I)
# GAN generators sample in training mode on purpose (pix2pix keeps dropout as noise; with
# instance norm tracking running stats, `.eval()` makes the images worse): not evaluation.
GENERATOR = re.compile(r"^(G|G_?[A-Z0-9]\w*|G_\w+|netG\w*|net_?[gG]|g_ema|gen|gen_\w+|\w*[gG]enerator\w*)$")


# torch.nn layers that compute the same thing in train and eval mode (no dropout, no running
# statistics): a network built only from them does not care about `.eval()` (pinned in
# tests/facts/test_gf104_facts.py).
MODE_FREE_LAYERS = frozenset(
    """Linear Bilinear Identity Flatten Unflatten Conv1d Conv2d Conv3d ConvTranspose1d
    ConvTranspose2d ConvTranspose3d ReLU ReLU6 LeakyReLU PReLU ELU SELU CELU GELU SiLU Mish
    Tanh Sigmoid Hardtanh Hardsigmoid Hardswish Softmax LogSoftmax Softplus Softsign Tanhshrink
    MaxPool1d MaxPool2d MaxPool3d AvgPool1d AvgPool2d AvgPool3d AdaptiveAvgPool1d
    AdaptiveAvgPool2d AdaptiveAvgPool3d AdaptiveMaxPool1d AdaptiveMaxPool2d AdaptiveMaxPool3d
    Embedding Upsample ZeroPad2d ConstantPad1d ConstantPad2d LayerNorm GroupNorm""".split()
)


def pos(node: ast.AST) -> tuple[int, int]:
    return (node.lineno, node.col_offset)


def related(a: str, b: str) -> bool:
    """One name is the other or a submodule of it (`model` / `model.encoder`)."""
    return a == b or a.startswith(b + ".") or b.startswith(a + ".")


def covers(switched: str, name: str) -> bool:
    """A mode switch on ``switched`` reaches ``name`` (`.eval()` is recursive)."""
    return switched == name or name.startswith(switched + ".")


def is_descendant(facts: FileFacts, node: ast.AST, ancestor: ast.AST) -> bool:
    current = node
    while current is not None:
        if current is ancestor:
            return True
        current = facts.parents.get(current)
    return False


def own_loops_around(facts: FileFacts, node: ast.AST, func) -> list[ast.AST]:
    """Loops of ``func`` (not of a nested def) containing ``node``, innermost first."""
    out = []
    current = facts.parents.get(node)
    while current is not None and current is not func:
        if isinstance(current, (*FUNCTIONS, ast.Lambda, ast.ClassDef)):
            break
        if isinstance(current, LOOPS):
            out.append(current)
        current = facts.parents.get(current)
    return out


@dataclass(frozen=True)
class Switch:
    """``receiver.eval()`` / ``receiver.train(...)``: mode is ``eval``, ``train`` or ``unknown``."""

    call: ast.Call
    receiver: str
    mode: str


_MODE_ARG = re.compile(r"train|mode", re.IGNORECASE)


def switch_of(call: ast.Call) -> Switch | None:
    func = call.func
    if not isinstance(func, ast.Attribute) or func.attr not in ("eval", "train"):
        return None
    receiver = dotted_name(func.value)
    if receiver is None:
        return None
    if func.attr == "eval":
        return Switch(call, receiver, "eval") if not call.args and not call.keywords else None
    args = list(call.args) + [k.value for k in call.keywords if k.arg == "mode"]
    if len(call.args) + len(call.keywords) != len(args) or len(args) > 1:
        return None  # `trainer.train(dataset, epochs=3)`: not nn.Module.train
    if not args:
        return Switch(call, receiver, "train")
    value = literal_bool(args[0])
    if value is not None:
        return Switch(call, receiver, "train" if value else "eval")
    name = dotted_name(args[0])
    if name is not None:
        return Switch(call, receiver, "unknown")  # model.train(was_training)
    return None


def _modeish(switch: Switch) -> bool:
    """`.train()`, `.train(False)`, `.train(was_training)`: not `trainer.train(dataset)`."""
    if switch.mode != "unknown":
        return True
    call = switch.call
    arg = call.args[0] if call.args else call.keywords[0].value
    return bool(_MODE_ARG.search((dotted_name(arg) or "").rsplit(".", 1)[-1]))


def switches(facts: FileFacts) -> list[Switch]:
    cache = facts.__dict__.get("_gf104_switches")
    if cache is None:
        cache = [s for s in map(switch_of, facts.calls) if s is not None]
        facts.__dict__["_gf104_switches"] = cache
    return cache


def own_switches(facts: FileFacts, scope) -> list[Switch]:
    return [s for s in switches(facts) if facts.function_of.get(s.call) is scope]


def is_optimizer_step(call: ast.Call) -> bool:
    func = call.func
    if not isinstance(func, ast.Attribute) or func.attr != "step":
        return False
    receiver = dotted_name(func.value)
    if receiver is None:
        return False
    last = receiver.rsplit(".", 1)[-1].lower()
    return ("opt" in last or "scaler" in last) and "sched" not in last


def own_calls(facts: FileFacts, scope) -> list[ast.Call]:
    return facts.calls_in(scope)


def calls_backward(facts: FileFacts, scope) -> bool:
    if facts.method_calls_in(scope, "backward"):
        return True
    return any(facts.call_qualname(c) == "torch.autograd.backward" for c in own_calls(facts, scope))


def steps_optimizer(facts: FileFacts, scope) -> bool:
    return any(is_optimizer_step(c) for c in own_calls(facts, scope))


def owner_class(facts: FileFacts, node: ast.AST) -> ast.ClassDef | None:
    """The class whose method (or a def nested in one) holds ``node``; None outside classes."""
    current = facts.parents.get(node)
    while current is not None:
        if isinstance(current, ast.ClassDef):
            return current
        current = facts.parents.get(current)
    return None


def same_object(facts: FileFacts, name: str, a: ast.AST, b: ast.AST) -> bool:
    """Whether ``name`` at ``a`` and at ``b`` can be one object: `self.model` in two classes is not."""
    if name.split(".", 1)[0] not in ("self", "cls"):
        return True
    return owner_class(facts, a) is owner_class(facts, b)


def forward_target(facts: FileFacts, call: ast.Call) -> str | None:
    """Dotted name of the callee when the call can run a module's forward, else None."""
    name = dotted_name(call.func)
    if name is None:
        return None
    if not call.args and not call.keywords:
        return None  # `model.get_classifier()`, `net.reset_noise()`: a forward takes inputs
    parts = name.split(".")
    if any(p in NOT_FORWARD for p in parts[1:]):
        return None
    if facts.resolve_name(parts[0], call) is not None:
        return None  # torch.cat, F.relu, np.mean: imported functions, not modules
    return name


def trained_evidence(facts: FileFacts) -> dict[str, list[ast.AST]]:
    """Dotted names the file trains or switches, each with the nodes that show it.

    Evidence: `.train()` on the name, or a training scope (`.backward()`/optimizer step) that
    calls it. The nodes let callers tell `self.model` of one class from another's.
    """
    cache = facts.__dict__.get("_gf104_trained")
    if cache is not None:
        return cache
    evidence: dict[str, list[ast.AST]] = {}
    for s in switches(facts):
        if s.call.func.attr == "train" and _modeish(s):
            evidence.setdefault(s.receiver, []).append(s.call)
    module_like = {m.receiver for m in facts.method_calls if m.method in MODULE_USES and m.receiver}
    module_like |= {s.receiver for s in switches(facts)}
    for scope in [None, *facts.functions]:
        if not (calls_backward(facts, scope) or steps_optimizer(facts, scope)):
            continue
        # The scope's own `.train()` calls name what it trains; a module it runs but never
        # switches is kept frozen on purpose (an old model / teacher for distillation).
        trains_here = [s.receiver for s in own_switches(facts, scope) if s.mode == "train"]
        for call in own_calls(facts, scope):
            name = dotted_name(call.func)
            if name is None or facts.resolve_name(name.split(".")[0], call) is not None:
                continue
            if name.endswith(".forward"):
                name = name[: -len(".forward")]
            if trains_here and not any(related(t, name) for t in trains_here):
                continue
            if name in module_like and not LOSS_LIKE.search(name.rsplit(".", 1)[-1]):
                evidence.setdefault(name, []).append(call)
    evidence.pop("self", None)
    facts.__dict__["_gf104_trained"] = evidence
    return evidence


def trained_names(facts: FileFacts) -> set[str]:
    """Dotted names the file trains or switches: `.train()` on it, or a training scope calls it."""
    return set(trained_evidence(facts))


def _mode_api(facts: FileFacts, func, names: tuple[str, ...]) -> bool:
    """The class of ``func`` has its own `train`/`eval` methods that switch the module: its
    users set the mode through them (`agent.eval()` … `agent.train()`), not its other methods."""
    cls = owner_class(facts, func)
    if cls is None:
        return False
    for method in cls.body:
        if isinstance(method, FUNCTIONS) and method.name in ("train", "eval"):
            if any(any(related(s.receiver, n) for n in names) for s in own_switches(facts, method)):
                return True
    return False


def _bound_names(target: ast.AST) -> set[str]:
    if isinstance(target, ast.Name):
        return {target.id}
    if isinstance(target, (ast.Tuple, ast.List)):
        return set().union(*map(_bound_names, target.elts)) if target.elts else set()
    if isinstance(target, ast.Starred):
        return _bound_names(target.value)
    return set()


def _names_in(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _feeds_training(facts: FileFacts, func) -> bool:
    """``func``'s result is a training input: a caller passes it on to a training function of
    this file or into the tensor it `.backward()`s (RL targets, teacher outputs, pseudo-labels).
    The mode of that computation is the training's, not an evaluation's."""
    training = {f.name for f in facts.functions if calls_backward(facts, f) or steps_optimizer(facts, f)}
    for call in facts.calls:
        if not _called_by_name(facts, call, func.name) or facts.function_of.get(call) is func:
            continue
        stmt = facts.parents.get(call)
        if not isinstance(stmt, ast.Assign) or stmt.value is not call:
            continue
        produced = set().union(*map(_bound_names, stmt.targets))
        if not produced:
            continue
        scope = facts.function_of.get(call)
        for later in own_calls(facts, scope):
            if pos(later) <= pos(call):
                continue
            read = set().union(set(), *(_names_in(a) for a in [*later.args, *(k.value for k in later.keywords)]))
            if isinstance(later.func, ast.Attribute) and later.func.attr == "backward":
                read |= _names_in(later.func.value)
            elif _callee(later) not in training:
                continue
            if any(r in produced or facts.flows_into(scope, produced, r) for r in read):
                return True
    return False


def _callee(call: ast.Call) -> str | None:
    func = call.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def _acting(facts: FileFacts, func) -> bool:
    """Reinforcement-learning action selection: an `act`-like name, or it steps an environment."""
    if ACTING.search(func.name):
        return True
    for call in own_calls(facts, func):
        f = call.func
        if isinstance(f, ast.Attribute) and f.attr == "step":
            receiver = dotted_name(f.value) or ""
            if ENV_LIKE.search(receiver.rsplit(".", 1)[-1]):
                return True
    return False


@dataclass
class EvalGap:
    """A function that evaluates ``modules`` under a grad-disabled region without `.eval()`."""

    func: ast.FunctionDef | ast.AsyncFunctionDef
    region: GradRegion  # the first region (outermost disabled one) holding such a call
    call: ast.Call  # the first such module call
    modules: list[str]  # names to switch, in order of first use
    calls: list[ast.Call] = None  # every flagged call in the function

    def __post_init__(self):
        if self.calls is None:
            self.calls = [self.call]


def _lightning_method(facts: FileFacts, func) -> bool:
    parent = facts.parents.get(func)
    if not isinstance(parent, ast.ClassDef):
        return False
    return any("Lightning" in (facts.segment(b) or "") for b in parent.bases)


def _outer_disabled_region(facts: FileFacts, node: ast.AST) -> GradRegion | None:
    regions = facts.regions_around(node)
    if not regions or regions[0].mode != "disabled":
        return None
    disabled = [r for r in regions if r.mode == "disabled" and (r.called or r.kind == "decorator")]
    if not disabled or not (regions[0].called or regions[0].kind == "decorator"):
        return None
    return disabled[-1]


def _managed_in_function(facts: FileFacts, func, names: tuple[str, ...], node: ast.AST) -> bool:
    """``func`` switches a related module before ``node`` (or in a loop around both)."""
    loops = set(map(id, own_loops_around(facts, node, func)))
    for s in own_switches(facts, func):
        if not any(related(s.receiver, n) for n in names):
            continue
        if pos(s.call) < pos(node):
            return True
        if any(id(l) in loops for l in own_loops_around(facts, s.call, func)):
            return True
    return False


def _called_by_name(facts: FileFacts, call: ast.Call, name: str) -> bool:
    func = call.func
    return (isinstance(func, ast.Name) and func.id == name) or (isinstance(func, ast.Attribute) and func.attr == name)


def passed_names(func, call: ast.Call, names: tuple[str, ...]) -> set[str]:
    """Names that mean one of ``names`` inside ``func`` when ``call`` calls it."""
    inside = set(names)
    params = [a.arg for a in (*func.args.posonlyargs, *func.args.args)]
    if isinstance(call.func, ast.Attribute) and params[:1] in (["self"], ["cls"]):
        params = params[1:]
    for index, arg in enumerate(call.args):
        name = dotted_name(arg)
        if name and index < len(params) and any(related(name, n) for n in names):
            inside.add(params[index])
    for kw in call.keywords:
        name = dotted_name(kw.value)
        if name and kw.arg and any(related(name, n) for n in names):
            inside.add(kw.arg)
    return inside


def _left_in_eval_by_call(facts: FileFacts, func, names: tuple[str, ...], node: ast.AST) -> bool:
    """Before ``node``, ``func`` last calls a function of this file that switches the module it
    is given, and that function leaves it in eval mode (`train(model); test(model)` in an epoch
    loop, then a final evaluation): the module is in eval mode already."""
    last: tuple[tuple[int, int], str] | None = None
    for call in own_calls(facts, func):
        if pos(call) >= pos(node):
            continue
        callee = _callee(call)
        for f in facts.functions:
            if f.name != callee or f is func:
                continue
            inside = passed_names(f, call, names)
            mine = [sw for sw in own_switches(facts, f) if any(covers(sw.receiver, n) for n in inside)]
            if mine and (last is None or pos(call) > last[0]):
                last = (pos(call), max(mine, key=lambda sw: pos(sw.call)).mode)
    return last is not None and last[1] == "eval"


def _submodule_of_module(facts: FileFacts, func, module: str) -> bool:
    """`self.<x>` in a method of a class that is itself an nn.Module (it defines `forward`):
    a submodule, whose mode follows the parent's `.train()`/`.eval()`, which the caller sets."""
    if not module.startswith("self."):
        return False
    cls = owner_class(facts, func)
    return cls is not None and any(isinstance(m, FUNCTIONS) and m.name == "forward" for m in cls.body)


def _eval_chain(value: ast.AST) -> bool:
    """``Net(...).eval()``, ``Net().to(device).eval()``: a method chain that ends in eval mode
    (`.eval()` and `.to()`/`.cuda()` return the module itself)."""
    while isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute):
        attr, args = value.func.attr, [*value.args, *(k.value for k in value.keywords)]
        if attr == "eval" and not args:
            return True
        if attr == "train":
            return len(args) == 1 and literal_bool(args[0]) is False
        value = value.func.value
    return False


def _bound_in_eval(facts: FileFacts, func, names: tuple[str, ...], node: ast.AST) -> bool:
    """Before ``node``, ``func`` binds the module's name to a chain ending in `.eval()`
    (`model = Net().eval()`; `g, d = G().eval(), D().eval()`): a fresh module in eval mode."""
    roots = {n.split(".", 1)[0] for n in names}
    for stmt in facts.statements(func):
        if not isinstance(stmt, ast.Assign) or pos(stmt) >= pos(node):
            continue
        for target in stmt.targets:
            pairs = [(target, stmt.value)]
            if isinstance(target, (ast.Tuple, ast.List)) and isinstance(stmt.value, (ast.Tuple, ast.List)):
                if len(target.elts) == len(stmt.value.elts):
                    pairs = list(zip(target.elts, stmt.value.elts))
            for t, v in pairs:
                if isinstance(t, ast.Name) and t.id in roots and _eval_chain(v):
                    return True
    return False


def _decoding_loop(facts: FileFacts, func, call: ast.Call) -> bool:
    """Autoregressive decoding: in a loop of ``func``, the module's output flows back into its
    own next input, and no input comes from what the loops iterate over (`for _ in
    range(max_new_tokens): logits = model(idx); idx = cat(idx, sample(logits))`). The model
    makes its own inputs from a prompt: a sampling utility, often called mid-training to
    print samples, whose caller owns the mode; inserting `.eval()` there would leave training
    in eval mode. A loop over a data set (an RNN carrying its hidden state over batches) reads
    the loop's items, so it is still an evaluation."""
    loops = own_loops_around(facts, call, func)
    if not loops:
        return False
    stmt = facts.parents.get(call)
    if isinstance(stmt, ast.Assign) and stmt.value is call:
        produced = set().union(*map(_bound_names, stmt.targets))
    else:
        return False
    inputs = set().union(set(), *(_names_in(a) for a in [*call.args, *(k.value for k in call.keywords)]))
    if not produced or not inputs:
        return False
    if not any(i in produced or facts.flows_into(func, produced, i) for i in inputs):
        return False
    items: set[str] = set()
    for loop in loops:
        if isinstance(loop, (ast.For, ast.AsyncFor)):
            items |= _bound_names(loop.target)
    items -= produced
    return not any(i in items or facts.flows_into(func, items, i) for i in inputs)


def _mode_free_layer(facts: FileFacts, expr: ast.AST) -> bool:
    if isinstance(expr, ast.IfExp):
        return _mode_free_layer(facts, expr.body) and _mode_free_layer(facts, expr.orelse)
    if not isinstance(expr, ast.Call):
        return False
    name = facts.call_qualname(expr) or ""
    if name == "torch.nn.Sequential":
        return _mode_free_sequential(facts, expr)
    return name.startswith("torch.nn.") and name[len("torch.nn.") :] in MODE_FREE_LAYERS


def _mode_free_sequential(facts: FileFacts, call: ast.Call) -> bool:
    return bool(call.args) and not call.keywords and all(_mode_free_layer(facts, a) for a in call.args)


def _mode_free_module(facts: FileFacts, module: str) -> bool:
    """Every network this file builds under the name is an `nn.Sequential` of layers that act
    the same in train and eval mode (`nn.Sequential(nn.Linear(1, 100), nn.ReLU(), ...)` in a
    course notebook): `.eval()` would change nothing, so there is nothing to report."""
    if "." in module:
        return False
    built = False
    for node in ast.walk(facts.tree):
        if not isinstance(node, ast.Assign) or not isinstance(node.value, ast.Call):
            continue
        if not any(isinstance(t, ast.Name) and t.id == module for t in node.targets):
            continue
        if not _mode_free_layer(facts, node.value) or facts.call_qualname(node.value) != "torch.nn.Sequential":
            return False
        built = True
    return built


# What a mode-free network's own code may call besides mode-free layers (see _mode_free_class).
_BUILD_OK = frozenset({"torch.nn.Parameter", "torch.nn.ModuleList", "torch.nn.ModuleDict"})
_MODE_SENSITIVE = re.compile(r"dropout|batch_norm|instance_norm|rrelu|^train$|^eval$|^modules$|^children$")
_SAFE_BUILTINS = frozenset({"super", "len", "range", "int", "float", "min", "max", "print", "isinstance", "zip"})


def _method_locals(func) -> set[str]:
    names = {a.arg for a in ast.walk(func.args) if isinstance(a, ast.arg)}
    names |= {n.id for n in ast.walk(func) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    return names


def _mode_free_class(facts: FileFacts, cls: ast.ClassDef) -> bool:
    """A direct `torch.nn.Module` subclass of this file whose methods build only mode-free
    layers, never read `.training` and call no functional dropout/batch-norm (an RL critic of
    `nn.Linear` + `F.relu`): `.eval()` changes nothing about its outputs. Any other callee (a
    helper, a model zoo constructor, an unknown class) makes it unknown."""
    if len(cls.bases) != 1 or cls.keywords or facts.qualname(cls.bases[0]) != "torch.nn.Module":
        return False
    for stmt in cls.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if stmt.decorator_list:
                return False
            local = _method_locals(stmt)
            for node in ast.walk(stmt):
                if isinstance(node, ast.Attribute) and node.attr == "training":
                    return False
                if isinstance(node, (ast.ClassDef, ast.Lambda, ast.FunctionDef, ast.AsyncFunctionDef)) and node is not stmt:
                    return False
                if isinstance(node, ast.Call) and not _mode_free_call(facts, node, local):
                    return False
        elif not isinstance(stmt, (ast.Expr, ast.Pass)) or isinstance(getattr(stmt, "value", None), ast.Call):
            return False
    return True


def _mode_free_call(facts: FileFacts, call: ast.Call, local: set[str]) -> bool:
    func = call.func
    last = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    if _MODE_SENSITIVE.search(last):
        return False
    name = facts.call_qualname(call)
    if name is not None and name.startswith("torch."):
        if name.startswith("torch.nn.") and not name.startswith("torch.nn.functional."):
            return name in _BUILD_OK or name == "torch.nn.init" or name.startswith("torch.nn.init.") or (
                _mode_free_layer(facts, call)
            )
        return True  # tensor maths, `F.relu`
    if isinstance(func, ast.Name):
        return func.id in _SAFE_BUILTINS and func.id not in local and facts.resolve_name(func.id, func) is None
    root = func
    while isinstance(root, (ast.Attribute, ast.Subscript, ast.Call)):
        root = root.func if isinstance(root, ast.Call) else root.value
    if isinstance(root, ast.Call) and isinstance(root.func, ast.Name) and root.func.id == "super":
        return True
    if not isinstance(root, ast.Name):
        return False
    if root.id == "super":
        return True  # super().__init__()
    return root.id == "self" or root.id in local  # its own layers, tensor methods on locals


def _module_built_mode_free(facts: FileFacts, module: str) -> bool:
    """Every binding of ``module`` in the file (`self.critic = Critic().float()`) builds a
    mode-free class of this file, possibly followed by dtype/device moves."""
    classes = {c.name: c for c in facts.tree.body if isinstance(c, ast.ClassDef)}
    built = False
    for node in ast.walk(facts.tree):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        if not any(dotted_name(t) == module for t in targets):
            continue
        value = node.value
        while (
            isinstance(value, ast.Call)
            and isinstance(value.func, ast.Attribute)
            and value.func.attr in ("float", "double", "to", "cuda", "cpu")
        ):
            value = value.func.value
        if not (isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in classes):
            return False
        if facts.resolve_name(value.func.id, value.func) is not None:
            return False  # an imported name shadows the class
        if not _mode_free_class(facts, classes[value.func.id]):
            return False
        built = True
    return built


def _output_discarded(facts: FileFacts, call: ast.Call) -> bool:
    """`model(batch)` as a bare statement: run for its side effects (lazy parameters, warm-up,
    tracing), not to look at its outputs; not an evaluation."""
    parent = facts.parents.get(call)
    return isinstance(parent, ast.Expr) and parent.value is call


def _managed_by_enclosing(facts: FileFacts, func, names: tuple[str, ...]) -> bool:
    """An enclosing function switches the module before it calls the nested def."""
    inner = func
    for outer in facts.enclosing_functions(func):
        related_switches = [
            s for s in own_switches(facts, outer) if s.mode != "train" and any(related(s.receiver, n) for n in names)
        ]
        if related_switches:
            calls = [c for c in own_calls(facts, outer) if isinstance(c.func, ast.Name) and c.func.id == inner.name]
            if not calls:
                return True  # passed on as a callback: who calls it when is unknown, stay silent
            if any(pos(s.call) < pos(c) for s in related_switches for c in calls):
                return True
        inner = outer
    return False


def _managed_by_caller(facts: FileFacts, func, names: tuple[str, ...]) -> bool:
    """A caller elsewhere in the file puts the module (or what it passes) into eval first."""
    for call in facts.calls:
        if not _called_by_name(facts, call, func.name):
            continue
        scope = facts.function_of.get(call)
        if scope is func:
            continue
        passed = {dotted_name(a) for a in [*call.args, *(k.value for k in call.keywords)]} - {None}
        for s in own_switches(facts, scope):
            if s.mode == "train" and EVALISH.search(func.name):
                continue  # `model.train(); evaluate(model)` is the bug, not a caller owning the mode
            if any(related(s.receiver, n) for n in names) or s.receiver in passed:
                if pos(s.call) < pos(call) or set(map(id, own_loops_around(facts, s.call, scope))) & set(
                    map(id, own_loops_around(facts, call, scope))
                ):
                    return True
    return False


def evaluation_gaps(facts: FileFacts) -> list[EvalGap]:
    """Every function GF104 reports (computed once per file, shared with GF105)."""
    cached = facts.__dict__.get("_gf104_gaps")
    if cached is not None:
        return cached
    trained = trained_evidence(facts)
    gaps: dict[ast.AST, EvalGap] = {}
    if trained:
        for call in facts.calls:
            func = facts.function_of.get(call)
            if not isinstance(func, FUNCTIONS):
                continue
            target = forward_target(facts, call)
            if target is None:
                continue
            parts = target.split(".")
            prefixes = [".".join(parts[:i]) for i in range(len(parts), 0, -1)]
            module = next(
                (p for p in prefixes if any(same_object(facts, p, call, e) for e in trained.get(p, ()))), None
            )
            if module is None or GENERATOR.match(module.rsplit(".", 1)[-1]):
                continue
            region = _outer_disabled_region(facts, call)
            if region is None:
                continue
            if CALLER_OWNS_MODE.match(func.name) or RECALIBRATION.search(func.name) or _lightning_method(facts, func):
                continue
            if calls_backward(facts, func) or steps_optimizer(facts, func):
                continue
            if _acting(facts, func) or _feeds_training(facts, func):
                continue
            names = (module, target)
            if _mode_api(facts, func, names):
                continue
            if _managed_in_function(facts, func, names, call) or _bound_in_eval(facts, func, names, call):
                continue
            if _decoding_loop(facts, func, call) or _mode_free_module(facts, module) or _module_built_mode_free(
                facts, module
            ):
                continue
            if _output_discarded(facts, call) or _submodule_of_module(facts, func, module):
                continue
            if _left_in_eval_by_call(facts, func, names, call):
                continue
            if _managed_by_enclosing(facts, func, names) or _managed_by_caller(facts, func, names):
                continue
            gap = gaps.get(func)
            if gap is None:
                gaps[func] = EvalGap(func, region, call, [module])
                continue
            gap.calls.append(call)
            if module not in gap.modules:
                gap.modules.append(module)
    result = sorted(gaps.values(), key=lambda g: pos(g.call))
    facts.__dict__["_gf104_gaps"] = result
    return result


# -- fixes: statements inserted into a block ----------------------------------------------


def body_start(stmts: list[ast.stmt]) -> ast.stmt:
    """The first statement of a body after its docstring (the body itself if only a docstring)."""
    first = stmts[0]
    if (
        len(stmts) > 1
        and isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
    ):
        return stmts[1]
    return first


def insert_before(ctx, target: cst.BaseStatement, new: list[cst.BaseStatement]):
    """Edits that put ``new`` right before ``target`` (touching the smallest statement)."""
    from gradfix.fixer import Edit, FixError

    parent = ctx.parent(target)
    if not isinstance(parent, (cst.IndentedBlock, cst.Module)):
        raise FixError("the statement is not in an indented block")
    body = list(parent.body)
    index = next(i for i, s in enumerate(body) if s is target)
    if index > 0 and isinstance(body[index - 1], cst.SimpleStatementLine):
        previous = body[index - 1]
        return [Edit(previous, cst.FlattenSentinel([previous, *new]))]
    return [Edit(target, cst.FlattenSentinel([*new, target]))]


def statement_at(ctx, span) -> cst.BaseStatement:
    return ctx.node_at(span, cst.BaseStatement)


def unused_name(facts: FileFacts, func, base: str) -> str:
    taken = set(facts.scope_of_node[func].locals) if func in facts.scope_of_node else set()
    taken |= {n.id for n in ast.walk(func) if isinstance(n, ast.Name)}
    name, i = base, 1
    while name in taken:
        i += 1
        name = f"{base}_{i}"
    return name


class NoGradWithoutEval(Rule):
    """
    ## What it does
    Finds evaluation code: a module called inside `torch.no_grad()` (or `inference_mode()`,
    `set_grad_enabled(False)`, or a function decorated with one of them), in a function that
    never calls `.backward()`, with no `<module>.eval()` before it in that function or in an
    enclosing function or caller. It fires only when the same file trains that module (calls
    `.train()` on it, or calls it in a function that runs `.backward()`/`optimizer.step()`),
    so the module really is in training mode when the evaluation runs. Functions whose caller
    owns the mode (`forward`, `validation_step`/`test_step`/`predict_step` and other `*_step`
    functions, `on_*` hooks, LightningModule methods, methods of a class that has its own
    `train()`/`eval()` methods for that module) are left alone, and so is reinforcement-learning
    action selection (an `act`/`select_action`/`rollout`-like function, or one that steps an
    environment): acting under `no_grad` is part of training there (exploration through noisy
    layers or dropout), and so is sampling from a GAN generator (`G`, `netG`, `generator`):
    GANs often sample in training mode on purpose (pix2pix keeps dropout as noise; instance
    norm with running statistics gives worse images in eval mode). A call without arguments (`model.get_classifier()`) is no forward, and
    `self.model` in one class is not `self.model` in another. Also left alone: a forward whose
    result is thrown away (`model(batch)` as a statement: lazy-parameter initialisation, a
    warm-up), `self.<submodule>` in a method of a class that defines `forward` (an nn.Module:
    the submodule follows the mode its caller sets on the parent), and an evaluation right
    after the function called a helper of this file that leaves the module in eval mode
    (`train(model); test(model)` in the epoch loop, then a final evaluation). Nor does it fire
    on autoregressive sampling (in a loop, the module's output flows back into its next input
    and nothing comes from a data set: a `generate(model, prompt)` helper whose caller owns the
    mode), on a module bound in the function to a chain ending in `.eval()`
    (`model = Net().eval()`), or on a network that the file builds only as an `nn.Sequential`
    of layers that behave the same in both modes (`Linear`, `ReLU`, `Conv2d`, `LayerNorm`, …)
    or as an `nn.Module` class of its own that builds only such layers and never reads
    `self.training` nor calls functional dropout/batch-norm (a small RL critic).
    When the module is bound in the function after the place `.eval()` would go
    (`model = Net()` inside a decorated function), it is reported without a fix.

    ## Why is this bad?
    `no_grad` only stops graph recording; it does not change how layers behave. `model.eval()`
    is what switches dropout off and makes batch-norm use its running statistics (and stop
    updating them). Without it, the reported metrics are noisy (dropout is still on) and
    every evaluation batch silently overwrites the batch-norm statistics the model will be
    saved with. The converse holds too: `model.eval()` does not disable grad (pinned in
    `tests/facts/test_gf104_facts.py`).

    ## Example
    ```python
    def evaluate(model, loader):
        with torch.no_grad():
            for x, y in loader:
                correct += (model(x).argmax(1) == y).sum().item()
    ```

    ## Use instead
    ```python
    def evaluate(model, loader):
        model.eval()
        with torch.no_grad():
            for x, y in loader:
                correct += (model(x).argmax(1) == y).sum().item()
    ```

    ## Fix safety
    Unsafe: the fix changes what the evaluation computes (dropout off, batch-norm uses and
    no longer updates its running statistics), and the module stays in eval mode after the
    function returns, so training code that does not call `.train()` would then train in eval
    mode. GF105 (train-without-train-mode) inserts that `.train()`; enable both. Option
    `style = "restore"` saves `<module>.training` first and restores it with
    `<module>.train(was_training)` in a `finally`, so callers keep their mode.
    """

    code = "GF104"
    name = "no-grad-without-eval"
    summary = "Module evaluated under no_grad without .eval()"
    fix_safety = FixSafety.UNSAFE
    triggers = (".train(", "backward", ".step(")
    options = (
        Option(
            "style",
            ("insert", "restore"),
            "insert: `<module>.eval()` before the region; restore: also restore the caller's mode in a `finally`",
        ),
    )

    _TRAIN = (
        "def train(model, loader, opt):\n"
        "    model.train()\n"
        "    for x, y in loader:\n"
        "        opt.zero_grad()\n"
        "        model(x).sum().backward()\n"
        "        opt.step()\n"
    )

    VALID = [
        # already calls .eval() before the region
        Valid("import torch\n" + _TRAIN + "\ndef evaluate(model, x):\n    model.eval()\n    with torch.no_grad():\n        return model(x)\n"),
        # the enclosing function calls .eval() before calling the inner one
        Valid(
            "import torch\n" + _TRAIN + "\ndef run(model, x):\n    def inner():\n        with torch.no_grad():\n"
            "            return model(x)\n    model.eval()\n    return inner()\n"
        ),
        # the caller puts the model into eval mode first
        Valid("import torch\n" + _TRAIN + "\ndef evaluate(model, x):\n    with torch.no_grad():\n        return model(x)\n\nmodel.eval()\nevaluate(model, x)\n"),
        # a training function (frozen teacher under no_grad)
        Valid(
            "import torch\n" + _TRAIN + "\ndef distil(model, teacher, x, opt):\n    with torch.no_grad():\n        t = teacher(x)\n"
            "    loss = (model(x) - t).pow(2).mean()\n    loss.backward()\n    opt.step()\n"
        ),
        # the file never trains or switches the module: the caller owns the mode
        Valid("import torch\ndef evaluate(model, x):\n    with torch.no_grad():\n        return model(x)\n"),
        # a framework hook / forward
        Valid("import torch\n" + _TRAIN + "\ndef validation_step(model, x):\n    with torch.no_grad():\n        return model(x)\n"),
        # a function, not a module (the criterion is called in training but never optimised)
        Valid(
            "import torch\ndef fit(model, crit, x, y, opt):\n    model.train()\n    crit(model(x), y).backward()\n"
            "    opt.step()\n\ndef score(preds, crit, y):\n    with torch.no_grad():\n        return crit(preds, y)\n"
        ),
        # a manual weight update under no_grad is not evaluation
        Valid(
            "import torch\n" + _TRAIN + "\ndef sgd(model, lr):\n    with torch.no_grad():\n        for p in model.parameters():\n"
            "            p.sub_(lr * p.grad)\n"
        ),
        # conditional region, a local named torch
        Valid("import torch, contextlib\n" + _TRAIN + "\ndef ev(model, x, frozen):\n    with torch.no_grad() if frozen else contextlib.nullcontext():\n        return model(x)\n"),
        Valid(_TRAIN + "\ndef ev(model, x, torch):\n    with torch.no_grad():\n        return model(x)\n"),
        # batch-norm recalibration runs train mode under no_grad on purpose
        Valid("import torch\n" + _TRAIN + "\n@torch.no_grad()\ndef update_bn(loader, model):\n    for x in loader:\n        model(x)\n"),
        # suppressed on the with line
        Valid("import torch\n" + _TRAIN + "\ndef ev(model, x):\n    with torch.no_grad():  # noqa: GF104\n        return model(x)\n"),
        # submodule switched by hand: the author manages modes
        Valid("import torch\n" + _TRAIN + "\ndef ev(model, x):\n    model.encoder.eval()\n    with torch.no_grad():\n        return model(x)\n"),
        # scaling the head at initialisation: `get_classifier()` takes no input, it is no forward
        Valid(
            "import torch\n" + _TRAIN + "\ndef build(model, scale):\n    with torch.no_grad():\n"
            "        model.get_classifier().weight.mul_(scale)\n"
        ),
        # reinforcement learning: acting under no_grad is part of training (noisy exploration)
        Valid(
            "import torch\nclass Agent:\n    def act(self, state):\n        with torch.no_grad():\n"
            "            return self.net(state).argmax(1).item()\n\n    def learn(self, s, y):\n"
            "        self.net.zero_grad()\n        (self.net(s) - y).pow(2).mean().backward()\n        self.opt.step()\n"
        ),
        # a rollout loop steps an environment with actions chosen under no_grad
        Valid(
            "import torch\n" + _TRAIN + "\ndef main(agent, envs, obs, opt):\n    for update in range(10):\n"
            "        for step in range(128):\n            with torch.no_grad():\n                action = agent(obs)\n"
            "            obs, reward, done, info = envs.step(action)\n        train(agent, obs, opt)\n"
        ),
        # the class has its own train()/eval() methods: its users set the mode through them
        Valid(
            "import torch\nclass Agent:\n    def q_value(self, s):\n        with torch.no_grad():\n"
            "            return self.online(s).max(1)[0]\n\n    def learn(self, s, y):\n"
            "        (self.online(s) - y).pow(2).mean().backward()\n        self.opt.step()\n\n"
            "    def train(self):\n        self.online.train()\n\n    def eval(self):\n        self.online.eval()\n"
        ),
        # a GAN generator sampled under no_grad: train-mode sampling is usual and deliberate
        Valid(
            "import torch\nclass Solver:\n    def train(self, x, z):\n        self.G.train()\n"
            "        self.D(self.G(z)).mean().backward()\n        self.g_opt.step()\n\n    def test(self, z):\n"
            "        with torch.no_grad():\n            return self.G(z)\n"
        ),
        # the result is a training target (an RL bootstrap target, a teacher's output)
        Valid(
            "import torch\n" + _TRAIN + "\ndef calc_target(q, s, r):\n    with torch.no_grad():\n"
            "        return r + 0.99 * q(s).max(1)[0]\n\ndef update(q, s, r, opt):\n    target = calc_target(q, s, r)\n"
            "    loss = (q(s).max(1)[0] - target).pow(2).mean()\n    loss.backward()\n    opt.step()\n"
        ),
        # `self.model` of another class is another object
        Valid(
            "import torch\nclass Trainer:\n    def fit(self, x):\n        self.model.train()\n"
            "        self.model(x).sum().backward()\n        self.opt.step()\n\nclass Predictor:\n"
            "    def run(self, x):\n        with torch.no_grad():\n            return self.model(x)\n"
        ),
        # a forward whose output is thrown away: materialising lazy parameters, not evaluating
        Valid(
            "import torch\nmodel = build()\n\n@torch.no_grad()\ndef init_params(batch):\n"
            "    model(batch)  # initialise lazy parameters\n\n" + _TRAIN.replace("(model, ", "(")
        ),
        # the last helper called before the final evaluation leaves the model in eval mode
        Valid(
            "import torch\n" + _TRAIN + "\ndef test(model, x):\n    model.eval()\n    with torch.no_grad():\n"
            "        return model(x)\n\ndef main(model, loader, opt, x):\n    for epoch in range(3):\n"
            "        train(model, loader, opt)\n        test(model, x)\n    with torch.no_grad():\n"
            "        z = model(x)\n    return z\n"
        ),
        # a submodule used in a method of an nn.Module: it follows the parent's mode
        Valid(
            "import torch\nclass Chat(torch.nn.Module):\n    def __init__(self, lm):\n        super().__init__()\n"
            "        self.lm = lm\n        self.lm.train()  # keep dropout\n\n    def forward(self, x):\n"
            "        return self.lm(x)\n\n    def generate(self, x):\n        with torch.no_grad():\n"
            "            return self.lm.generate(x)\n"
        ),
        # autoregressive sampling: the model's output becomes its next input; such helpers are
        # called mid-training to print samples and leave the mode to their caller
        Valid(
            "import torch\n" + _TRAIN + "\ndef sample(model, prompt, steps):\n    tokens = prompt\n"
            "    for _ in range(steps):\n        with torch.no_grad():\n            scores = model(tokens[:, -8:])\n"
            "        nxt = scores[:, -1].argmax(-1, keepdim=True)\n        tokens = torch.cat([tokens, nxt], 1)\n"
            "    return tokens\n"
        ),
        # built in eval mode on the spot: `Net().eval()` returns the module, already switched
        Valid(
            "import torch\n" + _TRAIN + "\n@torch.no_grad()\ndef predict(path, x):\n    model = Net().eval()\n"
            "    model.load_state_dict(torch.load(path))\n    return model(x)\n\n"
            "def pick(x):\n    with torch.no_grad():\n        gen, model = Gen().eval(), Net().to('cpu').eval()\n"
            "        return model(gen(x))\n"
        ),
        # a network of layers that act the same in train and eval mode: `.eval()` changes nothing
        Valid(
            "import torch\nfrom torch import nn\nmodel = nn.Sequential(nn.Linear(1, 64), nn.Tanh(), nn.Linear(64, 1))\n"
            "opt = torch.optim.SGD(model.parameters(), lr=0.1)\nfor step in range(100):\n"
            "    opt.zero_grad()\n    model(x).sub(y).pow(2).mean().backward()\n    opt.step()\n\n"
            "def curve(grid):\n    with torch.no_grad():\n        return model(grid)\n"
        ),
        # a frozen copy of an earlier model: the training step switches only the live model to
        # train mode and runs the copy for a distillation target; the copy is never trained
        Valid(
            "import torch\nfrom copy import deepcopy\nclass Incremental:\n    def after_task(self):\n"
            "        self.old = deepcopy(self.model)\n        self.old.eval()\n\n    def train_epoch(self, loader):\n"
            "        self.model.train()\n        for x in loader:\n            (self.model(x) - self.old(x)).pow(2).mean().backward()\n"
            "            self.opt.step()\n\n    def validate(self, x):\n        with torch.no_grad():\n"
            "            self.model.eval()\n            return self.model(x), self.old(x)\n"
        ),
        # a network class of this file built only from mode-free layers (a small RL critic of
        # `nn.Linear` and `F.relu`): `.eval()` changes nothing
        Valid(
            "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n"
            "class Critic(nn.Module):\n    def __init__(self, n):\n        super().__init__()\n"
            "        self.hidden = nn.Linear(n, 32)\n        self.value = nn.Linear(32, 1)\n\n"
            "    def forward(self, s):\n        return self.value(F.relu(self.hidden(s)))\n\n"
            "class Agent:\n    def __init__(self, n):\n        self.critic = Critic(n).float()\n"
            "        self.opt = torch.optim.Adam(self.critic.parameters())\n\n"
            "    def value_of(self, s):\n        with torch.no_grad():\n            return self.critic(s)\n\n"
            "    def update(self, s, ret):\n        (self.critic(s) - ret).pow(2).mean().backward()\n"
            "        self.opt.step()\n"
        ),
    ]
    INVALID = [
        # the same critic with a dropout layer: `.eval()` matters, still fixed
        Invalid(
            "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n"
            "class Critic(nn.Module):\n    def __init__(self, n):\n        super().__init__()\n"
            "        self.hidden = nn.Linear(n, 32)\n        self.value = nn.Sequential(nn.Dropout(0.1), nn.Linear(32, 1))\n\n"
            "    def forward(self, s):\n        return self.value(F.relu(self.hidden(s)))\n\n"
            "class Agent:\n    def __init__(self, n):\n        self.critic = Critic(n).float()\n"
            "        self.opt = torch.optim.Adam(self.critic.parameters())\n\n"
            "    def value_of(self, s):\n        with torch.no_grad():\n            return self.critic(s)\n\n"
            "    def update(self, s, ret):\n        (self.critic(s) - ret).pow(2).mean().backward()\n"
            "        self.opt.step()\n",
            "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n"
            "class Critic(nn.Module):\n    def __init__(self, n):\n        super().__init__()\n"
            "        self.hidden = nn.Linear(n, 32)\n        self.value = nn.Sequential(nn.Dropout(0.1), nn.Linear(32, 1))\n\n"
            "    def forward(self, s):\n        return self.value(F.relu(self.hidden(s)))\n\n"
            "class Agent:\n    def __init__(self, n):\n        self.critic = Critic(n).float()\n"
            "        self.opt = torch.optim.Adam(self.critic.parameters())\n\n"
            "    def value_of(self, s):\n        self.critic.eval()\n        with torch.no_grad():\n            return self.critic(s)\n\n"
            "    def update(self, s, ret):\n        (self.critic(s) - ret).pow(2).mean().backward()\n"
            "        self.opt.step()\n",
        ),
        # an RNN carrying its hidden state over a data set is an evaluation, not sampling
        Invalid(
            "import torch\n" + _TRAIN + "\ndef evaluate(model, batches):\n    hidden, total = None, 0.0\n"
            "    with torch.no_grad():\n        for x, y in batches:\n            out, hidden = model(x, hidden)\n"
            "            total += (out - y).pow(2).sum().item()\n    return total\n",
            "import torch\n" + _TRAIN + "\ndef evaluate(model, batches):\n    hidden, total = None, 0.0\n"
            "    model.eval()\n    with torch.no_grad():\n        for x, y in batches:\n            out, hidden = model(x, hidden)\n"
            "            total += (out - y).pow(2).sum().item()\n    return total\n",
        ),
        # a module built in the function without `.eval()`: reported, but `.eval()` cannot go
        # before the binding, so no automatic fix
        Invalid(
            "import torch\n" + _TRAIN + "\n@torch.no_grad()\ndef predict(path, x):\n    model = Net()\n"
            "    model.load_state_dict(torch.load(path))\n    return model(x)\n",
            None,
        ),
        # a Sequential with dropout does care about the mode
        Invalid(
            "import torch\nfrom torch import nn\nmodel = nn.Sequential(nn.Linear(1, 64), nn.Dropout(0.2), nn.Linear(64, 1))\n"
            "opt = torch.optim.SGD(model.parameters(), lr=0.1)\nfor step in range(100):\n"
            "    opt.zero_grad()\n    model(x).sub(y).pow(2).mean().backward()\n    opt.step()\n\n"
            "def curve(grid):\n    with torch.no_grad():\n        return model(grid)\n",
            "import torch\nfrom torch import nn\nmodel = nn.Sequential(nn.Linear(1, 64), nn.Dropout(0.2), nn.Linear(64, 1))\n"
            "opt = torch.optim.SGD(model.parameters(), lr=0.1)\nfor step in range(100):\n"
            "    opt.zero_grad()\n    model(x).sub(y).pow(2).mean().backward()\n    opt.step()\n\n"
            "def curve(grid):\n    model.eval()\n    with torch.no_grad():\n        return model(grid)\n",
        ),
        # the last helper called before the evaluation leaves the model in *train* mode
        Invalid(
            "import torch\n" + _TRAIN + "\ndef test(model, x):\n    model.eval()\n    with torch.no_grad():\n"
            "        return model(x)\n\ndef main(model, loader, opt, x):\n    test(model, x)\n"
            "    train(model, loader, opt)\n    with torch.no_grad():\n        z = model(x)\n    return z\n",
            "import torch\n" + _TRAIN + "\ndef test(model, x):\n    model.eval()\n    with torch.no_grad():\n"
            "        return model(x)\n\ndef main(model, loader, opt, x):\n    test(model, x)\n"
            "    train(model, loader, opt)\n    model.eval()\n    with torch.no_grad():\n        z = model(x)\n    return z\n",
        ),
        # the enclosing function sets *train* mode before running the nested evaluation
        Invalid(
            "import torch\n" + _TRAIN + "\ndef fit(model, x):\n    model.train()\n    def val():\n        with torch.no_grad():\n"
            "            return model(x)\n    return val()\n",
            "import torch\n" + _TRAIN + "\ndef fit(model, x):\n    model.train()\n    def val():\n        model.eval()\n"
            "        with torch.no_grad():\n            return model(x)\n    return val()\n",
        ),
        # two regions in two branches: one eval() before the statement holding both
        Invalid(
            "import torch\n" + _TRAIN + "\ndef ev(model, x, fast):\n    if fast:\n        with torch.no_grad():\n            return model(x)\n"
            "    else:\n        with torch.no_grad():\n            return model(x) + 1\n",
            "import torch\n" + _TRAIN + "\ndef ev(model, x, fast):\n    model.eval()\n    if fast:\n        with torch.no_grad():\n            return model(x)\n"
            "    else:\n        with torch.no_grad():\n            return model(x) + 1\n",
        ),
        Invalid(
            "import torch\n" + _TRAIN + "\ndef evaluate(model, x):\n    out = []\n    with torch.no_grad():  # eval\n        out.append(model(x))\n    return out\n",
            "import torch\n" + _TRAIN + "\ndef evaluate(model, x):\n    out = []\n    model.eval()\n    with torch.no_grad():  # eval\n        out.append(model(x))\n    return out\n",
        ),
        Invalid(
            "import torch as T\n" + _TRAIN + '\n@T.no_grad()\ndef evaluate(model, x):\n    """Score."""\n    return model(x)\n',
            "import torch as T\n" + _TRAIN + '\n@T.no_grad()\ndef evaluate(model, x):\n    """Score."""\n    model.eval()\n    return model(x)\n',
        ),
        Invalid(
            "from torch.autograd.grad_mode import no_grad\n" + _TRAIN + "\ndef evaluate(model, x):\n    with no_grad():\n        return model.encoder(x)\n",
            "from torch.autograd.grad_mode import no_grad\n" + _TRAIN + "\ndef evaluate(model, x):\n    model.eval()\n    with no_grad():\n        return model.encoder(x)\n",
        ),
        Invalid(
            "import torch\n" + _TRAIN + "\ndef evaluate(model, x):\n    with torch.inference_mode():\n        return model(x)\n",
            "import torch\n" + _TRAIN + "\ndef evaluate(model, x):\n"
            "    was_training = model.training\n    model.eval()\n    try:\n        with torch.inference_mode():\n            return model(x)\n"
            "    finally:\n        model.train(was_training)\n",
            options={"style": "restore"},
        ),
        Invalid(
            "import torch\n" + _TRAIN + "\n@torch.no_grad\ndef evaluate(model, x):\n    y = model(x)\n    return y\n",
            "import torch\n" + _TRAIN + "\n@torch.no_grad\ndef evaluate(model, x):\n"
            "    was_training = model.training\n    model.eval()\n    try:\n        y = model(x)\n        return y\n"
            "    finally:\n        model.train(was_training)\n",
            options={"style": "restore"},
        ),
    ]

    def check(self, facts):
        for gap in evaluation_gaps(facts):
            region = gap.region
            names = ", ".join(f"`{m}`" for m in gap.modules)
            evals = "; ".join(f"`{m}.eval()`" for m in gap.modules)
            where = f"`{facts.segment(region.expr)}`" + (" (decorator)" if region.kind == "decorator" else "")
            if self.opts.get("style") == "restore":
                consequence = (
                    f"saves the mode, inserts {evals} and restores the mode in a `finally`: evaluation results "
                    f"change (dropout off, batch-norm uses and no longer updates its running statistics)"
                )
            else:
                consequence = (
                    f"inserts {evals}: evaluation results change (dropout off, batch-norm uses and no longer "
                    f"updates its running statistics), and the module stays in eval mode afterwards, so later "
                    f"training must call `.train()` again (GF105 inserts it)"
                )
            message = (
                f"{names} is evaluated under {where} without {evals}: disabling grad does not switch dropout "
                f"off or freeze batch-norm, and this file trains {names}. Fix (unsafe) {consequence}"
            )
            if region.kind == "decorator":
                target, last = body_start(gap.func.body), gap.func.body[-1]
                anchors = [gap.func, region.expr.lineno]
            else:
                target, last = _wrap_range(facts, gap)
                anchors = [region.owner]
            if len(gap.modules) == 1:
                flags = (unused_name(facts, gap.func, "was_training"),)
            else:
                flags = tuple(unused_name(facts, gap.func, f"{m.rsplit('.', 1)[-1]}_was_training") for m in gap.modules)
            data = (tuple(gap.modules), facts.span(target), facts.span(last), flags)
            late = _bound_from(facts, gap.func, gap.modules, target)
            if late is not None:
                message = (
                    f"{names} is evaluated under {where} without {evals}: disabling grad does not switch dropout "
                    f"off or freeze batch-norm. No automatic fix: `{late}` is bound in this function at or after "
                    f"the place `.eval()` would go; call `.eval()` on it right after it is built or loaded"
                )
                yield self.report(facts, gap.call, message, anchors=anchors, fix=False)
                continue
            yield self.report(facts, gap.call, message, anchors=anchors, data=data)

    def fix(self, finding, ctx):
        from gradfix.fixer import Edit, FixError

        modules, target_span, last_span, flags = finding.data
        target = statement_at(ctx, target_span)
        evals = [ctx.statement(f"{m}.eval()\n") for m in modules]
        if self.opts.get("style") != "restore":
            return insert_before(ctx, target, evals)
        saves = [ctx.statement(f"{f} = {m}.training\n") for f, m in zip(flags, modules)]
        restores = [ctx.statement(f"{m}.train({f})\n") for f, m in zip(flags, modules)]
        parent = ctx.parent(target)
        last = statement_at(ctx, last_span)
        if not isinstance(parent, cst.IndentedBlock) or ctx.parent(last) is not parent:
            raise FixError("the region is not in an indented block")
        body = list(parent.body)
        start = next(i for i, s in enumerate(body) if s is target)
        stop = next(i for i, s in enumerate(body) if s is last) + 1
        wrapped = body[start:stop]
        moved = [wrapped[0].with_changes(leading_lines=[]), *wrapped[1:]]
        attempt = cst.Try(
            body=cst.IndentedBlock(body=moved),
            finalbody=cst.Finally(body=cst.IndentedBlock(body=restores)),
        )
        new = [*saves, *evals, attempt]
        new[0] = new[0].with_changes(leading_lines=wrapped[0].leading_lines)
        if len(wrapped) == 1:
            return [Edit(target, cst.FlattenSentinel(new))]
        return [Edit(parent, parent.with_changes(body=[*body[:start], *new, *body[stop:]]))]

    @staticmethod
    def contract():
        # gradfix verify: evaluation passes become repeatable (dropout off) and leave
        # batch-norm statistics alone; grad mode and exceptions unchanged.
        from gradfix.verify.contract import Contract, ForwardMode, RepeatableCalls

        return Contract(
            "evaluation runs in eval mode: repeatable outputs, batch-norm stats untouched",
            may_differ=("*: returned*", "*: state *", "*: training *", "*: forwards"),
            expect=(RepeatableCalls("eval"), ForwardMode("eval", "training", False)),
            downstream=True,
            keep=("*: grad mode after", "exception"),
        )


def _bound_from(facts: FileFacts, func, modules: list[str], target: ast.stmt) -> str | None:
    """A module name (its root) that ``func`` binds at or after ``target``, where the fix
    would insert `<module>.eval()`: inserting there would read it before it exists."""
    roots = {m.split(".", 1)[0] for m in modules}
    for stmt in facts.statements(func):
        if pos(stmt) < pos(target) and not is_descendant(facts, stmt, target):
            continue
        bound = set()
        if isinstance(stmt, ast.Assign):
            bound = set().union(*map(_bound_names, stmt.targets))
        elif isinstance(stmt, (ast.AnnAssign, ast.AugAssign)):
            bound = _bound_names(stmt.target)
        elif isinstance(stmt, (ast.For, ast.AsyncFor)):
            bound = _bound_names(stmt.target)
        elif isinstance(stmt, (ast.With, ast.AsyncWith)):
            bound = set().union(set(), *(_bound_names(i.optional_vars) for i in stmt.items if i.optional_vars))
        hit = sorted(bound & roots)
        if hit:
            return hit[0]
    return None


def _wrap_range(facts: FileFacts, gap: EvalGap) -> tuple[ast.stmt, ast.stmt]:
    """First and last statement of one block that together hold every flagged call.

    Usually the `with` itself; two regions (say in two branches) give the innermost statement
    holding both, or a run of sibling statements of the function body.
    """
    owner = gap.region.owner
    if all(is_descendant(facts, c, owner) for c in gap.calls):
        return owner, owner
    node = facts.parents.get(gap.call)
    while node is not None and node is not gap.func:
        if isinstance(node, ast.stmt) and all(is_descendant(facts, c, node) for c in gap.calls):
            return node, node
        node = facts.parents.get(node)
    children = [s for s in gap.func.body if any(is_descendant(facts, c, s) for c in gap.calls)]
    return children[0], children[-1]
