"""Module-mode state: which module expressions are in train or eval mode where.

``.train()``/``.eval()`` set a flag that sticks (it is not scoped like ``no_grad``), so the mode
of ``model`` at a call is what the last switch reaching that call on its path set: a switch in
the same function (before it, or in a loop around both), a binding to a module built in eval
mode (``model = Net().eval()``), a freshly built module (train), a call of a file function
whose summary leaves the module in eval mode or picks the mode by an argument
(``set_mode(train=False)``), a switch by an enclosing function or a caller before the call, or
else whatever the caller had ("entry"). Functions whose caller owns the mode (``forward``,
framework methods, hooks: see gradfix/analysis/vocabulary.py) are never second-guessed.

What kind of module it is (mode-sensitive, mode-free, unknown) is gradfix/analysis/project.py's
answer, asked through :func:`module_sensitivity`.
"""

from __future__ import annotations

import ast
import os
import re
from dataclasses import dataclass

from gradfix.analysis.calls import argument_for, callee, callees, callers, dead, outside_callers, unbound
from gradfix.analysis.flow import NOT_INSTANCE, ForwardFlow, InstanceTests, innermost_statement, last_iteration_ifs, not_instance_flow
from gradfix.analysis.insertion import body_start
from gradfix.analysis.project import UNKNOWN, Sensitivity, combine, qualify, strip_moves
from gradfix.analysis.provenance import UNKNOWN as NO_DEFINITION, module_definitions, reaching_definitions
from gradfix.analysis.vocabulary import (
    FUNCTIONS,
    LOOPS,
    LOSS_LIKE,
    backpropagates_a_loss,
    calls_backward,
    forward_callee,
    is_optimizer_step,
    module_expression,
    owner_class,
    steps_optimizer,
)
from gradfix.facts import FileFacts, GradRegion, bound_names, dotted_name, literal_bool, parameter_names


def own_calls(facts: FileFacts, scope) -> list[ast.Call]:
    return facts.calls_in(scope)


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


# Batch-norm recalibration runs the model in train mode under no_grad on purpose.
RECALIBRATION = re.compile(r"(^|_)(bn|batch_?norm|calib\w*|recalib\w*|swa)(_|$)", re.IGNORECASE)


EVALISH = re.compile(r"(^|_)(eval|evaluate|evaluation|validate|validation|val|valid|test|infer|inference|predict)", re.I)


# GAN generators are often sampled in training mode on purpose (pix2pix keeps dropout as noise;
# StarGAN's instance norm gives other images with its running statistics): see
# :func:`sampled_in_train_mode_by_convention`.
GENERATOR = re.compile(r"^(G|G_?[A-Z0-9]\w*|G_\w+|netG\w*|net_?[gG]|g_ema|gen|gen_\w+|\w*[gG]enerator\w*)$")


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
    receiver = module_expression(func.value)  # `model.to(dev).eval()` switches `model`
    if receiver is None:
        return None
    if func.attr == "eval":
        return Switch(call, receiver, "eval") if not call.args and not call.keywords else None
    args = list(call.args) + [k.value for k in call.keywords if k.arg == "mode"]
    if not args and call.keywords and all(k.arg is not None and isinstance(k.value, ast.Constant) for k in call.keywords):
        # `model.train(reset=False)`: an override with options of its own (gpytorch's fully
        # Bayesian models); which mode it leaves is its own affair
        return Switch(call, receiver, "unknown")
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
    """Every ``.train()``/``.eval()`` call of the file (what the file itself does)."""
    return facts.memo(("module_mode.switches",), lambda: [s for s in map(switch_of, facts.calls) if s is not None])


def own_switches(facts: FileFacts, scope) -> list[Switch]:
    return [s for s in switches(facts) if facts.function_of.get(s.call) is scope]


def same_object(facts: FileFacts, name: str, a: ast.AST, b: ast.AST) -> bool:
    """Whether ``name`` at ``a`` and at ``b`` can be one object: `self.model` in two classes is not."""
    if name.split(".", 1)[0] not in ("self", "cls"):
        return True
    return owner_class(facts, a) is owner_class(facts, b)


