"""GF104 no-grad-without-eval: a query over module-mode state (gradfix/analysis/module_mode.py)."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from gradfix.lazy import cst

from gradfix.analysis.calls import outside_callers
from gradfix.analysis.gradflow import short_code
from gradfix.analysis.insertion import body_start, insert_before, statement_at, unused_name
from gradfix.analysis.module_mode import (
    before_loops,
    built_here,
    evidence_for,
    forward_target,
    fresh_local,
    is_descendant,
    loads_saved_weights,
    module_sensitivity,
    not_a_module,
    not_an_evaluation,
    outer_disabled_region,
    pos,
    related,
    sampled_in_train_mode_by_convention,
    same_object,
    switched_back_after,
    switches,
    train_mode_reaches,
)
from gradfix.analysis.project import FREE, SENSITIVE, UNKNOWN
from gradfix.analysis.vocabulary import FUNCTIONS, is_training_scope
from gradfix.facts import FileFacts, GradRegion, bound_names
from gradfix.model import FixSafety
from gradfix.rule import GRAD_DISABLING, Invalid, Option, Rule, Valid, attribute


@dataclass
class EvalGap:
    """A function that evaluates ``modules`` under a grad-disabled region without `.eval()`."""

    func: ast.FunctionDef | ast.AsyncFunctionDef
    region: GradRegion  # the first region (outermost disabled one) holding such a call
    call: ast.Call  # the first such module call
    modules: list[str]  # names to switch, in order of first use
    evidence: list[str]  # why each is in train mode: "trained at line 12", "built at line 3"
    calls: list[ast.Call] = field(default_factory=list)  # every flagged call in the function
    generators: list[str] = field(default_factory=list)  # modules maybe sampled in train mode on purpose


def evaluation_gaps(facts: FileFacts) -> list[EvalGap]:
    return facts.memo(("gf104.gaps",), lambda: _evaluation_gaps(facts))


def _evaluation_gaps(facts: FileFacts) -> list[EvalGap]:
    gaps: dict[ast.AST, EvalGap] = {}
    # The functions with a grad-disabled region of their own (a `with` in their code, or a
    # decorator): no other call can be in one.
    disabling = {r.owner if r.kind == "decorator" else facts.function_of.get(r.owner) for r in facts.regions if r.disables}
    for call in sorted(facts.calls, key=pos):  # source order: the first call is the one reported
        func = facts.function_of.get(call)
        if func not in disabling or not isinstance(func, FUNCTIONS) or is_training_scope(facts, func):
            continue
        if outer_disabled_region(facts, call) is None:
            continue
        target = forward_target(facts, call)
        found = _evaluated_module(facts, call, target) if target is not None else None
        if found is None:
            continue
        module, evidence = found
        if not_an_evaluation(facts, func, call, module):
            continue
        if not train_mode_reaches(facts, func, (module, target), call):
            continue
        gap = gaps.get(func)
        if gap is None:
            gap = gaps[func] = EvalGap(func, outer_disabled_region(facts, call), call, [], [])
        gap.calls.append(call)
        if module not in gap.modules:
            gap.modules.append(module)
            gap.evidence.append(evidence)
            if sampled_in_train_mode_by_convention(facts, module):
                gap.generators.append(module)
    return sorted(gaps.values(), key=lambda g: pos(g.call))


def _evaluated_module(facts: FileFacts, call: ast.Call, target: str) -> tuple[str, str] | None:
    """The module a forward call runs, when the file trains that very object (so it is in
    train mode here unless something switches it) and it is not mode-free (sensitive, or
    unknown); or when the function builds it itself, mode-sensitive, in train mode, and loads
    saved weights into it (with random weights it computes nothing to evaluate). Never
    something that is no nn.Module at all (it has no `.eval()`), nor a part of one."""
    parts = target.split(".")
    prefixes = [".".join(parts[:i]) for i in range(len(parts), 0, -1)]  # `a.b.c`, `a.b`, `a`
    for k, p in enumerate(prefixes):
        # `model.inference(x)` runs that attribute of the module (a method or a submodule):
        # its kind is what that runs
        found = _train_mode_evidence(facts, call, p, parts[len(parts) - k] if k else None)
        if found is not None:  # asked last, the dearest question: is it (or a part) no module?
            return None if found is False or any(not_a_module(facts, q, call) for q in prefixes[: k + 1]) else found
    return None


def _train_mode_evidence(facts: FileFacts, call: ast.Call, p: str, attr: str | None) -> tuple[str, str] | bool | None:
    """Why ``p`` is in train mode at ``call`` (see :func:`_evaluated_module`); False when it
    is but is mode-free (`.eval()` would change nothing); None when nothing shows it."""
    nodes = evidence_for(facts, p, call)
    if nodes:
        kind = module_sensitivity(facts, p, call, attr)
        if kind == UNKNOWN and _uncalled_parameter(facts, p, call) and all(module_sensitivity(facts, p, n) == FREE for n in nodes):
            # a parameter of a function no code of the file calls shares its evidence by name
            # only, and what the file trains under that name is mode-free: no trained dropout
            return False
        return kind != FREE and (p, f"trained at line {nodes[0].lineno}")
    own = fresh_local(facts, p, call)
    loaded = loads_saved_weights(facts, own, p, call) if own is not None else None
    if loaded is not None:
        built = [b for b in built_here(facts, own, p) if pos(b) < pos(call)]
        if built and module_sensitivity(facts, p, call, attr) == SENSITIVE:
            return p, f"built at line {built[-1].lineno}, weights loaded at line {loaded.lineno}"
    return None


def _uncalled_parameter(facts: FileFacts, name: str, at: ast.AST) -> bool:
    """The root of ``name`` is a parameter of the function around ``at``, which nothing in the
    file calls (`def accuracy(x, y, model)` in a notebook that never runs it)."""
    func = facts.function_of.get(at)
    if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)) or outside_callers(facts, func):
        return False
    return name.split(".", 1)[0] in {a.arg for a in (*func.args.posonlyargs, *func.args.args, *func.args.kwonlyargs)}


class NoGradWithoutEval(Rule):
    """
    ## What it does
    Finds evaluation code: a module called inside `torch.no_grad()` (or `inference_mode()`,
    `set_grad_enabled(False)`, or a function decorated with one of them), in a function that
    is no training scope (no `.backward()`, no optimizer step), while the module is in train
    mode on some path of the function's control flow to that call: the file trains it
    (`.train()` on it, or a training scope calls it), and on that path nothing sets its mode
    first: no `.eval()` (an `.eval()` in one branch of an `if` only covers that branch; one at
    the end of a loop body covers the next iterations, not the first), no
    `model = Net().eval()`, no helper called before it whose own flow leaves it in eval mode,
    no enclosing function or caller that switches it first. A module built in the function
    (`model = Net()`) or left in train mode by a helper is in train mode whatever the caller did;
    one built in the function is evaluated only once the function loads saved weights into it
    (`model.load_state_dict(torch.load(path))`, `load_checkpoint(model, args.resume)`): with the
    random weights of its constructor, running it is a smoke test or a shape probe.

    The evidence is about the object, not the name: a function's own `m = make()` is not
    another function's `m` (two tests), so only its own flow (and the training functions it
    hands `m` to) says what mode it is in, starting from what its binding gives: train for a
    new nn.Module, eval for `X.from_pretrained(...)` (transformers and diffusers loaders call
    `.eval()`), for `Net().eval()` and for a helper whose every `return` is in eval mode,
    the copied module's mode for `copy.deepcopy(m)`, unknown otherwise (and unknown with no
    training of that object is not reported). Something that is no nn.Module has no mode: an
    instance of a class that does not derive from nn.Module (a notebook's own `Sequential`),
    or `net` where `isinstance(net, nn.Module)` failed. Setting `layer.training` by hand is
    the author managing the mode.

    A module that is mode-free (every layer it builds acts the same in both modes: `Linear`,
    `ReLU`, `Conv2d`, `LayerNorm`, an LSTM without dropout...; judged across the project's
    files when gradfix runs on a tree) is never reported: `.eval()` would change nothing.
    Unknown is unknown, not mode-free: a trained module of unknown kind is reported. A call of
    another method (`model.inference(x)`, `model.head(x)`) is judged by what that method or
    submodule of the project class runs, not by the forward: one that reads no mode and runs
    only mode-free layers (PyTorch Geometric's `SAGEConv`, `GCNConv`... included) is not reported.

    Not evaluation, left alone: functions whose caller owns the mode (`forward`, `*_step`,
    `on_*` hooks, framework methods such as a LightningModule's, registered hooks, methods of a
    class with its own `train()`/`eval()` for that module, `self.<submodule>` inside an
    nn.Module), batch-norm recalibration (`update_bn`), reinforcement-learning acting (an
    `act`-like function, or one that steps an environment), results that feed training
    (targets, teacher outputs), autoregressive sampling loops (the output becomes the next
    input), and a forward whose output is thrown away (lazy-parameter initialisation). A call
    without arguments (`model.get_classifier()`) is no forward; `self.model` of one class is
    not another's, and a submodule switched by hand (`model.encoder.eval()`) means the author
    manages the modes.

    A GAN generator (`G`, `netG`, `generator`, `g_ema`) that the file never switches to eval
    mode is reported without a fix: it does run in train mode (batch statistics, dropout on,
    running statistics updated), but many GAN codebases sample that way on purpose (pix2pix
    keeps dropout as noise; StarGAN's instance norm gives other images with its running
    statistics), so only the author can say which mode is right.

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

    The `.eval()` goes before the `with` (first in a decorated function), and before the loops
    around it in which nothing switches the module, rebinds it or runs it first: once before
    `for name, loader in splits:`, not once per split.

    ## Fix safety
    Unsafe: the fix changes what the evaluation computes (dropout off, batch-norm uses and
    no longer updates its running statistics), and the module stays in eval mode after the
    function returns, so training code that does not call `.train()` would then train in eval
    mode: GF105 (train-without-train-mode) reports that once the `.eval()` is in the file.
    Option `style = "restore"` saves `<module>.training` first and restores it with
    `<module>.train(was_training)` in a `finally`, so callers keep their mode. When the module
    is bound in the function after the place `.eval()` would go, there is no fix; nor when
    something inside the block puts it back in train mode before the call (an attack helper
    `perturb(net=model)` that ends in `net.train()`): an `.eval()` before the block would change
    nothing there.
    """

    code = "GF104"
    name = "no-grad-without-eval"
    summary = "Module evaluated under no_grad without .eval()"
    fix_safety = FixSafety.UNSAFE
    triggers = GRAD_DISABLING
    # Evidence of train mode: the file trains the module (`.train()`, a backward or an
    # optimizer step), or the function builds it and loads saved weights into it.
    requires = ((attribute("train", r"\("), "backward", attribute("step"), r"(?i)load|restore|checkpoint|pretrained|from_url"),)
    uses_project = True  # is the module mode-sensitive? (classes of other files)
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
        # an Ignite handler: the engine that calls it owns the mode
        Valid(
            "import torch\n" + _TRAIN + "\n@trainer.on(Events.EPOCH_COMPLETED)\ndef log_val(engine):\n"
            "    with torch.no_grad():\n        print(model(x))\n"
        ),
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
        # `model.train(reset=False)` is an override with options of its own (gpytorch's fully
        # Bayesian models): the author picks the mode for the in-sample fit on purpose
        Valid(
            "import torch\n" + _TRAIN + "\ndef fit_metric(model):\n    if bayesian(model):\n        model.train(reset=False)\n"
            "    else:\n        model.train()\n    with torch.no_grad():\n        out = model(*model.train_inputs)\n"
            "    model.eval()\n    return out\n"
        ),
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
        # an inference script that trains nothing: the model it builds and loads is in train mode
        Invalid(
            """
            import torch
            import torch.nn as nn

            class Net(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.fc = nn.Linear(4, 2)
                    self.drop = nn.Dropout(0.5)

                def forward(self, x):
                    return self.drop(self.fc(x))

            def predict(x, path):
                model = Net()
                model.load_state_dict(torch.load(path))
                with torch.no_grad():
                    return model(x)
            """,
            """
            import torch
            import torch.nn as nn

            class Net(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.fc = nn.Linear(4, 2)
                    self.drop = nn.Dropout(0.5)

                def forward(self, x):
                    return self.drop(self.fc(x))

            def predict(x, path):
                model = Net()
                model.load_state_dict(torch.load(path))
                model.eval()
                with torch.no_grad():
                    return model(x)
            """,
        ),
        # a mode-sensitive module built in the function without `.eval()`: it is in train mode
        # whatever other functions do; reported, but `.eval()` cannot go before the binding,
        # so no automatic fix
        Invalid(
            "import torch\nfrom torch import nn\n\nclass Net(nn.Module):\n    def __init__(self):\n"
            "        super().__init__()\n        self.body = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5))\n\n"
            "    def forward(self, x):\n        return self.body(x)\n\n" + _TRAIN
            + "\n@torch.no_grad()\ndef predict(path, x):\n    model = Net()\n"
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
        # a GAN generator sampled under no_grad and never switched to eval in the file: it runs
        # in train mode (reported), but that may be the author's intent (StarGAN samples with
        # instance-norm batch statistics), so no fix says which mode is right
        Invalid(
            "import torch\nclass Solver:\n    def train(self, x, z):\n        self.G.train()\n"
            "        self.D(self.G(z)).mean().backward()\n        self.g_opt.step()\n\n    def test(self, z):\n"
            "        with torch.no_grad():\n            return self.G(z)\n",
            None,
        ),
    ]

    def check(self, facts):
        restore = self.opts.get("style") == "restore"
        for gap in evaluation_gaps(facts):
            region = gap.region
            names = ", ".join(f"`{m}`" for m in gap.modules)
            evals = "; ".join(f"`{m}.eval()`" for m in gap.modules)
            where = f"`{short_code(facts, region.expr, 30)}`"
            verb = "runs" if len(gap.modules) == 1 else "run"
            message = f"{names} {verb} under {where} in train mode ({gap.evidence[0]}): dropout/batch norm stay on"
            if region.kind == "decorator":
                target, last = body_start(gap.func.body), gap.func.body[-1]
                anchors = [gap.func, region.expr.lineno]
                spot = "at the start of the function"
            else:
                target, last = _wrap_range(facts, gap)
                spot = "before the block"
                if target is last and (hoisted := before_loops(facts, gap.func, tuple(gap.modules), target)) is not target:
                    target = last = hoisted
                    spot = "before the loop"
                anchors = [region.owner]
            if gap.generators:
                no_fix = "a GAN generator may sample in train mode on purpose"
                yield self.report(facts, gap.call, message, anchors=anchors, no_fix=no_fix)
                continue
            late = _bound_from(facts, gap.func, gap.modules, target)
            if late is not None:
                no_fix = f"`{late}` is bound after the place for `.eval()`"
                yield self.report(facts, gap.call, message, anchors=anchors, no_fix=no_fix)
                continue
            back = switched_back_after(facts, gap.func, gap.modules, target, gap.calls)
            if back is not None:
                no_fix = f"`{short_code(facts, back, 40)}` (line {back.lineno}) puts it back in train mode inside the block"
                yield self.report(facts, gap.call, message, anchors=anchors, no_fix=no_fix)
                continue
            if len(gap.modules) == 1:
                flags = (unused_name(facts, gap.func, "was_training"),)
            else:
                flags = tuple(unused_name(facts, gap.func, f"{m.rsplit('.', 1)[-1]}_was_training") for m in gap.modules)
            data = (tuple(gap.modules), facts.span(target), facts.span(last), flags)
            title = f"Insert {evals} {spot}" + (" and restore the mode in a `finally`" if restore else "")
            yield self.report(facts, gap.call, message, anchors=anchors, data=data, fix_title=title)

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
            body=cst.IndentedBlock(body=moved, indent=parent.indent),
            finalbody=cst.Finally(body=cst.IndentedBlock(body=restores, indent=parent.indent)),
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
            bound = {n for t in stmt.targets for n in bound_names(t)}
        elif isinstance(stmt, (ast.AnnAssign, ast.AugAssign, ast.For, ast.AsyncFor)):
            bound = set(bound_names(stmt.target))
        elif isinstance(stmt, (ast.With, ast.AsyncWith)):
            bound = {n for i in stmt.items if i.optional_vars for n in bound_names(i.optional_vars)}
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