def forward_target(facts: FileFacts, call: ast.Call) -> str | None:
    """Dotted name of the module whose forward the call can run (``m(x)``, ``m.forward(x)``,
    ``m.to(dev)(x)``: :func:`forward_callee`), else None."""
    name = forward_callee(call)
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

    Evidence: `.train()` on the name (not one that gives back a mode it saved), or a training
    scope (`.backward()`/optimizer step) that calls it with grad enabled. The nodes let callers tell `self.model` of one class from another's.
    """
    return facts.memo(("module_mode.trained_evidence",), lambda: _trained_evidence(facts))


def _trained_evidence(facts: FileFacts) -> dict[str, list[ast.AST]]:
    evidence: dict[str, list[ast.AST]] = {}
    for s in switches(facts):
        # `if was_training: m.train()` gives the caller's mode back: it trains nothing
        if s.call.func.attr == "train" and _modeish(s) and s.call not in _restoring_calls(facts, facts.function_of.get(s.call), s.receiver):
            evidence.setdefault(s.receiver, []).append(s.call)
    module_like = {m.receiver for m in facts.method_calls if m.method in MODULE_USES and m.receiver}
    module_like |= {s.receiver for s in switches(facts)}
    for scope in [None, *facts.functions]:
        if scope is not None and dead(facts, scope):
            continue  # redefined before anything runs it: not what the file trains
        if not (backpropagates_a_loss(facts, scope) or steps_optimizer(facts, scope)):
            continue
        # The scope's own `.train()` calls and its optimizers name what it trains; a module it
        # runs but neither switches nor optimizes is kept frozen on purpose (an old model, a
        # teacher for distillation): see switches_others_only.
        for call in own_calls(facts, scope):
            name = forward_callee(call)
            if name is None or facts.resolve_name(name.split(".")[0], call) is not None:
                continue
            if facts.grad_mode_at(call) == "disabled":
                continue  # a training scope's samples or frozen teacher: not what it trains
            if switches_others_only(facts, scope, name):
                continue
            if _kept_in_eval(facts, scope, name, call):
                continue  # `model.eval()` first: an attack's or a sampler's input gradients
            if name in module_like and not LOSS_LIKE.search(name.rsplit(".", 1)[-1]):
                evidence.setdefault(name, []).append(call)
    evidence.pop("self", None)
    return evidence


def _kept_in_eval(facts: FileFacts, scope, name: str, call: ast.Call) -> bool:
    """Every path of ``scope`` reaches ``call`` with ``name`` in the eval mode the scope's own
    switches put it in: a backward through it (an adversarial attack, Langevin sampling) takes
    gradients of its input, it does not train it."""
    items = _switch_items(facts, scope, {name})
    return any(i.kind == "eval" for i in items) and modes_at(facts, scope, call, items) == {EVAL}


def fresh_local(facts: FileFacts, name: str, at: ast.AST):
    """The function whose own object ``name`` is at ``at``: the nearest enclosing function that
    binds its root by assignment (not as a parameter, not `global`/`nonlocal`). Such a name is a
    new object of that function (`m = make(...)` in one test is not another test's `m`). None for
    a parameter, a global, module-level code and `self.x`, which may share evidence by name."""
    scope = _binding_scope(facts, name, at)
    if scope is None or scope is _ANY or not isinstance(scope, FUNCTIONS):
        return None
    params = parameter_names(scope)
    root = name.split(".", 1)[0]
    if root in params and not _rebound_parameter(facts, scope, root, at):
        return None
    return scope


def _rebound_parameter(facts: FileFacts, scope, root: str, at: ast.AST) -> bool:
    """Every binding of the parameter ``root`` that reaches ``at`` is the function's own
    assignment of a new object (`model = Infer(model.lin.weight)`): not the argument, nor a move
    or wrapper of it (`model = model.to(dev)`, `model = DDP(model)` share its mode)."""
    if root not in _stores(facts, scope):
        return False  # never assigned: only the argument can reach ``at``
    read = _first_read(at, root)
    if read is None or facts.function_of.get(read) is not scope:
        return False
    found = reaching_definitions(facts, scope).reaching.get(read)
    if not found or NO_DEFINITION in found:
        return False
    for d in found:
        value = strip_moves(d.value) if d.kind == "assign" else None
        called = dotted_name(value.func) if isinstance(value, ast.Call) else None
        if called is None or called.split(".", 1)[0] == root:
            return False
        arguments = (strip_moves(a) for a in (*value.args, *(k.value for k in value.keywords)))
        if any(isinstance(a, ast.Name) and a.id == root for a in arguments):
            return False
    return True


def _first_read(node: ast.AST, name: str) -> ast.Name | None:
    """The first read of the plain name ``name`` within ``node`` (breadth first), or None."""
    return next((n for n in ast.walk(node) if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)), None)


def another_functions_object(facts: FileFacts, scope, name: str, node: ast.AST) -> bool:
    """``name`` at ``node`` is a fresh object of another function than ``scope`` (see
    :func:`fresh_local`), and that function never calls ``scope``: what it does to its own
    `m` (`m = make(); m.eval()` in one test) cannot reach ``scope``'s module."""
    own = fresh_local(facts, name, node)
    if own is None or own is scope or (scope is not None and is_descendant(facts, scope, own)):
        return False
    return scope is None or not any(scope in callees(facts, c).defs for c in own_calls(facts, own))


def evidence_for(facts: FileFacts, name: str, at: ast.AST) -> list[ast.AST]:
    """The nodes of :func:`trained_evidence` that are about the object ``name`` is at ``at``.

    A function's own object (:func:`fresh_local`) is trained only by its own function: its
    switches and training calls, and its calls that hand it to a file function that trains
    the parameter it lands in. Parameters, globals and attributes share evidence by name (as
    `def train(net)` and `def test(net)` called with one model do), but never a fresh object
    of another function, unless that function passes it to the one holding ``at``."""
    own = fresh_local(facts, name, at)
    func = facts.function_of.get(at)
    cls = owner_class(facts, at) if name.split(".", 1)[0] in ("self", "cls") else None
    key = ("module_mode.evidence_for", name, id(own), id(func), id(cls))
    return facts.memo(key, lambda: _evidence_for(facts, name, at, own, func))


def _evidence_for(facts: FileFacts, name: str, at: ast.AST, own, func) -> list[ast.AST]:
    trained = trained_evidence(facts)
    if not trained:
        return []  # every piece of evidence below is some name's training
    nodes = [e for e in trained.get(name, ()) if same_object(facts, name, at, e) and fresh_local(facts, name, e) is own]
    if own is not None or _module_object(facts, name, at):
        # the holder's calls that hand the object to a def of the file training that parameter
        for call in own_calls(facts, own):
            if not _hands_on(call, name):
                continue  # passed_names would add nothing but the name itself
            for helper in callees(facts, call).defs:
                if helper is own:
                    continue
                params = passed_names(helper, call, (name,))
                if name.split(".", 1)[0] not in parameter_names(helper, star=False):
                    params.discard(name)  # the helper's own global of that name is another object
                for param in params:
                    if any(fresh_local(facts, param, e) is None and is_descendant(facts, e, helper) for e in trained.get(param, ())):
                        nodes.append(call)
        if own is not None:
            return list(dict.fromkeys(nodes))
    if isinstance(func, FUNCTIONS) and name.split(".", 1)[0] in parameter_names(func, star=False):
        # every call hands the parameter itself (not `model.inference`, a method or part of it,
        # judged through its prefix) an object of the caller's own: what is known of those
        handed = _handed_own_objects(facts, func, name) if "." not in name else []
        if handed:
            return list(dict.fromkeys(n for passed, call in handed for n in evidence_for(facts, passed, call)))
        for call in outside_callers(facts, func):  # a caller's own object passed in: `m = Net(); …train…; evaluate(m)`
            for arg in (*call.args, *(k.value for k in call.keywords)):
                passed = dotted_name(arg)
                if passed and name in passed_names(func, call, (passed,)) and fresh_local(facts, passed, call) is not None:
                    nodes += [e for e in trained.get(passed, ()) if fresh_local(facts, passed, e) is fresh_local(facts, passed, call)]
    return list(dict.fromkeys(nodes))


def _handed_own_objects(facts: FileFacts, func, name: str) -> list[tuple[str, ast.Call]]:
    """``(what the caller passes, call)`` for each call of ``func`` from elsewhere in the file,
    when every one hands the parameter ``name`` an object of the caller's own (two tests that
    each build a policy and hand it to one helper), or a global that module-level code binds
    and hands over (a notebook's `test(loader, bertmodel)`): empty when any call hands
    something else, or there is none. Another function's parameter of the same name is then
    not that object."""
    out = []
    for call in outside_callers(facts, func):
        arg = argument_for(func, call, name)
        passed = dotted_name(arg) if arg is not None else None
        if passed is None or (fresh_local(facts, passed, call) is None and not _module_object(facts, passed, call)):
            return []
        out.append((passed, call))
    return out


def _module_object(facts: FileFacts, name: str, at: ast.AST) -> bool:
    """``name`` at ``at`` is a global that module-level code binds by assignment, read by
    module-level code: the object a script or notebook builds and hands to its helpers."""
    root = name.split(".", 1)[0]
    return (
        facts.function_of.get(at) is None
        and root not in ("self", "cls")
        and any(facts.function_of.get(node) is None for node in facts.assignments_to(root))
    )


def _hands_on(call: ast.Call, name: str) -> bool:
    """``call`` passes ``name``, or a part or a submodule of it, as an argument."""
    for arg in (*call.args, *(k.value for k in call.keywords)):
        passed = dotted_name(arg)
        if passed and related(passed, name):
            return True
    return False


def not_a_module(facts: FileFacts, name: str, at: ast.AST, depth: int = 0) -> bool:
    """``name`` at ``at`` is no nn.Module, so it has no train/eval mode (`.eval()` on it raises
    AttributeError): it failed an `isinstance(name, nn.Module)` test on every path there (see
    :func:`gradfix.analysis.flow.not_instance_at`), or every binding of it that ``at`` sees
    (the ones reaching it, in the scope that binds it) builds an instance of a project class
    that does not derive from nn.Module, or it is a parameter that every call in the file hands
    such an object (a notebook's plain `Adaline` class trained by a `train(model)` helper)."""
    func = facts.function_of.get(at)
    if name in _isinstance_tested(facts, func):
        body = facts.tree.body if func is None else getattr(func, "body", [])
        if isinstance(body, list):
            flow = facts.memo(
                ("module_mode.narrowing", id(func), name),
                lambda: not_instance_flow(body, name, lambda c: facts.qualname(c) in _MODULE_CLASS),
            )
            if flow.at.get(id(innermost_statement(facts.parents, at))) == NOT_INSTANCE:
                return True
    reaching = _reaching_bindings(facts, name, at)
    key = ("module_mode.no_module_bindings", name, reaching if reaching is not None else id(_binding_scope(facts, name, at)))
    if facts.memo(key, lambda: _no_module_bindings(facts, name, at, reaching)):
        return True
    return depth < 3 and facts.memo(("module_mode.handed_non_modules", name, id(func)), lambda: _handed_non_modules(facts, name, func, depth))


def _handed_non_modules(facts: FileFacts, name: str, func, depth: int) -> bool:
    """``name`` roots in a parameter of ``func`` that ``func`` never rebinds, and every call of
    ``func`` from elsewhere in the file hands it something that is no nn.Module."""
    root = name.split(".", 1)[0]
    if not isinstance(func, FUNCTIONS) or root not in parameter_names(func, star=False) or root in _stores(facts, func):
        return False
    calls = outside_callers(facts, func)
    for call in calls:
        arg = argument_for(func, call, root)
        passed = dotted_name(arg) if arg is not None else None
        if passed is None or not not_a_module(facts, passed + name[len(root):], call, depth + 1):
            return False
    return bool(calls)


def _isinstance_tested(facts: FileFacts, func) -> set[str]:
    """Names that `isinstance(name, ...)` tests in ``func``'s own code."""

    def compute():
        return {
            dotted_name(c.args[0])
            for c in facts.calls_in(func)
            if isinstance(c.func, ast.Name) and c.func.id == "isinstance" and len(c.args) == 2
        } - {None}

    return facts.memo(("module_mode.isinstance_tested", id(func)), compute)


def _no_module_bindings(facts: FileFacts, name: str, at: ast.AST, reaching: frozenset | None) -> bool:
    """Every binding of ``name`` that ``at`` sees (``reaching``, when known) builds an instance
    of a project class that does not derive from nn.Module (none: unknown, False)."""
    sens = sensitivity_of(facts)
    names = sens.trees[sens.module][1]
    scope = _binding_scope(facts, name, at)
    values = []
    for node in facts.assignments_to(name):
        if scope is not _ANY and facts.function_of.get(node) is not scope:
            continue
        if reaching is not None and node not in reaching:
            continue
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        if any(dotted_name(t) == name for t in targets):
            values.append(strip_moves(node.value))
    if not values:
        return False
    for value in values:
        qual = qualify(names, value.func) if isinstance(value, ast.Call) else None
        if qual is None or (sens.is_module_class(qual) is not False and not sens.returns_plain_instance(qual)):
            return False
    return True


_MODULE_CLASS = frozenset({"torch.nn.Module", "torch.nn.modules.module.Module"})


def mode_api(facts: FileFacts, func, names: tuple[str, ...]) -> bool:
    """The class of ``func`` has its own `train`/`eval` methods that switch the module: its
    users set the mode through them (`agent.eval()` … `agent.train()`), not its other methods.
    A `train` method that is a training loop itself (`.backward()`, an optimizer step) is no
    mode setter."""
    cls = owner_class(facts, func)
    if cls is None:
        return False
    for method in cls.body:
        if isinstance(method, FUNCTIONS) and method.name in ("train", "eval"):
            if calls_backward(facts, method) or steps_optimizer(facts, method):
                continue
            if any(any(related(s.receiver, n) for n in names) for s in own_switches(facts, method)):
                return True
    return False


def _names_in(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _feeds_training(facts: FileFacts, func) -> bool:
    """``func``'s result is a training input: a caller passes it on to a training function of
    this file or into the tensor it `.backward()`s (RL targets, teacher outputs, pseudo-labels).
    The mode of that computation is the training's, not an evaluation's."""
    for call in outside_callers(facts, func):
        stmt = facts.parents.get(call)
        if isinstance(stmt, ast.Assign) and stmt.value is call and _result_trains(facts, call):
            return True
    return False


def _result_trains(facts: FileFacts, node: ast.AST) -> bool:
    """What the assignment holding ``node`` binds is a training input later in the same
    function: passed to a function of this file that trains (one that calls `.backward()` or
    steps an optimizer, itself or through the file's functions it calls) or into a tensor
    `.backward()` is called on. ``next_v = self.vf(s2)`` under no_grad followed by
    ``self._update_q(next_v, ...)`` computes a target of the training step, not an evaluation."""
    stmt = innermost_statement(facts.parents, node)
    if isinstance(stmt, ast.Assign):
        produced = {n for t in stmt.targets for n in bound_names(t)}
    elif isinstance(stmt, (ast.AnnAssign, ast.AugAssign)):
        produced = set(bound_names(stmt.target))
    else:
        return False
    if not produced:
        return False
    scope = facts.function_of.get(node)
    for later in own_calls(facts, scope):
        if pos(later) <= pos(node):
            continue
        read = set().union(set(), *(_names_in(a) for a in [*later.args, *(k.value for k in later.keywords)]))
        if isinstance(later.func, ast.Attribute) and later.func.attr == "backward":
            read |= _names_in(later.func.value)
        elif not any(trains(facts, f) for f in callees(facts, later).defs):
            continue
        if any(r in produced or facts.flows_into(scope, produced, r) for r in read):
            return True
    return False


def trains(facts: FileFacts, func, depth: int = 0) -> bool:
    """``func`` calls `.backward()` or steps an optimizer, in its own code or through the
    defs of this file its calls may run (followed three calls deep)."""
    if calls_backward(facts, func) or steps_optimizer(facts, func):
        return True
    if depth >= 3:
        return False
    return facts.memo(
        ("module_mode.trains", id(func), depth),
        lambda: any(trains(facts, f, depth + 1) for c in own_calls(facts, func) for f in callees(facts, c).defs if f is not func),
    )


def callee_name(call: ast.Call) -> str | None:
    func = call.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def outer_disabled_region(facts: FileFacts, node: ast.AST) -> GradRegion | None:
    regions = facts.regions_around(node)
    if not regions or regions[0].mode != "disabled":
        return None
    disabled = [r for r in regions if r.mode == "disabled" and (r.called or r.kind == "decorator")]
    if not disabled or not (regions[0].called or regions[0].kind == "decorator"):
        return None
    return disabled[-1]


def passed_names(func, call: ast.Call, names: tuple[str, ...]) -> set[str]:
    """Names that mean one of ``names`` inside ``func`` when ``call`` calls it: the parameters
    the call hands them to, and the names themselves unless a parameter of ``func`` shadows
    them (`def evaluate(model)` called as `evaluate(eval_model)` switches `eval_model`, not the
    caller's `model`); `self.x` stays `self.x` (a method called on the same object)."""
    shadowing = parameter_names(func, star=False)
    inside = {n for n in names if n.split(".", 1)[0] in ("self", "cls") or n.split(".", 1)[0] not in shadowing}
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
        produced = {n for t in stmt.targets for n in bound_names(t)}
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
            items |= set(bound_names(loop.target))
    items -= produced
    return not any(i in items or facts.flows_into(func, items, i) for i in inputs)


def _output_discarded(facts: FileFacts, call: ast.Call) -> bool:
    """`model(batch)` as a bare statement, or bound to `_`: run for its side effects (lazy
    parameters, warm-up, tracing), not to look at its outputs; not an evaluation."""
    parent = facts.parents.get(call)
    if isinstance(parent, ast.Expr) and parent.value is call:
        return True
    return (
        isinstance(parent, ast.Assign)
        and parent.value is call
        and all(isinstance(t, ast.Name) and t.id == "_" for t in parent.targets)
    )


def _managed_by_enclosing(facts: FileFacts, func, names: tuple[str, ...]) -> bool:
    """An enclosing function has switched the module out of train mode, on every path, where
    it calls the nested def (or hands it on as a callback: who calls it when is unknown)."""
    inner = func
    for outer in facts.enclosing_functions(func):
        if any(s.mode != "train" and any(related(s.receiver, n) for n in names) for s in own_switches(facts, outer)):
            calls = [c for c in own_calls(facts, outer) if inner in callees(facts, c).defs]
            if not calls or any(_set_at(facts, outer, c, set(names), {EVAL, UNSET}) for c in calls):
                return True
        if _only_eval_in(facts, outer, names):
            return True
        inner = outer
    return False


def _only_eval_in(facts: FileFacts, outer, names: tuple[str, ...]) -> bool:
    """``outer`` binds the module itself, and everything it does to its mode leaves it in eval
    mode (`model = AutoModel.from_pretrained(..)`, then only moves): a nested def that reads it,
    whenever it runs, sees it in eval mode (before the binding the read would raise NameError)."""
    root = names[0].split(".", 1)[0]
    if root not in facts.scope_of_node[outer].locals or root in parameter_names(outer):
        return False
    items = evaluation_items(facts, outer, set(names))
    return bool(items) and all(i.kind == "eval" and not i.modes for i in items)


def _managed_by_caller(facts: FileFacts, func, names: tuple[str, ...]) -> bool:
    """A caller elsewhere in the file has set the mode of the module (or of what it passes) on
    every path to its call; a `.train()` does not count for an evaluation (`model.train();
    evaluate(model)` is the bug, not a caller owning the mode)."""
    allowed = {EVAL, UNSET} if EVALISH.search(func.name) else {EVAL, UNSET, TRAIN}
    params = parameter_names(func, star=False)
    for call in callers(facts, func):
        scope = facts.function_of.get(call)
        if scope is func or isinstance(scope, ast.Lambda):
            continue
        passed = {dotted_name(a) for a in [*call.args, *(k.value for k in call.keywords)]} - {None}
        switched = {s.receiver for s in own_switches(facts, scope)} | {r for _, r in flag_writes(facts, scope)}
        known = set(names) | {p for p in passed if any(related(p, r) for r in switched)}
        # what the caller hands in for the module parameter: its bindings set the mode too
        # (`model = Auto.from_pretrained(..)` is in eval mode with no `.eval()` anywhere)
        handed = {dotted_name(argument_for(func, call, n)) for n in {m.split(".", 1)[0] for m in names} & params}
        handed -= {None}
        if any(any(related(r, n) for n in known) for r in switched):
            if _set_at(facts, scope, call, known | handed, allowed):
                return True
        elif handed and _set_at(facts, scope, call, handed, {EVAL}):
            return True  # no switch there: only a binding that gives eval mode sets it
    return False


def _set_at(facts: FileFacts, scope, call: ast.Call, names: set[str], allowed: set[str]) -> bool:
    """``scope`` has set the module's mode to one of ``allowed`` on every path to ``call``."""
    modes = modes_at(facts, scope, call, evaluation_items(facts, scope, names))
    return bool(modes) and modes <= allowed


def _branch_of(facts: FileFacts, node: ast.AST, stop) -> tuple[ast.If, str] | None:
    """The innermost `if` (below ``stop``) holding ``node``, and which branch: body/orelse."""
    child, current = node, facts.parents.get(node)
    while current is not None and current is not stop:
        if isinstance(current, ast.If) and child is not current.test:
            return current, ("body" if child in current.body else "orelse")
        child, current = current, facts.parents.get(current)
    return None


def _mode_by_argument(facts: FileFacts, func, call: ast.Call, names: set[str]) -> str | None:
    """``func`` switches the module to train in one branch of an `if` and to eval in the other
    (`def net_mode(self, train): if train: net.train() else: net.eval()`): the caller picks the
    mode. Returns the mode ``call`` picks when its argument is a literal bool, `"train"` when it
    cannot be told (it may set train mode: stay silent), None for any other helper."""
    mine = [s for s in own_switches(facts, func) if any(covers(s.receiver, n) for n in names)]
    trains = [s for s in mine if s.mode == "train"]
    evals = [s for s in mine if s.mode == "eval"]
    if not trains or not evals:
        return None
    places = [_branch_of(facts, s.call, func) for s in mine]
    if any(p is None for p in places) or len({id(p[0]) for p in places}) != 1:
        return None
    branch = places[0][0]
    by_branch = {where: {s.mode for s, (_, b) in zip(mine, places) if b == where} for where in ("body", "orelse")}
    if len(by_branch["body"]) != 1 or len(by_branch["orelse"]) != 1 or by_branch["body"] == by_branch["orelse"]:
        return None
    test, negated = branch.test, False
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        test, negated = test.operand, True
    if not isinstance(test, ast.Name):
        return "train"
    params = [a.arg for a in (*func.args.posonlyargs, *func.args.args)]
    if isinstance(call.func, ast.Attribute) and params[:1] in (["self"], ["cls"]):
        params = params[1:]
    value = None
    for index, arg in enumerate(call.args):
        if index < len(params) and params[index] == test.id:
            value = arg
    for kw in call.keywords:
        if kw.arg == test.id:
            value = kw.value
    if not isinstance(value, ast.Constant) or not isinstance(value.value, bool):
        return "train"
    taken = "body" if value.value != negated else "orelse"
    return next(iter(by_branch[taken]))


# -- module-mode state along control flow ----------------------------------------------------
#
# The mode of one module (the names in ``names``) at each point of a scope, as a set of what it
# can be on some path (gradfix/analysis/flow.py joins the paths):
ENTRY = "entry"  # what the scope was entered with: the caller's mode
TRAIN = "train"  # this scope's own `.train()`: chosen here
TRAINED = "trained"  # train mode nobody chose here: a module just built, a helper that trains it
EVAL = "eval"
UNSET = "unknown"  # `.train(flag)`, a submodule switched by hand: the author manages it
NOT_MODULE = "no module"  # a path where `isinstance(m, nn.Module)` failed: no mode at all

_KIND_MODES = {
    "train": frozenset({TRAIN}),
    "eval": frozenset({EVAL}),
    "evalcall": frozenset({EVAL}),
    "trained": frozenset({TRAINED}),
    "unknown": frozenset({UNSET}),
}


@dataclass(frozen=True)
class ModeItem:
    """Something in a scope that sets a module's mode: a switch (``train``/``eval``/``unknown``),
    a binding (``trained``/``eval``), or a call of a file function (``evalcall``, ``train``, or
    ``call`` whose ``modes`` is the callee's summary: what it leaves, ENTRY where it may leave the
    mode as it found it). ``order`` 0: a planned insertion, which runs before the statement."""

    node: ast.AST
    kind: str
    order: int = 1
    modes: frozenset = frozenset()

    @property
    def key(self) -> tuple[int, int, int]:
        return (*pos(self.node), self.order)

    def apply(self, state: frozenset) -> frozenset:
        modes = self.modes or _KIND_MODES[self.kind]
        return (state if ENTRY in modes else frozenset()) | (modes - {ENTRY})


def _switch_items(facts: FileFacts, scope, names: set[str], parts: bool = False) -> list[ModeItem]:
    """``scope``'s own switches of the module; with ``parts`` a submodule's switch too (UNSET)."""
    items = []
    for s in own_switches(facts, scope):
        if any(covers(s.receiver, n) for n in names):
            items.append(ModeItem(s.call, s.mode if parts else ("eval" if s.mode == "eval" else "train")))
        elif parts and any(related(s.receiver, n) for n in names):
            items.append(ModeItem(s.call, "unknown"))
    return items


def leaves(facts: FileFacts, func, names: set[str]) -> frozenset:
    """``func``'s summary for the module it knows as ``names``: the modes its own switches can
    leave it in when it returns (ENTRY: a path that leaves the caller's mode; a `.train(flag)`
    restore counts as that; its `.train()` is TRAINED for the caller)."""
    items = [ModeItem(s.call, s.mode) for s in own_switches(facts, func) if any(covers(s.receiver, n) for n in names)]
    if not items:
        return frozenset({ENTRY})
    flow = _flow(facts, func, items, ENTRY)
    renamed = {TRAIN: TRAINED, UNSET: ENTRY}
    # empty: it never returns (or only where the object is no module)
    return frozenset(renamed.get(m, m) for m in flow.exit - {NOT_MODULE}) or frozenset({ENTRY})


def _call_items(facts: FileFacts, scope, names: set[str], skip: set[int]) -> list[ModeItem]:
    """Calls in ``scope`` that set the module's mode: a file function given the module, by its
    summary (or by the literal argument that picks its mode, see :func:`_mode_by_argument`), or
    an evaluation helper defined elsewhere (`evaluate(model)`)."""
    items = []
    for call in own_calls(facts, scope):
        callee = callee_name(call)
        if id(call) in skip or callee is None:
            continue
        func = call.func
        if isinstance(func, ast.Attribute) and dotted_name(func.value) in names and func.attr in _mode_methods(facts):
            items.append(ModeItem(call, _mode_methods(facts)[func.attr]))
            continue
        found = callees(facts, call)
        defined = [f for f in found.defs if f is not scope]
        if defined:
            chosen = {m for f in defined if (m := _mode_by_argument(facts, f, call, passed_names(f, call, names)))}
            if chosen:
                items.append(ModeItem(call, "evalcall" if chosen == {"eval"} else "train"))
                continue
            summary = frozenset().union(*(leaves(facts, f, passed_names(f, call, names)) for f in defined))
            if summary == {EVAL}:
                items.append(ModeItem(call, "evalcall"))
            elif summary != {ENTRY}:
                items.append(ModeItem(call, "call", modes=summary))
        elif EVALISH.search(callee) and not found.defs:
            passed = {dotted_name(a) for a in [*call.args, *(k.value for k in call.keywords)]} - {None}
            if any(related(p, n) for p in passed for n in names):
                items.append(ModeItem(call, "evalcall"))
    return items


def _mode_methods(facts: FileFacts) -> dict[str, str]:
    """Methods of the file's classes that switch their own object or its parts (a
    ``train_custom()`` that puts only the head in train mode), by name -> the item kind a call of
    one is: ``train`` or ``evalcall`` when every switch of every such method goes that way,
    else ``unknown`` (the author's own mode management). ``train``/``eval`` themselves are
    switches, not methods."""

    def compute():
        kinds: dict[str, set[str]] = {}
        for s in switches(facts):
            func = facts.function_of.get(s.call)
            if not (s.receiver == "self" or s.receiver.startswith("self.")) or isinstance(func, ast.Lambda) or func is None:
                continue
            if func.name not in ("train", "eval") and isinstance(facts.parents.get(func), ast.ClassDef):
                kinds.setdefault(func.name, set()).add(s.mode)
        return {name: ("train" if modes == {"train"} else "evalcall" if modes == {"eval"} else "unknown") for name, modes in kinds.items()}

    return facts.memo(("module_mode.mode_methods",), compute)


def mode_items(facts: FileFacts, scope, names: set[str]) -> list[ModeItem]:
    """What sets the mode of the module called ``names`` in ``scope``, in source order: its
    switches and the calls of helpers that switch it."""
    key = ("module_mode.mode_items", id(scope), frozenset(names))
    return facts.memo(key, lambda: _mode_items(facts, scope, names))


def _mode_items(facts: FileFacts, scope, names: set[str]) -> list[ModeItem]:
    items = _switch_items(facts, scope, names)
    items += _call_items(facts, scope, names, {id(i.node) for i in items})
    return sorted(items, key=lambda i: i.key)


def evaluation_items(facts: FileFacts, scope, names: set[str]) -> list[ModeItem]:
    """:func:`mode_items` as an evaluation sees them: a submodule switched by hand is managed
    (UNSET), and rebinding the name sets its mode (`model = Net().eval()`: eval; `model =
    Net()`: a new module, TRAINED; `model = model.cuda()` / `DataParallel(model)`: the same)."""
    key = ("module_mode.evaluation_items", id(scope), frozenset(names))
    return facts.memo(key, lambda: _evaluation_items(facts, scope, names))


def _evaluation_items(facts: FileFacts, scope, names: set[str]) -> list[ModeItem]:
    items = _switch_items(facts, scope, names, parts=True)
    items += _call_items(facts, scope, names, {id(i.node) for i in items})
    items += _aliasing_switches(facts, scope, names, {id(i.node) for i in items})
    items += [ModeItem(stmt, "unknown") for stmt, r in flag_writes(facts, scope) if any(related(r, n) for n in names)]
    roots = {n.split(".", 1)[0] for n in names}
    for stmt in facts.statements(scope):
        if facts.function_of.get(stmt) is not scope:
            continue
        if isinstance(stmt, (ast.For, ast.AsyncFor, ast.With, ast.AsyncWith)):
            targets = [stmt.target] if isinstance(stmt, (ast.For, ast.AsyncFor)) else [i.optional_vars for i in stmt.items]
            if any(isinstance(n, ast.Name) and n.id in roots for t in targets if t is not None for n in ast.walk(t)):
                # `for model in models:`: another module each time, of unknown mode unless every
                # one is new (`models = [Net() for _ in range(5)]`)
                items.append(ModeItem(stmt, _element_mode(facts, scope, stmt)))
            continue
        if isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            stmt_targets = [stmt.target]
        elif isinstance(stmt, ast.Assign):
            stmt_targets = stmt.targets
        else:
            continue
        for target in stmt_targets:
            pairs = [(target, stmt.value)]
            if isinstance(target, (ast.Tuple, ast.List)) and isinstance(stmt.value, (ast.Tuple, ast.List)):
                if len(target.elts) == len(stmt.value.elts):
                    pairs = list(zip(target.elts, stmt.value.elts))
            for t, v in pairs:
                if isinstance(t, ast.Name) and t.id in roots:
                    item = _binding_item(facts, scope, t.id, v, stmt)
                    if item is not None:
                        items.append(item)
    return sorted(items, key=lambda i: i.key)


def _aliasing_switches(facts: FileFacts, scope, names: set[str], skip: set[int]) -> list[ModeItem]:
    """Switches of a parameter of ``scope`` that no call in the file hands an argument, where
    the module is a global: the argument may be that very module (`def predict(m, part):
    m.eval(); return model(x)`, never called in the file), so its mode after the switch is
    unknown."""
    if not isinstance(scope, FUNCTIONS) or outside_callers(facts, scope):
        return []
    params = parameter_names(scope, star=False) - {"self", "cls"}
    if {n.split(".", 1)[0] for n in names} & (params | {"self", "cls"}):
        return []
    return [ModeItem(s.call, "unknown") for s in own_switches(facts, scope) if id(s.call) not in skip and s.receiver in params]


def _element_mode(facts: FileFacts, scope, loop: ast.stmt) -> str:
    """The mode of each module a `for` loop binds its target to: "trained" ("eval") when the
    loop runs over new modules each in that mode, which nothing can have switched since they
    were built; else "unknown"."""
    if not (isinstance(loop, ast.For) and isinstance(loop.target, ast.Name)):
        return "unknown"
    elements = _new_elements(facts, scope, loop)
    modes = {binding_mode(facts, scope, loop.target.id, e, loop) for e in elements or ()}
    return modes.pop() if len(modes) == 1 and modes <= {"trained", "eval"} else "unknown"


def _new_elements(facts: FileFacts, scope, loop: ast.For) -> list[ast.Call] | None:
    """The calls that build the elements ``loop`` iterates over, each a new object: a list or
    tuple of calls written in the loop header, or a local list that every assignment reaching
    the loop binds to one (`[Net() for _ in range(5)]`, `[A(), B()]`, `[]` then
    `models.append(Net())`), with no other use of its name between that assignment and the
    end of the loop and none in any other function. None otherwise (`[net] * 3` holds one
    module three times; `models[0].eval()` may switch one)."""
    if isinstance(loop.iter, (ast.List, ast.Tuple)):
        return list(loop.iter.elts) if all(isinstance(e, ast.Call) for e in loop.iter.elts) else None
    if not isinstance(loop.iter, ast.Name):
        return None
    name = loop.iter.id
    reaching = _reaching_assignments(facts, name, loop.iter)
    if not reaching:
        return None
    elements: list[ast.Call] = []
    for stmt in reaching:
        if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
            return None
        value = stmt.value
        if isinstance(value, (ast.List, ast.Tuple)) and all(isinstance(e, ast.Call) for e in value.elts):
            elements += value.elts
        elif isinstance(value, ast.ListComp) and isinstance(value.elt, ast.Call):
            elements.append(value.elt)
        else:
            return None
        if not all(is_descendant(facts, stmt, outer) for outer in own_loops_around(facts, loop, scope)):
            return None  # a loop around this one runs it again over modules the last round used
    first = min(map(pos, reaching))
    uses = facts.memo(("module_mode.name_uses", name), lambda: [n for n in ast.walk(facts.tree) if isinstance(n, ast.Name) and n.id == name])
    for use in uses:
        if use is loop.iter or any(is_descendant(facts, use, r) for r in reaching):
            continue
        if facts.function_of.get(use) is not scope:
            return None  # another function may switch them when it runs
        if first < pos(use) <= (loop.end_lineno, loop.end_col_offset):
            append = facts.parents.get(use)
            call = facts.parents.get(append)
            if not (isinstance(append, ast.Attribute) and append.attr == "append" and isinstance(call, ast.Call)
                    and call.func is append and len(call.args) == 1 and isinstance(call.args[0], ast.Call)
                    and isinstance(facts.parents.get(call), ast.Expr)):
                return None
            elements.append(call.args[0])
    return elements


def _binding_item(facts: FileFacts, scope, name: str, value: ast.AST, stmt: ast.stmt) -> ModeItem | None:
    """What binding ``name = value`` does to its mode (:func:`binding_mode`); a value of
    unknown mode that the file trains (evidence about that very object) is in train mode."""
    mode = binding_mode(facts, scope, name, value, stmt)
    if mode is None:
        return None
    if isinstance(mode, frozenset):
        return ModeItem(stmt, "call", modes=mode)
    if mode == "unknown" and evidence_for(facts, name, stmt):
        mode = "trained"
    return ModeItem(stmt, mode)


def binding_mode(facts: FileFacts, scope, name: str, value: ast.AST, stmt: ast.AST):
    """The mode of the module that ``name = value`` binds, at ``stmt`` in ``scope``: "eval",
    "trained", "unknown", the modes of the module it copies (a frozenset), or None when it is
    the module the name already holds (`m = m.cuda()`, `m = DDP(m)`).

    A fresh nn.Module (a torch.nn layer, a project class deriving from nn.Module, a torchvision
    or timm constructor) is in train mode; `….eval()` / `.train(False)` chained gives eval,
    `.train()` chained train; `X.from_pretrained(...)` gives eval: transformers'
    `PreTrainedModel.from_pretrained` ends with `model.eval()  # Set model in evaluation mode
    to deactivate Dropout modules by default` (src/transformers/modeling_utils.py), and
    diffusers' `ModelMixin.from_pretrained` and peft's `PeftModel.from_pretrained` (unless
    `is_trainable`) do the same. `copy.deepcopy(m)` copies the `training` flags: m's mode there
    (the caller's mode of a parameter is unknown here). A file helper whose every `return`
    gives an eval-mode (train-mode) module gives eval (train). Anything else is unknown."""
    if _eval_chain(value):
        return "eval"
    chained = _train_chain(value)
    if chained is not False:
        return "trained" if chained else "unknown"  # `.train(flag)`: whatever the flag says
    base = strip_moves(value)
    if isinstance(base, ast.Call):
        if not _new_module(name, value):
            return None
        if facts.call_qualname(base) in ("copy.deepcopy", "copy.copy") and base.args:
            return _source_modes(facts, scope, base.args[0], stmt)
        if isinstance(base.func, ast.Attribute) and base.func.attr == "from_pretrained":
            return "eval"
        helpers = [f for f in callees(facts, base).defs if f is not scope]
        if helpers:
            modes = {returned_mode(facts, f) for f in helpers}
            return modes.pop() if len(modes) == 1 else "unknown"
        return "trained" if _fresh_module_call(facts, base) else "unknown"
    source = dotted_name(base)
    if source is not None:
        return None if source == name else _source_modes(facts, scope, base, stmt)
    return "unknown"


def _train_chain(value: ast.AST) -> bool | None:
    """``Net(...).train()``, ``make().train(True).to(device)``: a chain that ends in train mode
    (True); ``.train(flag)`` last: None (unknown); anything else False."""
    while isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute):
        attr, args = value.func.attr, [*value.args, *(k.value for k in value.keywords)]
        if attr == "eval":
            return False
        if attr == "train":
            if not args:
                return True
            flag = literal_bool(args[0]) if len(args) == 1 else False
            return None if flag is None else flag
        value = value.func.value
    return False


def _fresh_module_call(facts: FileFacts, call: ast.Call) -> bool:
    """``call`` builds a new nn.Module: a torch.nn class, a project class deriving from
    nn.Module (through the project index), a torchvision / timm model constructor."""
    sens = sensitivity_of(facts)
    qual = qualify(sens.trees[sens.module][1], call.func)
    if qual is None:
        return False
    if qual.startswith("torchvision.models.") or qual == "timm.create_model":
        return True
    return sens.is_module_class(qual) is True


def _guarded(facts: FileFacts, key, compute, default):
    """``compute()``, or ``default`` when it is already being computed (a cycle through
    copies or helpers: `a = deepcopy(b)` … `b = deepcopy(a)`)."""
    busy = facts.memo(("module_mode.busy",), set)
    if key in busy:
        return default
    busy.add(key)
    try:
        return compute()
    finally:
        busy.discard(key)


def _source_modes(facts: FileFacts, scope, source: ast.AST, stmt: ast.AST):
    """The modes the module ``source`` can be in at ``stmt`` (a copy or alias of it gets them);
    the caller's mode (ENTRY) of another name is unknown here."""
    name = dotted_name(strip_moves(source))
    if name is None:
        return "unknown"
    key = ("module_mode.source", id(scope), name, id(stmt))
    modes = _guarded(facts, key, lambda: modes_at(facts, scope, stmt, evaluation_items(facts, scope, {name})), None)
    if not modes:
        return "unknown"
    return frozenset(UNSET if m == ENTRY else m for m in modes)


def returned_mode(facts: FileFacts, func) -> str:
    """``func``'s summary for the module it returns: "eval" when every `return` gives an
    eval-mode module (`return Net(cfg).eval()`, or `m.eval(); return m`), "trained" when every
    one gives a train-mode one, else "unknown"."""
    key = ("module_mode.returned_mode", id(func))
    return facts.memo(key, lambda: _guarded(facts, key, lambda: _returned_mode(facts, func), "unknown"))


def _returned_mode(facts: FileFacts, func) -> str:
    returns = [n for n in ast.walk(func) if isinstance(n, ast.Return) and facts.function_of.get(n) is func]
    if not returns or any(r.value is None for r in returns):
        return "unknown"
    modes: set[str] = set()
    for ret in returns:
        mode = binding_mode(facts, func, "", ret.value, ret)
        if isinstance(mode, str) or mode is None:
            modes |= {{"eval": EVAL, "trained": TRAINED}.get(mode, UNSET)}
        else:
            modes |= mode
    if modes == {EVAL}:
        return "eval"
    return "trained" if modes <= {TRAIN, TRAINED} else "unknown"


def flag_writes(facts: FileFacts, scope) -> list[tuple[ast.stmt, str]]:
    """``scope``'s own writes of a `training` flag, with the module they set: `m.training =
    False` sets ``m``'s own flag (not its children's), `for layer in model.layers:
    layer.training = False` sets parts of ``model``. Either way the author manages the mode by
    hand: the module's mode is unknown afterwards, never plain train mode."""

    def compute():
        out = []
        for stmt in facts.statements(scope):
            if facts.function_of.get(stmt) is not scope or not isinstance(stmt, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
                continue
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            for target in targets:
                if not (isinstance(target, ast.Attribute) and target.attr == "training"):
                    continue
                receiver = dotted_name(target.value)
                loop = facts.parents.get(stmt)
                while receiver is not None and loop is not None and loop is not scope:
                    if isinstance(loop, (ast.For, ast.AsyncFor)) and receiver.split(".", 1)[0] in bound_names(loop.target):
                        source = loop.iter.func.value if isinstance(loop.iter, ast.Call) and isinstance(loop.iter.func, ast.Attribute) else loop.iter
                        receiver = dotted_name(source)  # `model.layers`, `model.modules()` -> model
                        break
                    loop = facts.parents.get(loop)
                if receiver is not None:
                    out.append((stmt, receiver))
        return out

    return facts.memo(("module_mode.flag_writes", id(scope)), compute)


def evaluated_at(facts: FileFacts, scope, module: str, node: ast.AST) -> bool:
    """Some path reaches ``node`` with ``module`` in the eval mode ``scope`` put it in (GF302's
    question: the forward is an evaluation there). A `.train()` or a new module bound on every
    path since, or an `.eval()` on a path that returned, does not count."""
    return EVAL in modes_at(facts, scope, node, evaluation_items(facts, scope, {module}))


def _new_module(name: str, value: ast.AST) -> bool:
    """``value`` builds another module than ``name`` holds: a call that is neither a method of
    ``name`` (`model.cuda()`) nor handed ``name`` (`DataParallel(model)`, `torch.jit.script(model)`)."""
    base = strip_moves(value)
    if not isinstance(base, ast.Call):
        return False
    root = base.func
    while isinstance(root, (ast.Attribute, ast.Call, ast.Subscript)):
        root = root.func if isinstance(root, ast.Call) else root.value
    if isinstance(root, ast.Name) and root.id == name:
        return False
    return not any(isinstance(n, ast.Name) and n.id == name for a in (*base.args, *(k.value for k in base.keywords)) for n in ast.walk(a))


def _flow(facts: FileFacts, scope, items: list[ModeItem], entry: str) -> ForwardFlow:
    key = ("module_mode.flow", id(scope), tuple((id(i.node), i.kind, i.order, i.modes) for i in items), entry)
    return facts.memo(key, lambda: _run_flow(facts, scope, items, entry))


def _run_flow(facts: FileFacts, scope, items: list[ModeItem], entry: str) -> ForwardFlow:
    by_stmt: dict[int, list[ModeItem]] = {}
    before: dict[int, frozenset] = {}
    for item in sorted(items, key=lambda i: i.key):
        if item.order == 0:
            before[id(item.node)] = item.apply(frozenset({entry}))
        else:
            by_stmt.setdefault(id(innermost_statement(facts.parents, item.node)), []).append(item)

    def effect(stmt: ast.stmt, state: frozenset) -> frozenset:
        for item in by_stmt.get(id(stmt), ()):
            state = item.apply(state)
        return state

    def iteration(loop: ast.stmt, state: frozenset) -> frozenset:
        # each iteration of `for model in models:` binds another module; the iterable's own
        # calls ran once, before the first
        for item in by_stmt.get(id(loop), ()):
            if item.node is loop or isinstance(loop, ast.While):
                state = item.apply(state)
        return state

    body = facts.tree.body if scope is None else getattr(scope, "body", [])
    if not isinstance(body, list):
        body = []  # a lambda
    # `if isinstance(net, nn.Module): net.eval()`: where the test fails, `net` is no module, and
    # has no mode to be in (the tests are found first: the flow keeps its refine, not the facts)
    switched = {dotted_name(i.node.func.value) for i in items if isinstance(i.node, ast.Call) and switch_of(i.node) is not None} - {None}
    guards = {id(c) for c in _module_tests(facts, scope) if dotted_name(c.args[0]) in switched}
    refine = InstanceTests(lambda test: id(test) in guards, lambda state: state, lambda state: frozenset({NOT_MODULE})) if guards else None
    # `if i == len(steps) - 1: model.eval(); validate(model)` ends the epoch: no step follows
    last = facts.memo(("module_mode.last_iteration", id(scope)), lambda: last_iteration_ifs(body))
    return ForwardFlow(body, frozenset({entry}), effect, before, refine=refine, last_iteration=last, iteration=iteration)


def _module_tests(facts: FileFacts, scope) -> list[ast.Call]:
    """``scope``'s own `isinstance(x, nn.Module)` calls (or with a tuple holding nn.Module)."""

    def compute():
        found = []
        for call in facts.calls_in(scope):
            if isinstance(call.func, ast.Name) and call.func.id == "isinstance" and len(call.args) == 2:
                kinds = call.args[1].elts if isinstance(call.args[1], ast.Tuple) else [call.args[1]]
                if any(facts.qualname(k) in _MODULE_CLASS for k in kinds):
                    found.append(call)
        return found

    return facts.memo(("module_mode.module_tests", id(scope)), compute)


def modes_at(facts: FileFacts, scope, point: ast.AST, items: list[ModeItem], entry: str = ENTRY) -> frozenset:
    """The modes the module can be in when ``point`` runs, on the paths of ``scope``'s control
    flow that reach it (a loop's later iterations start from what its body's end leaves), with
    ``items`` as what sets it and ``entry`` as the mode on entry. Empty: no path reaches it."""
    flow = _flow(facts, scope, items, entry)
    stmt = innermost_statement(facts.parents, point)
    if stmt is None or id(stmt) not in flow.at:
        return frozenset({entry})
    state = flow.at[id(stmt)] - {NOT_MODULE}  # a path where it is no module asks nothing of its mode
    if stmt is point:
        return state
    for item in items:  # what the same statement does before ``point``
        if item.order and innermost_statement(facts.parents, item.node) is stmt and _runs_before(facts, item.node, point):
            state = item.apply(state)
    return state


def _runs_before(facts: FileFacts, node: ast.AST, point: ast.AST) -> bool:
    """Within one statement, ``node`` runs before ``point``: it is part of it (the callee or an
    argument of a call: ``m.eval()(x)`` switches ``m`` before the forward), or it comes first
    in source order and does not hold ``point`` (``helper(m(x))`` runs after ``m(x)``)."""
    if is_descendant(facts, node, point):
        return node is not point
    return pos(node) < pos(point) and not is_descendant(facts, point, node)


_TRAINISH = frozenset({TRAIN, TRAINED, UNSET})


def train_at(facts, scope, point: ast.AST, items: list[ModeItem], entry_train: bool) -> bool:
    """Whether the module is in train mode at ``point`` on every path (see :func:`modes_at`);
    ``entry_train``: the scope is entered in train mode (module-level code, a fresh module)."""
    return modes_at(facts, scope, point, items) <= (_TRAINISH | {ENTRY} if entry_train else _TRAINISH)


def all_train_at(facts, scope, uses, items, entry_train) -> bool:
    return all(train_at(facts, scope, u, items, entry_train) for u in uses)


# -- GF104's questions: is this an evaluation, and who sets the mode? ------------------------


def not_an_evaluation(facts: FileFacts, func, call: ast.Call, module: str) -> bool:
    """Running ``module`` under no_grad here is not an evaluation whose mode this function
    owns: batch-norm recalibration, RL acting, a result that feeds training (in a caller, or
    later in this function), autoregressive sampling, a discarded warm-up forward, a submodule
    of an nn.Module."""
    from gradfix.analysis.vocabulary import acts_in_environment, caller_owns_mode

    return (
        caller_owns_mode(facts, func)
        or bool(RECALIBRATION.search(func.name))
        or acts_in_environment(facts, func)
        or _feeds_training(facts, func)
        or _result_trains(facts, call)
        or _decoding_loop(facts, func, call)
        or _output_discarded(facts, call)
        or _submodule_of_module(facts, func, module)
    )


def sampled_in_train_mode_by_convention(facts: FileFacts, module: str) -> bool:
    """``module`` is named as a GAN generator (`G`, `netG`, `generator`, `g_ema`) and the file
    never switches it to eval mode: sampling in train mode may be the author's intent (batch
    statistics, dropout as noise), so a finding about it cannot say which mode is right."""
    if not GENERATOR.match(module.rsplit(".", 1)[-1]):
        return False
    return not any(s.mode == "eval" and related(s.receiver, module) for s in switches(facts))


def train_mode_reaches(facts: FileFacts, func, names: tuple[str, ...], node: ast.AST) -> bool:
    """On some path to ``node`` the module is in the train mode the file trains it in and
    nobody here chose: a module built here or left in train mode by a helper (TRAINED), or the
    caller's mode (ENTRY) unless an enclosing function or a caller sets it first. Never for a
    class with its own `train()`/`eval()` for the module: its users set the mode through them."""
    if mode_api(facts, func, names):
        return False
    modes = modes_at(facts, func, node, evaluation_items(facts, func, set(names)))
    if fresh_local(facts, names[0], node) is func:
        modes -= {ENTRY}  # its own object: only its binding and what follows set the mode
    if TRAINED in modes:
        return True
    return ENTRY in modes and not (_managed_by_enclosing(facts, func, names) or _managed_by_caller(facts, func, names))


def switched_back_after(facts: FileFacts, func, modules: list[str], target: ast.stmt, calls: list[ast.Call]) -> ast.AST | None:
    """What would undo an `.eval()` inserted before ``target``: the first thing inside
    ``target`` (a `.train()`, a helper leaving the module in train mode: `perturb(net=model)`
    ending in `net.train()`) after which one of ``calls`` still runs a module of ``modules``
    in train mode. None when the inserted switch holds for every call."""
    for module in modules:
        items = evaluation_items(facts, func, {module})
        planned = sorted([*items, ModeItem(target, "eval", 0)], key=lambda i: i.key)
        mine = [c for c in calls if (t := forward_target(facts, c)) is not None and related(t, module)]
        if not any(modes_at(facts, func, c, planned) & {TRAIN, TRAINED} for c in mine):
            continue
        inside = [i.node for i in items if is_descendant(facts, i.node, target) and i.apply(frozenset({EVAL})) & {TRAIN, TRAINED}]
        return min(inside, key=pos, default=target)
    return None


def leaking_evals(facts: FileFacts) -> dict[str, list[ast.AST]]:
    """Module name -> the real ``.eval()`` calls (``.train(False)``...) of the file whose mode
    can outlive their scope: on some path from the switch to the scope's end (a `return`
    included) no switch back of that module (or a related one) runs; and the calls that hand a
    module to a def of the file leaving that parameter in eval mode (`acc_check(resnet50, ..)`,
    whose `net.eval()` is not undone), under the name the caller passes."""

    def compute():
        out: dict[str, list[ast.AST]] = {}
        for scope in [None, *facts.functions]:
            if isinstance(scope, ast.Lambda):
                continue
            mine = own_switches(facts, scope)
            for receiver in dict.fromkeys(s.receiver for s in mine if s.mode == "eval"):
                out.setdefault(receiver, []).extend(_evals_reaching_exit(facts, scope, receiver, mine))
        leaked = {m for m, calls in out.items() if calls}
        # the defs whose own parameter an `.eval()` leaves switched, by name: only their calls count
        helpers = {f.name for f in facts.functions if isinstance(f, FUNCTIONS) and leaked & set(parameter_names(f, star=False))}
        for call in facts.calls if helpers else ():
            if callee_name(call) not in helpers:
                continue
            for func in callees(facts, call).defs:
                params = set(parameter_names(func, star=False)) & leaked
                for arg in (*call.args, *(k.value for k in call.keywords)):
                    passed = dotted_name(arg)
                    if passed is None or passed in params:
                        continue  # the same name: its own switches already count
                    if EVAL in leaves(facts, func, passed_names(func, call, (passed,)) & params):
                        out.setdefault(passed, []).append(call)
        return {m: calls for m, calls in out.items() if calls}

    return facts.memo(("module_mode.leaking_evals",), compute)


def _evals_reaching_exit(facts: FileFacts, scope, receiver: str, mine: list[Switch]) -> list[ast.Call]:
    """The `receiver.eval()` calls of ``scope`` that some path carries to its exit: the flow's
    state is the last such call on the path, or "restored" after a switch back. None when the
    scope saves the caller's mode and gives it back (`was = m.training; m.eval(); ...;
    m.train(was)` or `if was: m.train()`): where `was` is False, `m` was in eval mode already."""
    if _restores_saved_mode(facts, scope, receiver):
        return []
    by_stmt: dict[int, list[Switch]] = {}
    for s in sorted(mine, key=lambda s: pos(s.call)):
        if (s.mode == "eval" and s.receiver == receiver) or (s.mode != "eval" and related(s.receiver, receiver)):
            by_stmt.setdefault(id(innermost_statement(facts.parents, s.call)), []).append(s)

    def effect(stmt: ast.stmt, state: frozenset) -> frozenset:
        for s in by_stmt.get(id(stmt), ()):
            state = frozenset({s.call if s.mode == "eval" else "restored"})
        return state

    body = facts.tree.body if scope is None else scope.body
    flow = ForwardFlow(body, frozenset({"entry"}), effect)
    return sorted((c for c in flow.exit if isinstance(c, ast.Call)), key=pos)


def _restores_saved_mode(facts: FileFacts, scope, receiver: str) -> bool:
    """``scope`` binds a name to ``receiver.training`` and switches ``receiver`` back with it:
    ``receiver.train(name)``, or ``receiver.train()`` under ``if name:``."""
    return bool(_restoring_calls(facts, scope, receiver))


def _restoring_calls(facts: FileFacts, scope, receiver: str) -> list[ast.Call]:
    """The ``receiver.train(..)`` calls of ``scope`` that give back a mode it saved (see
    :func:`_restores_saved_mode`): they return the caller's mode, they train nothing."""
    saved = set()
    for stmt in facts.statements(scope):
        if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Attribute) and stmt.value.attr == "training":
            if dotted_name(stmt.value.value) == receiver:
                saved |= {t.id for t in stmt.targets if isinstance(t, ast.Name)}
    if not saved:
        return []
    found = []
    for call in own_calls(facts, scope):
        func = call.func
        if not (isinstance(func, ast.Attribute) and func.attr == "train" and dotted_name(func.value) == receiver):
            continue
        if call.args and isinstance(call.args[0], ast.Name) and call.args[0].id in saved:
            found.append(call)
            continue
        parent = facts.parents.get(call)
        while parent is not None and parent is not scope:
            if isinstance(parent, ast.If) and isinstance(parent.test, ast.Name) and parent.test.id in saved:
                found.append(call)
                break
            parent = facts.parents.get(parent)
    return found


# -- what kind of module -----------------------------------------------------------------------


def sensitivity_of(facts: FileFacts) -> Sensitivity:
    """The file's :class:`~gradfix.analysis.project.Sensitivity` (with the run's project index)."""

    def compute():
        module = ""
        index = facts.project
        if index is not None:
            here = os.path.abspath(facts.path)
            module = next((m for m, e in index.modules.items() if e.path == here), "")
        return Sensitivity(index, facts.tree, module)

    return facts.memo(("module_mode.sensitivity",), compute)


def module_sensitivity(facts: FileFacts, module: str, at: ast.AST, attr: str | None = None) -> str:
    """``sensitive``/``free``/``unknown`` for the module expression ``module`` (a dotted name)
    at ``at``, from the bindings of that name that ``at`` can see: ``model = Net()`` with
    ``Net`` defined here or anywhere in the project, ``nn.Sequential(...)``, a model-zoo
    factory, a wrapper of another module (``DataParallel(net)``, ``accelerator.prepare(...)``,
    ``privacy_engine.make_private(module=net, ...)``, a file function that hands back the module
    it is given: ``def wrap(m): return DataParallel(m)``), and for a parameter the arguments the
    calls that may run the function pass (a call whose argument nothing binds raises NameError
    and passes nothing). A name with no visible binding is unknown. Read in the scope that binds
    it, a name is what the assignments reaching that read bound (`model = Net()` in one notebook
    cell, `model = NetDropout()` in a later one). With ``attr``, the verdict for calling
    ``module.attr(...)``: a method of the module's project class is judged by what it runs
    (`model.inference(x)` that reads no mode and runs mode-free layers is free, whatever the
    forward does)."""
    reaching = _reaching_bindings(facts, module, at)
    key = ("module_mode.module_sensitivity", module, _class_key(facts, module, at), reaching, attr)
    return facts.memo(key, lambda: _sensitivity(facts, module, at, 0, frozenset(), attr))


def _reaching_bindings(facts: FileFacts, module: str, at: ast.AST) -> frozenset[ast.stmt] | None:
    """The assignments of the plain name ``module`` that reach its read in ``at`` (through
    rebindings to itself: `net = torch.compile(net)` holds what reached its own read), when
    ``at`` is in the scope that binds it and every reaching binding is an assignment, or, for a
    global read in a function, the module's bindings a call of a def may see
    (:func:`~gradfix.analysis.provenance.module_definitions`); None otherwise (a parameter, a
    loop target, a global some function rebinds: any binding may hold)."""
    if "." in module or module in ("self", "cls"):
        return None
    return facts.memo(("module_mode.reaching_bindings", module, id(at)), lambda: _reaching_assignments(facts, module, at))


def _reaching_assignments(facts: FileFacts, module: str, at: ast.AST) -> frozenset[ast.stmt] | None:
    scope = _binding_scope(facts, module, at)
    first = None
    if facts.function_of.get(at) is not scope:
        # a global read in a def: the module's bindings that a call of a def may see
        first = module_definitions(facts, module, facts.function_of.get(at)) if scope is None else None
        if first is None:
            return None
    reaching = reaching_definitions(facts, scope).reaching
    found, todo, seen = set(), [at], set()
    while todo:
        node = todo.pop()
        if first is not None:
            definitions, first = first, None
        else:
            read = _first_read(node, module)
            definitions = reaching.get(read) if read is not None else None
        if not definitions or any(d.kind != "assign" for d in definitions):
            return None
        for d in definitions:
            stmt = innermost_statement(facts.parents, d.node)
            if stmt not in seen:
                seen.add(stmt)
                if _rebinds_itself(facts, d.value, module):
                    todo.append(d.value)
                else:
                    found.add(stmt)
    return frozenset(found)


def _sensitivity(facts: FileFacts, module: str, at: ast.AST, depth: int, busy: frozenset, attr: str | None = None) -> str:
    """``busy``: bindings being judged (``model = DDP(model)`` reads the earlier binding)."""
    if depth > 4:
        return UNKNOWN
    sens = sensitivity_of(facts)
    names = sens.trees[sens.module][1]
    scope = _binding_scope(facts, module, at)
    reaching = _reaching_bindings(facts, module, at)
    verdicts = []
    for node in facts.assignments_to(module):
        if node in busy or (scope is not _ANY and facts.function_of.get(node) is not scope):
            continue  # another function's local of the same name is another object
        if reaching is not None and node not in reaching:
            continue  # a binding this read cannot see
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        for target in targets:
            if dotted_name(target) == module:
                if _rebinds_itself(facts, value, module):
                    continue  # `m = torch.compile(m)`, `m = m.cuda()`: the kinds of the other bindings
                verdicts.append(_value_verdict(facts, sens, names, value, None, node, depth, busy, attr))
            elif isinstance(target, (ast.Tuple, ast.List)):
                for index, element in enumerate(target.elts):
                    if dotted_name(element) != module:
                        continue
                    if isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts):
                        verdicts.append(_value_verdict(facts, sens, names, value.elts[index], None, node, depth, busy, attr))
                    else:
                        verdicts.append(_value_verdict(facts, sens, names, value, index, node, depth, busy, attr))
    if isinstance(scope, FUNCTIONS) and module in parameter_names(scope, star=False):
        for call in outside_callers(facts, scope):
            arg = argument_for(scope, call, module)
            if isinstance(arg, ast.Name) and unbound(facts, arg):
                continue  # `f(model)` where nothing binds `model`: NameError, it runs nothing
            name = dotted_name(arg) if arg is not None else None
            verdicts.append(_sensitivity(facts, name, call, depth + 1, busy, attr) if name else UNKNOWN)
    return combine(verdicts) if verdicts else UNKNOWN


# Calls that hand back the module they are given, wrapped (same layers, same modes).
_WRAPPER_METHODS = frozenset({"prepare", "prepare_model", "make_private", "make_private_with_epsilon", "initialize"})
_WRAPPER_CALLS = frozenset(
    {"torch.nn.DataParallel", "torch.nn.parallel.DistributedDataParallel", "torch.nn.parallel.DataParallel", "torch.compile"}
)


def _wrapped(facts: FileFacts, base: ast.AST, index: int | None) -> tuple[bool, ast.expr | None]:
    """(whether ``base`` is a wrapper call, the module it wraps when it is one). A call of a file
    function that hands back its parameter on every return, wrapped or not (``def wrap_dp(m):
    return DataParallel(m)``), wraps the argument it is given for that parameter."""
    if not isinstance(base, ast.Call):
        return False, None
    func = base.func
    helper = callee(facts, base)
    if helper is not None and index is None:
        param = _passed_through(facts, helper)
        if param is not None:
            return True, argument_for(helper, base, param)
    if not (facts.call_qualname(base) in _WRAPPER_CALLS or (isinstance(func, ast.Attribute) and func.attr in _WRAPPER_METHODS)):
        return False, None
    i = index or 0
    wrapped = next((k.value for k in base.keywords if k.arg in ("module", "model")), None) if i == 0 else None
    if wrapped is None and i < len(base.args):
        wrapped = base.args[i]
    return True, wrapped


def _passed_through(facts: FileFacts, func) -> str | None:
    """The parameter ``func`` returns on every path, as it is or wrapped (a wrapper call of
    it, or a local that only ever holds it so: ``m = DDP(m, ...); return m``); None otherwise."""

    busy = facts.memo(("module_mode.passed_through.busy",), set)

    def compute():
        if func in busy:
            return None  # helpers returning each other's calls
        busy.add(func)
        try:
            return _passed_through_param(facts, func)
        finally:
            busy.discard(func)

    return facts.memo(("module_mode.passed_through", id(func)), compute)


def _passed_through_param(facts: FileFacts, func) -> str | None:
    """:func:`_passed_through` itself."""
    params = parameter_names(func, star=False)
    returns = [n for n in ast.walk(func) if isinstance(n, ast.Return) and facts.function_of.get(n) is func]
    if not returns or any(r.value is None for r in returns) or _yields(facts, func):
        return None
    found = set()
    for r in returns:
        value = strip_moves(r.value)
        wrapper, wrapped = _wrapped(facts, value, None)
        name = dotted_name(wrapped if wrapper else value)
        if name not in params:
            return None
        found.add(name)
    if len(found) != 1:
        return None
    param = found.pop()
    for node in ast.walk(func):  # every rebinding of it keeps the same module
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and facts.function_of.get(node) is func:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(param in bound_names(t) for t in targets):
                if node.value is None or not _rebinds_itself(facts, node.value, param):
                    return None
        elif isinstance(node, (ast.AugAssign, ast.For, ast.AsyncFor, ast.With, ast.AsyncWith, ast.NamedExpr)):
            if facts.function_of.get(node) is func and any(
                isinstance(n, ast.Name) and n.id == param and not isinstance(n.ctx, ast.Load) for n in ast.walk(node)
                if not isinstance(n, ast.stmt) or n is node
            ):
                return None
    return param


def _yields(facts: FileFacts, func) -> bool:
    return any(isinstance(n, (ast.Yield, ast.YieldFrom)) and facts.function_of.get(n) is func for n in ast.walk(func))


def _rebinds_itself(facts: FileFacts, value: ast.AST, module: str) -> bool:
    """``module = <the same module>``: an alias (``m = m.cuda()``) or a wrapper of it
    (``m = torch.compile(m)``). Such a binding holds one of the modules the name's other bindings
    hold, so it adds no kind of its own; reading it as another binding of the name (flow-insensitive)
    would recurse through every other self-rebinding of the name."""
    base = strip_moves(value)
    if dotted_name(base) == module:
        return True
    is_wrapper, wrapped = _wrapped(facts, base, None)
    return is_wrapper and wrapped is not None and dotted_name(wrapped) == module


def _value_verdict(facts, sens: Sensitivity, names, value: ast.AST, index: int | None, node, depth: int, busy: frozenset, attr=None) -> str:
    """The verdict for binding ``value`` (element ``index`` of it when unpacked); with
    ``attr``, for calling that attribute of it."""
    base = strip_moves(value)
    if isinstance(base, ast.Call):
        wrapper, wrapped = _wrapped(facts, base, index)
        if wrapper:
            name = dotted_name(wrapped) if wrapped is not None else None
            if name is None:
                return UNKNOWN if wrapped is None else _expression_verdict(sens, names, wrapped, attr)
            return _sensitivity(facts, name, node, depth + 1, busy | {node}, attr)
    if index is not None:
        # `net, opt = build(cfg)`: element `index` of what a function of this file returns
        # (the defs the call may run, redefinitions followed); anything else is not known here
        runs = callees(facts, base) if isinstance(base, ast.Call) and isinstance(base.func, ast.Name) else None
        if runs is None or not runs.defs or runs.other or any(d.name != base.func.id for d in runs.defs):
            return UNKNOWN
        return combine(sens.factory_of(d, names, index) for d in runs.defs)
    alias = dotted_name(base)
    if alias is not None:  # `model = model.cuda()`, `net = model`: the same module
        return _sensitivity(facts, alias, node, depth + 1, busy | {node}, attr)
    return _expression_verdict(sens, names, value, attr)


def _class_key(facts: FileFacts, module: str, at: ast.AST):
    if module.split(".", 1)[0] in ("self", "cls"):
        return ("class", id(owner_class(facts, at)))
    return ("scope", id(_binding_scope(facts, module, at)))


_ANY = object()


def _binding_scope(facts: FileFacts, module: str, at: ast.AST):
    """Where the bindings of ``module`` that ``at`` sees live: the nearest enclosing function
    that binds its root name (a local), else the module (None); any scope for ``self.x``."""
    root = module.split(".", 1)[0]
    if root in ("self", "cls"):
        return _ANY
    for func in facts.enclosing_functions(at):
        scope = facts.scope_of_node.get(func)
        if scope is not None and root in scope.globals:
            return None
        if scope is not None and root in scope.locals:
            return func
    return None


def _expression_verdict(sens: Sensitivity, names: dict[str, str], value: ast.AST, attr: str | None = None) -> str:
    value = strip_moves(value)
    while isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "eval":
        value = strip_moves(value.func.value)
    if not isinstance(value, ast.Call):
        return UNKNOWN
    if attr is not None:
        return sens.called_attribute(value, names, attr)
    calls = [n for n in ast.walk(value) if isinstance(n, ast.Call)]
    return combine(sens.built(c, names, 0) for c in calls)


# -- GF105's questions: where must a `.train()` go, and which modules does a step train? ----


@dataclass
class Plan:
    outcome: str  # "ok", "silent", "insert", "nofix"
    target: ast.stmt | None = None
    in_loop: ast.AST | None = None


def plan_train_insertion(
    facts: FileFacts, scope, uses: list[ast.AST], items: list[ModeItem], fresh: bool = False
) -> Plan:
    # A fresh module trains (module-level code, or one this function builds before using it);
    # a function inherits its caller's mode.
    entry_train = scope is None or fresh
    if all_train_at(facts, scope, uses, items, entry_train):
        return Plan("ok")
    events = [i for i in items if i.kind != "train"]
    first_use = min(uses, key=pos)
    # A `.train()` inside a loop around every step: the author switches modes per iteration
    # (`if phase == "train": model.train() else: model.eval()`); not ours to second-guess.
    for w in items:
        if w.kind == "train" and any(
            all(is_descendant(facts, u, loop) for u in uses) for loop in own_loops_around(facts, w.node, scope)
        ):
            return Plan("silent")
    # A direct `.eval()` before the training, outside any loop around it: eval-mode training on
    # purpose (frozen batch-norm fine-tuning) or at least not ours to undo.
    for e in events:
        if e.kind == "eval" and e.key < (*pos(first_use), 1):
            e_loops = set(map(id, own_loops_around(facts, e.node, scope)))
            if not any(e_loops & set(map(id, own_loops_around(facts, u, scope))) for u in uses):
                return Plan("silent")
    loop = None
    for candidate in own_loops_around(facts, first_use, scope):
        if all(is_descendant(facts, u, candidate) for u in uses) and any(
            is_descendant(facts, e.node, candidate) for e in events
        ):
            loop = candidate
            break
    if loop is None:
        if scope is None:
            return Plan("nofix")
        body = scope.body
        target = _after_train_switches(facts, body, body_start(body))
    else:
        body = loop.body
        target = body[0]
    first_child = next(c for c in body if any(is_descendant(facts, u, c) for u in uses))
    preceding = [e for e in events if e.key < (*pos(first_child), 1) and any(is_descendant(facts, e.node, c) for c in body)]
    if any(e.kind == "eval" for e in preceding):
        return Plan("silent")
    if preceding:
        target = first_child
    planned = sorted([*items, ModeItem(target, "train", 0)], key=lambda i: i.key)
    if not all_train_at(facts, scope, uses, planned, entry_train):
        return Plan("nofix")
    return Plan("insert", target, loop)


def past_bindings(facts: FileFacts, scope, plan: Plan, module: str, uses: list[ast.AST]) -> Plan:
    """``plan`` with its ``.train()`` moved past the statements before the first use that may
    bind ``module``: an assignment to it, or a call of a method on ``self`` that assigns it
    (`if not self._initialized: self._initialize()` builds `self._net`: `self._net.train()`
    before that raises AttributeError on None). "nofix" when the statement holding the first
    use binds it too."""
    if plan.outcome != "insert" or plan.target is None:
        return plan
    body = plan.in_loop.body if plan.in_loop is not None else scope.body
    if plan.target not in body:
        return plan
    start = body.index(plan.target)
    stop = next((i for i, c in enumerate(body) if any(is_descendant(facts, u, c) for u in uses)), len(body))
    last = None
    for i in range(start, min(stop + 1, len(body))):
        if _may_bind(facts, body[i], module, set()):
            last = i
    if last is None:
        return plan
    if last >= stop:
        return Plan("nofix")
    return Plan("insert", body[last + 1], plan.in_loop)


def _may_bind(facts: FileFacts, stmt: ast.AST, module: str, seen: set) -> bool:
    for node in ast.walk(stmt):
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(dotted_name(n) == module for t in targets for n in ast.walk(t)):
                return True
        elif isinstance(node, ast.Call) and module.startswith("self."):
            func = node.func
            if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self":
                for method in callees(facts, node).defs:
                    if method not in seen:
                        seen.add(method)
                        if any(_may_bind(facts, s, module, seen) for s in method.body):
                            return True
    return False


def _after_train_switches(facts: FileFacts, body: list[ast.stmt], target: ast.stmt) -> ast.stmt:
    """The first statement from ``target`` on that is not a `.train()` of some module
    (`model.train()` first: the new `.train()` goes next to it), or ``target``."""
    i = body.index(target)
    while i + 1 < len(body) and isinstance(body[i], ast.Expr) and isinstance(body[i].value, ast.Call):
        switch = switch_of(body[i].value)
        if switch is None or switch.mode != "train" or body[i].value.args or body[i].value.keywords:
            break
        i += 1
    return body[i]


def training_callers(facts: FileFacts, func) -> list[ast.Call]:
    """The calls of ``func`` elsewhere in the file that may train through it: not one made
    with grad disabled (`eval_step` under `@torch.no_grad()` calling the shared `step`: no
    backward can run there), nor one whose literal arguments skip every backward and optimizer
    step of ``func`` (`run_epoch(.., mode="eval")` where they sit under `if mode == "train":`)."""
    return [
        c for c in outside_callers(facts, func)
        if facts.grad_mode_at(c) != "disabled" and not _steps_skipped(facts, func, c)
    ]


def _steps_skipped(facts: FileFacts, func, call: ast.Call) -> bool:
    if not isinstance(func, FUNCTIONS):
        return False
    steps = [m.call for m in facts.method_calls_in(func, "backward")]
    steps += [c for c in own_calls(facts, func) if is_optimizer_step(c)]
    if not steps:
        return False
    bound = {}
    positional = [a.arg for a in (*func.args.posonlyargs, *func.args.args)]
    defaults = dict(zip(positional[::-1], func.args.defaults[::-1]))
    defaults.update((a.arg, d) for a, d in zip(func.args.kwonlyargs, func.args.kw_defaults) if d is not None)
    for param in parameter_names(func, star=False):
        value = argument_for(func, call, param)
        if value is None and not any(isinstance(a, ast.Starred) for a in call.args) and not any(k.arg is None for k in call.keywords):
            value = defaults.get(param)
        if isinstance(value, ast.Constant):
            bound[param] = value.value
    return bool(bound) and all(_skipped_branch(facts, step, func, bound) for step in steps)


def _skipped_branch(facts: FileFacts, node: ast.AST, func, bound: dict) -> bool:
    """``node`` sits in the branch of an `if` of ``func`` that ``bound`` (parameters bound to
    literals) decides is not taken."""
    child, parent = node, facts.parents.get(node)
    while parent is not None and parent is not func:
        if isinstance(parent, ast.If) and child is not parent.test:
            taken = _literal_truth(parent.test, bound)
            if taken is not None and (child in parent.body) != taken:
                return True
        child, parent = parent, facts.parents.get(parent)
    return False


def _literal_truth(test: ast.AST, bound: dict):
    """The value of ``test`` with ``bound``'s names as literals: True, False, or None (unknown)."""
    def value(node):
        if isinstance(node, ast.Constant):
            return True, node.value
        if isinstance(node, ast.Name) and node.id in bound:
            return True, bound[node.id]
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            parts = [value(e) for e in node.elts]
            return (True, [v for _, v in parts]) if all(k for k, _ in parts) else (False, None)
        return False, None

    if isinstance(test, ast.BoolOp):
        parts = [_literal_truth(v, bound) for v in test.values]
        if isinstance(test.op, ast.And):
            return False if False in parts else (True if all(p is True for p in parts) else None)
        return True if True in parts else (False if all(p is False for p in parts) else None)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = _literal_truth(test.operand, bound)
        return None if inner is None else not inner
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        (known_l, left), (known_r, right) = value(test.left), value(test.comparators[0])
        if not (known_l and known_r):
            return None
        op = test.ops[0]
        try:
            if isinstance(op, (ast.Eq, ast.NotEq)):
                return (left == right) == isinstance(op, ast.Eq)
            if isinstance(op, (ast.In, ast.NotIn)):
                return (left in right) == isinstance(op, ast.In)
            if isinstance(op, (ast.Is, ast.IsNot)):
                return (left is right) == isinstance(op, ast.Is)
        except TypeError:
            return None
        return None
    known, result = value(test)
    return bool(result) if known and not isinstance(test, (ast.Tuple, ast.List, ast.Set)) else None


def entered_in_train_mode(facts: FileFacts, scope, module: str, depth: int = 0) -> bool:
    """Every call of ``scope`` in the file hands in, for its parameter ``module``, a module in
    train mode there on every path (just built, or `.train()`-ed; `fit(Net(), data)` too), and
    there is one. A caller that hands on its own parameter as it got it hands what its own
    callers give (`train_iters(enc)` calls `train(enc)`, after the script's `enc.train()`).
    A name ``scope`` reads from the scope around it (a notebook's global `model`, a closure's
    `model`) is entered as that scope has it at each of its calls there (`model.train()` then
    `train()`); a call from anywhere else is unknown."""
    if scope is None:
        return False
    free = module not in parameter_names(scope, star=False)
    root = module.split(".", 1)[0]
    if free and (root in parameter_names(scope) or root in facts.scope_of_node[scope].locals):
        return False
    outside = training_callers(facts, scope)
    for call in outside:
        caller = facts.function_of.get(call)
        if free:
            if caller is not facts.function_of.get(scope):
                return False
            argument, name = None, module
        else:
            argument = argument_for(scope, call, module)
            name = dotted_name(argument) if argument is not None else None
        if name is None:
            if argument is None or binding_mode(facts, caller, "", argument, call) != "trained":
                return False
            continue
        modes = modes_at(facts, caller, call, evaluation_items(facts, caller, {name}))
        if ENTRY in modes and depth < 3 and entered_in_train_mode(facts, caller, name, depth + 1):
            modes = modes - {ENTRY}
        if not modes <= {TRAIN, TRAINED}:
            return False
    return bool(outside)


def before_loops(facts: FileFacts, func, names: tuple[str, ...], target: ast.stmt) -> ast.stmt:
    """Where a switch of ``names`` that must run before ``target`` goes: before the outermost
    loop of ``func`` around ``target`` in which nothing sets their mode, rebinds them or runs
    them ahead of ``target`` (once before the loop, not once per iteration); else ``target``."""
    items = evaluation_items(facts, func, set(names))
    roots = {n.split(".", 1)[0] for n in names}
    place = target
    for loop in own_loops_around(facts, target, func):
        if any(is_descendant(facts, i.node, loop) for i in items):
            break
        if any(isinstance(n, ast.Name) and n.id in roots and not isinstance(n.ctx, ast.Load) for n in ast.walk(loop)):
            break
        ahead = (c for c in own_calls(facts, func) if is_descendant(facts, c, loop) and pos(c) < pos(target))
        if any((t := forward_target(facts, c)) is not None and any(related(t, n) for n in names) for c in ahead):
            break
        place = loop
    return place


_PARAMETER_METHODS = ("parameters", "named_parameters")


def optimized_modules(facts: FileFacts, scope, steps: list[ast.Call]) -> set[str] | None:
    """Modules whose parameters the optimizers stepped in ``scope`` update, when the file shows
    where every one of them is built (`opt = SGD(net.parameters())`, in ``scope`` or, for an
    optimizer handed in as a parameter, by every caller: `train(model, predictor, opt)` after
    `opt = Adam([*model.parameters(), *predictor.parameters()])` updates the `model` and
    `predictor` parameters); None when unknown."""
    out: set[str] = set()
    for step in steps:
        receiver = dotted_name(step.func.value)
        if receiver is None:
            return None
        found = _stepped_modules(facts, scope, receiver, step)
        if found is None and isinstance(scope, FUNCTIONS) and receiver in parameter_names(scope, star=False):
            found = _handed_in_optimizer(facts, scope, receiver)
        if found is None:
            return None
        out |= found
    return out


def _handed_in_optimizer(facts: FileFacts, scope, param: str) -> set[str] | None:
    """For the optimizer parameter ``param`` of ``scope``: the parameters of ``scope`` whose
    modules the optimizer every caller hands in updates (a module the call does not hand in is
    not one ``scope`` can name); None when some caller's optimizer is not shown."""
    calls = outside_callers(facts, scope)
    if not calls:
        return None
    out: set[str] = set()
    for call in calls:
        name = dotted_name(argument_for(scope, call, param))
        found = _stepped_modules(facts, facts.function_of.get(call), name, call) if name else None
        if found is None:
            return None
        for p in parameter_names(scope, star=False):
            passed = dotted_name(argument_for(scope, call, p))
            for module in found if passed else ():
                if module == passed or module.startswith(passed + "."):
                    out.add(p + module[len(passed):])
    return out


def _stepped_modules(facts: FileFacts, scope, receiver: str, at: ast.AST) -> set[str] | None:
    """The modules whose `.parameters()` build the optimizer ``receiver`` that ``at`` in
    ``scope`` steps or hands on; None when the file does not show where it is built."""
    built = []
    for node in facts.nodes_of(ast.Assign):
        if isinstance(node.value, ast.Call) and any(dotted_name(t) == receiver for t in node.targets):
            # Built in this very scope, or a `self.` attribute of this class: elsewhere the
            # model may reach this function under another name (`net` passed as `model`).
            here = facts.function_of.get(node) is scope
            if (here or receiver.startswith("self.")) and same_object(facts, receiver, node, at):
                built.append(node.value)
    if not built:
        return None  # passed in: which parameters it holds is unknown
    out: set[str] = set()
    for call in built:
        if not call.args and not call.keywords:
            return None
        for node in ast.walk(call):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _PARAMETER_METHODS:
                name = dotted_name(node.func.value)
                if name is None:
                    return None
                out.add(name)
    return out


def built_here(facts: FileFacts, scope, module: str) -> list[ast.stmt]:
    """Statements of ``scope`` that bind the plain local name ``module`` (`net = Net()`), in
    source order; empty for a parameter, a global, an attribute or module-level code."""
    if scope is None or "." in module:
        return []
    params = parameter_names(scope, star=False)
    if module in params or module in facts.scope_of_node[scope].globals:
        return []
    return list(_stores(facts, scope).get(module, ()))


def _stores(facts: FileFacts, scope) -> dict[str, list[ast.stmt]]:
    """Name -> the statements of ``scope``'s own code that store it, in source order."""

    def compute():
        out: dict[str, list[ast.stmt]] = {}
        for node in facts.scope_of_node[scope].stores:
            if isinstance(node.ctx, ast.Store):
                stmt = node
                while stmt is not None and not isinstance(stmt, ast.stmt):
                    stmt = facts.parents.get(stmt)
                if stmt is not None:
                    out.setdefault(node.id, []).append(stmt)
        return {name: sorted(stmts, key=pos) for name, stmts in out.items()}

    return facts.memo(("module_mode.stores", id(scope)), compute)


# What reads saved weights: `torch.load(..)`, `load_checkpoint(..)`, `hub.load_state_dict_from_url(..)`,
# safetensors' `load_file(..)`, `restore(..)`: matched on the last part of the callee's name.
_READS_SAVED = re.compile(r"^(load|load_\w+|\w+_load|restore\w*|\w*checkpoint\w*|\w*from_url)$", re.I)
# Methods of a module that give it saved weights (`load_state_dict` asks where its state is from).
_LOADING_METHODS = re.compile(r"^(load|load_\w+|\w+_load|restore\w*|\w*checkpoint\w*|\w*pretrained\w*)$", re.I)
# Names that hold a path to saved weights or what was read from one, by convention.
_SAVED_NAME = re.compile(r"path|ckpt|checkpoint|resume|weights?$|pretrained|snapshot|file|url|saved", re.I)


def loads_saved_weights(facts: FileFacts, scope, module: str, before: ast.AST) -> ast.Call | None:
    """The first call in ``scope`` before ``before`` that gives ``module`` weights read from
    storage: ``module.load_state_dict(X)`` where ``X`` is read from storage (``torch.load(path)``,
    ``ckpt['model']`` of one, a name bound from one, or a name like ``checkpoint``), another
    loading method (``module.load_weights(path)``, ``module.load_pretrained(..)``), or a loading
    helper handed the module and a path (``load_checkpoint(model, args.resume)``), or a binding
    that loads it (``model = Auto.from_pretrained(name).train()``). Without one, a module built in
    the function has the random weights of its constructor: running it under ``no_grad`` is a
    smoke test or a shape probe, not an evaluation whose mode matters."""
    if scope not in _loading_scopes(facts):
        return None
    for stmt in built_here(facts, scope, module):
        value = getattr(stmt, "value", None)
        if pos(stmt) < pos(before) and isinstance(value, ast.AST):
            for node in ast.walk(value):
                if isinstance(node, ast.Call) and (name := callee_name(node)) and (_READS_SAVED.match(name) or _LOADING_METHODS.match(name)):
                    return node
    for call in own_calls(facts, scope):
        if pos(call) >= pos(before):
            continue
        func = call.func
        if isinstance(func, ast.Attribute) and dotted_name(func.value) == module:
            if func.attr == "load_state_dict":
                if call.args and _read_from_storage(facts, call.args[0], 0):
                    return call
            elif _LOADING_METHODS.match(func.attr):
                return call
            continue
        name = callee_name(call)
        arguments = [*call.args, *(k.value for k in call.keywords)]
        if name and _READS_SAVED.match(name) and any(dotted_name(a) == module for a in arguments):
            if any(_read_from_storage(facts, a, 0) for a in arguments if dotted_name(a) != module):
                return call
    return None


def _loading_scopes(facts: FileFacts) -> set:
    """The functions that hold (in their own code, or a function or lambda inside) a call
    named like a load: the only ones :func:`loads_saved_weights` can find one in."""

    def compute():
        out = set()
        for call in facts.calls:
            name = callee_name(call)
            if name and (_READS_SAVED.match(name) or _LOADING_METHODS.match(name)):
                out.update(facts.enclosing_functions(call))
        return out

    return facts.memo(("module_mode.loading_scopes",), compute)


def _read_from_storage(facts: FileFacts, expr: ast.AST, depth: int) -> bool:
    """Whether ``expr`` is read from storage or names where (see :func:`loads_saved_weights`)."""
    if depth > 4:
        return False
    while isinstance(expr, (ast.Subscript, ast.Attribute, ast.Call)):
        if isinstance(expr, ast.Call):
            name = callee_name(expr)
            if name and _READS_SAVED.match(name):
                return True
            if not isinstance(expr.func, ast.Attribute):
                return False
            expr = expr.func.value  # `torch.load(p).get('model')`, `sd.copy()`
        else:
            if isinstance(expr, ast.Attribute) and _SAVED_NAME.search(expr.attr):
                return True  # `args.resume`, `cfg.checkpoint`
            expr = expr.value
    if isinstance(expr, ast.Constant):
        return isinstance(expr.value, str)  # a path
    if isinstance(expr, (ast.DictComp, ast.ListComp, ast.GeneratorExp)):
        return any(_read_from_storage(facts, g.iter, depth + 1) for g in expr.generators)
    if not isinstance(expr, ast.Name):
        return False
    if _SAVED_NAME.search(expr.id):
        return True
    func = facts.function_of.get(expr)
    if isinstance(func, ast.Lambda):
        return False
    from gradfix.analysis.provenance import reaching_definitions

    definitions = reaching_definitions(facts, func).reaching.get(expr) or ()
    return any(d.kind == "assign" and d.value is not None and _read_from_storage(facts, d.value, depth + 1) for d in definitions)


def constructed(stmt: ast.stmt) -> bool:
    """`net = Net(...)` / `net = nn.Sequential(...).to(device)`: a new module, in train mode."""
    value = getattr(stmt, "value", None)
    while isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr in ("to", "cuda", "cpu"):
        value = value.func.value
    return isinstance(value, ast.Call)


def switches_others_only(facts: FileFacts, scope, module: str) -> bool:
    """The scope puts other modules into train mode itself but never this one, nor do its
    optimizers update this one's parameters: the author manages modes here and leaves this one
    (a frozen teacher, a critic) as it is on purpose."""
    trains = [s.receiver for s in own_switches(facts, scope) if s.mode == "train"]
    if not trains or any(related(t, module) for t in trains):
        return False
    steps = [c for c in own_calls(facts, scope) if is_optimizer_step(c)]
    optimized = facts.memo(("module_mode.optimized", id(scope)), lambda: optimized_modules(facts, scope, steps) if steps else None)
    return not any(related(o, module) for o in optimized or ())


def other_global(facts: FileFacts, scope, module: str, node: ast.AST) -> bool:
    """``node`` switches a module-level ``module`` while ``scope`` takes a parameter of that
    name, and module-level code never passes the global to a call: the parameter is another
    object (`for _, net in frozen_copies.items(): net.eval()` vs `def train(net, …)`)."""
    if scope is None or not isinstance(node, ast.Call) or facts.function_of.get(node) is not None:
        return False
    root = module.split(".", 1)[0]
    params = parameter_names(scope, star=False)
    if root not in params:
        return False
    for call in facts.calls:
        if facts.function_of.get(call) is not None:
            continue
        for arg in (*call.args, *(k.value for k in call.keywords)):
            name = dotted_name(arg.value if isinstance(arg, ast.Starred) else arg)
            if name is not None and name.split(".", 1)[0] == root:
                return False
    return True


def evaluated_after_training(facts: FileFacts, scope, node: ast.AST) -> bool:
    """The eval at ``node`` sits in a function that the file calls, from the same place as the
    training function ``scope``, only where no path leads from it back to a training call
    (`for epoch …: train(…)` then a final `test(…)`): no training step follows it here."""
    if scope is None or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        owner = node
    else:
        owner = facts.function_of.get(node)
    if scope is None or not isinstance(owner, (ast.FunctionDef, ast.AsyncFunctionDef)) or owner is scope:
        return False
    if facts.function_of.get(owner) is not None or facts.function_of.get(scope) is not None:
        return False  # nested defs and methods: who calls them when is not visible here
    trains, evals = callers(facts, scope), callers(facts, owner)
    if not trains or not evals or any(isinstance(c.func, ast.Attribute) for c in trains + evals):
        return False
    scopes = {facts.function_of.get(c) for c in trains + evals}
    if len(scopes) != 1:
        return False
    caller = scopes.pop()
    if caller is scope or caller is owner:
        return False
    # Along the caller's flow: does any path run an evaluation and then a training call?
    marks = {id(innermost_statement(facts.parents, c)): "trained" for c in trains}
    marks.update({id(innermost_statement(facts.parents, c)): "evaluated" for c in evals})

    def effect(stmt: ast.stmt, state: frozenset) -> frozenset:
        mark = marks.get(id(stmt))
        return frozenset({mark}) if mark else state

    body = facts.tree.body if caller is None else caller.body
    flow = ForwardFlow(body, frozenset({"entry"}), effect, loops_may_skip=True)
    statements = {innermost_statement(facts.parents, c) for c in trains}
    return not any("evaluated" in flow.at.get(id(stmt), frozenset()) for stmt in statements)
