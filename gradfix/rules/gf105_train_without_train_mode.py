"""GF105 train-without-train-mode: a query over module-mode state (gradfix/analysis/module_mode.py)."""

from __future__ import annotations

import ast

from gradfix.analysis.insertion import insert_before, statement_at
from gradfix.analysis.module_mode import (
    Plan,
    all_train_at,
    train_at,
    another_functions_object,
    built_here,
    constructed,
    entered_in_train_mode,
    evaluated_after_training,
    forward_target,
    leaking_evals,
    mode_api,
    mode_items,
    module_sensitivity,
    not_a_module,
    optimized_modules,
    other_global,
    own_calls,
    own_loops_around,
    own_switches,
    past_bindings,
    plan_train_insertion,
    pos,
    related,
    same_object,
    switches_others_only,
    training_callers,
)
from gradfix.analysis.project import FREE
from gradfix.analysis.vocabulary import calls_backward, caller_owns_mode, is_optimizer_step
from gradfix.facts import dotted_name
from gradfix.model import FixSafety
from gradfix.rule import EVAL_SWITCH, Invalid, Rule, Valid, attribute


class TrainWithoutTrainMode(Rule):
    """
    ## What it does
    Finds a training function (it calls `.backward()` and `optimizer.step()`) that runs a
    module the same file puts into eval mode elsewhere (a real `model.eval()` or
    `model.train(False)` call, or a call that hands the module to a def of the file leaving
    it in eval mode, `acc_check(net, loader)`, named in the message with its line), without calling
    `<module>.train()` where every training step is reached after it: in the function, or
    inside the epoch loop when the loop evaluates (`for epoch …: train steps …;
    evaluate(model)`). Both are questions about the function's control flow: the eval mode
    reaches a step on some path (an `.eval()` or an evaluation helper later in the epoch loop
    reaches the next epoch's steps), and an `.eval()` counts when some path carries it to the
    end of its scope (an early `return` before the switch back; a `finally` that restores the
    mode covers every way out, and so does a saved flag given back: `was = m.training;
    m.eval(); ...; if was: m.train()`). The training steps are the forwards inside every loop
    around some optimizer step (a reference forward before the training loop is none), and a
    method of the file's classes that switches its own object (`probe.train_head()`) is a
    switch where it is called. A function that every call in the file hands a module in train
    mode (built just before the call or in the call, `.train()`-ed, or taken by a loop over
    new modules: `for net in [MLP() for _ in range(5)]:`) starts in train mode, so only its own
    evaluations can leave the module in eval mode. It reports what the file does: an evaluation that lacks
    `.eval()` is GF104's, and once GF104's fix has put a `.eval()` in the file, GF105 reports
    the loops.

    ## Why is this bad?
    `.eval()` sticks: after the first evaluation every later training step runs with dropout
    off and with batch-norm using (and no longer updating) its running statistics. Training
    still "works", so nothing fails; the model just trains worse from epoch 2 on. The usual
    form is a `model.train()` once before the epoch loop and an evaluation inside it.

    ## Example
    ```python
    def fit(model, loader, opt, epochs):
        model.train()
        for epoch in range(epochs):
            for x, y in loader:
                opt.zero_grad()
                loss_fn(model(x), y).backward()
                opt.step()
            evaluate(model)  # calls model.eval()
    ```

    ## Use instead
    ```python
    def fit(model, loader, opt, epochs):
        model.train()
        for epoch in range(epochs):
            model.train()
            for x, y in loader:
                opt.zero_grad()
                loss_fn(model(x), y).backward()
                opt.step()
            evaluate(model)  # calls model.eval()
    ```

    ## Fix safety
    Unsafe: the training steps run in train mode afterwards (dropout on, batch-norm updates
    its statistics), which is the intent, but changes results. It inserts `<module>.train()`
    at the start of the function when the function is one epoch, or at the start of the epoch
    loop's body when the loop also evaluates, after any statement there that may bind the
    module (`self._initialize()` building `self._net`; no fix when the statement that uses it
    binds it too). A module deliberately kept in eval mode while
    training (frozen batch-norm: `model.eval()` before the loop, or a submodule's `.eval()`)
    is not reported, or reported without a fix. Nor is a mode-free module (every layer it
    builds acts the same in both modes, judged across the project's files): training it in
    eval mode changes nothing. Only forwards that run before an optimizer
    step count as training steps: a script's `net.eval()` and test loop after all training is
    not reported. `self.model` switched by another class is another object, and a class with its
    own `train()`/`eval()` methods leaves the mode to its users. A module the function builds
    itself (`net = Net()`) is a fresh object in training mode: other functions' `net.eval()`
    do not reach it, only its own function's switches and the helpers it passes it to; and a
    `.train()` is never inserted before the statement that builds the module.
    """

    code = "GF105"
    name = "train-without-train-mode"
    summary = "Training steps may run in eval mode (no .train() after an .eval())"
    fix_safety = FixSafety.UNSAFE
    triggers = ("backward",)
    requires = ((attribute("step"),), EVAL_SWITCH)  # an optimizer step; an `.eval()` of the file
    uses_project = True  # is the module mode-sensitive? (classes of other files)

    _EVAL = "\ndef evaluate(model, x):\n    model.eval()\n    with torch.no_grad():\n        return model(x)\n"

    VALID = [
        # the only evaluation runs once after the epoch loop: no training step follows it
        Valid(
            "import torch\ndef train(model, loader, opt):\n    for x in loader:\n        model(x).sum().backward()\n"
            "        opt.step()\n\ndef test(model, loader):\n    model.eval()\n    return sum(model(x).sum().item() for x in loader)\n\n"
            "for epoch in range(5):\n    train(model, train_loader, opt)\nprint(test(model, test_loader))\n"
        ),
        # train() at the start of the one-epoch function
        Valid(
            "import torch\ndef train(model, loader, opt):\n    model.train()\n    for x in loader:\n"
            "        model(x).sum().backward()\n        opt.step()\n" + _EVAL
        ),
        # train() at the start of the epoch loop that evaluates
        Valid(
            "import torch\ndef fit(model, loader, opt):\n    for epoch in range(3):\n        model.train()\n        for x in loader:\n"
            "            model(x).sum().backward()\n            opt.step()\n        evaluate(model, x)\n" + _EVAL
        ),
        # the file never puts the model into eval mode
        Valid("import torch\ndef train(model, loader, opt):\n    for x in loader:\n        model(x).sum().backward()\n        opt.step()\n"),
        # evaluation restores the mode
        Valid(
            "import torch\ndef train(model, loader, opt):\n    for x in loader:\n        model(x).sum().backward()\n        opt.step()\n"
            "\ndef evaluate(model, x):\n    was = model.training\n    model.eval()\n    try:\n        with torch.no_grad():\n"
            "            return model(x)\n    finally:\n        model.train(was)\n"
        ),
        # eval-mode training on purpose: frozen batch-norm fine-tuning
        Valid(
            "import torch\ndef finetune(model, loader, opt):\n    model.eval()  # keep BN statistics frozen\n    for x in loader:\n"
            "        model(x).sum().backward()\n        opt.step()\n"
        ),
        # the transfer-learning tutorial: the mode is switched per phase inside the epoch loop
        Valid(
            "import torch\ndef train_model(model, opt, loaders):\n    for epoch in range(3):\n        for phase in ['train', 'val']:\n"
            "            if phase == 'train':\n                model.train()\n            else:\n                model.eval()\n"
            "            for x in loaders[phase]:\n                with torch.set_grad_enabled(phase == 'train'):\n"
            "                    loss = model(x).sum()\n                    if phase == 'train':\n                        loss.backward()\n"
            "                        opt.step()\n"
        ),
        # a module-level script: the test pass after `net.eval()` follows all training
        Valid(
            "import torch\nfor epoch in range(3):\n    for x in loader:\n        opt.zero_grad()\n"
            "        net(x).sum().backward()\n        opt.step()\n\nnet.eval()\nfor x in test_loader:\n    print(net(x))\n"
        ),
        # `self.model` put into eval mode by another class is another object
        Valid(
            "import torch\nclass InferenceRunner:\n    def __init__(self):\n        self.model = build()\n"
            "        self.model.eval()\n\nclass TrainRunner:\n    def __init__(self):\n        self.model = build()\n"
            "        self.model.train()\n\n    def run(self, x):\n        def _step():\n            self.opt.zero_grad()\n"
            "            self.model(x).sum().backward()\n            self.opt.step()\n        return _step()\n"
        ),
        # the class has its own train()/eval() methods: its users set the mode through them
        Valid(
            "import torch\nclass Agent:\n    def learn(self, s, y):\n        (self.online(s) - y).pow(2).mean().backward()\n"
            "        self.opt.step()\n\n    def train(self):\n        self.online.train()\n\n"
            "    def eval(self):\n        self.online.eval()\n"
        ),
        # a frozen teacher: the function switches the student only, on purpose
        Valid(
            "import torch\ndef train(snet, tnet, loader, opt):\n    snet.train()\n    for x in loader:\n"
            "        with torch.no_grad():\n            t = tnet(x)\n        (snet(x) - t).pow(2).mean().backward()\n"
            "        opt.step()\n\ntnet.eval()\n"
        ),
        # the optimizer updates an input image, not the model (class visualisation)
        Valid(
            "import torch\nclass Visualise:\n    def __init__(self, model):\n        self.model = model\n"
            "        self.model.eval()\n\n    def generate(self, image):\n        for i in range(10):\n"
            "            opt = torch.optim.SGD([image], lr=1.0)\n            (-self.model(image)[0, 3]).backward()\n"
            "            opt.step()\n"
        ),
        # the caller owns the mode and sets it right
        Valid(
            "import torch\ndef train_epoch(model, loader, opt):\n    for x in loader:\n        model(x).sum().backward()\n        opt.step()\n"
            + _EVAL
            + "\nfor epoch in range(3):\n    model.train()\n    train_epoch(model, loader, opt)\n    evaluate(model, x)\n"
        ),
        # a module this function builds is not the `net` other functions put into eval mode
        Valid(
            "import torch\ndef predict(net, x):\n    net.eval()\n    return net(x)\n\n"
            "def train_concise(trainer_fn, data_iter):\n    net = torch.nn.Sequential(torch.nn.Linear(5, 1))\n"
            "    optimizer = trainer_fn(net.parameters())\n    for X, y in data_iter:\n        optimizer.zero_grad()\n"
            "        ((net(X) - y) ** 2).mean().backward()\n        optimizer.step()\n"
        ),
        # a fresh module trains, then is switched to eval after all training
        Valid(
            "import torch\ndef run(loader, x):\n    net = Net()\n    opt = torch.optim.SGD(net.parameters(), lr=0.1)\n"
            "    for xb in loader:\n        net(xb).sum().backward()\n        opt.step()\n    net.eval()\n    return net(x)\n"
        ),
        # a mode helper whose argument picks the branch: `set_mode(train=True)` is the `.train()`
        Valid(
            "import torch\nclass Solver:\n    def fit(self, loader):\n        self.set_mode(train=True)\n"
            "        for x in loader:\n            self.net(x).sum().backward()\n            self.opt.step()\n"
            "            self.show(x)\n\n    def show(self, x):\n        self.set_mode(train=False)\n"
            "        with torch.no_grad():\n            out = self.net(x)\n        self.set_mode(train=True)\n"
            "        return out\n\n    def set_mode(self, train):\n        if train:\n            self.net.train()\n"
            "        else:\n            self.net.eval()\n"
        ),
        # module-level frozen copies switched to eval; the training function's `net` parameter
        # is never given the global `net`
        Valid(
            "import copy\nimport torch\ndef train_local(net, loader, opt):\n    for x in loader:\n"
            "        net(x).sum().backward()\n        opt.step()\n\nnets = {i: Net() for i in range(4)}\n"
            "frozen = copy.deepcopy(nets)\nfor _, net in frozen.items():\n    net.eval()\n"
        ),
        # no `.eval()` in the file: GF105 reports what the file does, not what a GF104 fix
        # would do (once that `.eval()` is in the file, GF105 reports the loop)
        Valid(
            "import torch\ndef fit(model, loader, opt):\n    for epoch in range(3):\n        for x in loader:\n"
            "            model(x).sum().backward()\n            opt.step()\n        evaluate(model, x)\n"
            "\ndef evaluate(model, x):\n    with torch.no_grad():\n        return model(x)\n"
            "\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n",
        ),
    ]
    INVALID = [
        # the same evaluation inside the epoch loop: later epochs train in eval mode
        Invalid(
            "import torch\ndef train(model, loader, opt):\n    for x in loader:\n        model(x).sum().backward()\n"
            "        opt.step()\n\ndef test(model, loader):\n    model.eval()\n    return sum(model(x).sum().item() for x in loader)\n\n"
            "for epoch in range(5):\n    train(model, train_loader, opt)\n    print(test(model, test_loader))\n",
            "import torch\ndef train(model, loader, opt):\n    model.train()\n    for x in loader:\n        model(x).sum().backward()\n"
            "        opt.step()\n\ndef test(model, loader):\n    model.eval()\n    return sum(model(x).sum().item() for x in loader)\n\n"
            "for epoch in range(5):\n    train(model, train_loader, opt)\n    print(test(model, test_loader))\n",
        ),
        # one-epoch function: insert at its start (after the docstring)
        Invalid(
            'import torch\ndef train(model, loader, opt):\n    """One epoch."""\n    for x in loader:\n'
            "        model(x).sum().backward()\n        opt.step()\n" + _EVAL,
            'import torch\ndef train(model, loader, opt):\n    """One epoch."""\n    model.train()\n    for x in loader:\n'
            "        model(x).sum().backward()\n        opt.step()\n" + _EVAL,
        ),
        # a train() before the loop is not enough when the loop evaluates
        Invalid(
            "import torch\ndef fit(model, loader, opt):\n    model.train()\n    for epoch in range(3):\n        # epoch\n        for x in loader:\n"
            "            model(x).sum().backward()\n            opt.step()\n        evaluate(model, x)\n" + _EVAL,
            "import torch\ndef fit(model, loader, opt):\n    model.train()\n    for epoch in range(3):\n        model.train()\n        # epoch\n        for x in loader:\n"
            "            model(x).sum().backward()\n            opt.step()\n        evaluate(model, x)\n" + _EVAL,
        ),
        # inline validation in a module-level script loop
        Invalid(
            "import torch as T\nfor epoch in range(3):\n    for x in loader:\n        opt.zero_grad()\n        model(x).sum().backward()\n        opt.step()\n"
            "    model.eval()\n    with T.no_grad():\n        print(model(x))\n",
            "import torch as T\nfor epoch in range(3):\n    model.train()\n    for x in loader:\n        opt.zero_grad()\n        model(x).sum().backward()\n        opt.step()\n"
            "    model.eval()\n    with T.no_grad():\n        print(model(x))\n",
        ),
        # the evaluation happens between steps of one loop: reset the mode every step
        Invalid(
            "import torch\ndef train(model, loader, opt):\n    model.train()\n    for i, x in enumerate(loader):\n"
            "        model(x).sum().backward()\n        opt.step()\n        if i % 100 == 0:\n            evaluate(model, x)\n" + _EVAL,
            "import torch\ndef train(model, loader, opt):\n    model.train()\n    for i, x in enumerate(loader):\n        model.train()\n"
            "        model(x).sum().backward()\n        opt.step()\n        if i % 100 == 0:\n            evaluate(model, x)\n" + _EVAL,
        ),
        # a submodule frozen by hand: reported, not fixed
        Invalid(
            "import torch\ndef fit(model, loader, opt):\n    model.backbone.eval()\n    for x in loader:\n"
            "        model(x).sum().backward()\n        opt.step()\n" + _EVAL,
            None,
        ),
        # a module built here and evaluated in its own epoch loop: fixed after it exists
        Invalid(
            "import torch\ndef run(loader, x):\n    net = Net()\n    opt = torch.optim.SGD(net.parameters(), lr=0.1)\n"
            "    for epoch in range(3):\n        for xb in loader:\n            net(xb).sum().backward()\n"
            "            opt.step()\n        net.eval()\n        print(net(x))\n",
            "import torch\ndef run(loader, x):\n    net = Net()\n    opt = torch.optim.SGD(net.parameters(), lr=0.1)\n"
            "    for epoch in range(3):\n        net.train()\n        for xb in loader:\n            net(xb).sum().backward()\n"
            "            opt.step()\n        net.eval()\n        print(net(x))\n",
        ),
        # the global `net` is switched to eval and then passed to the training function: fixed
        Invalid(
            "import torch\ndef train_local(net, loader, opt):\n    for x in loader:\n        net(x).sum().backward()\n"
            "        opt.step()\n\nnet = Net()\nfor epoch in range(3):\n    train_local(net, loader, opt)\n"
            "    net.eval()\n    print(net(x))\n",
            "import torch\ndef train_local(net, loader, opt):\n    net.train()\n    for x in loader:\n"
            "        net(x).sum().backward()\n"
            "        opt.step()\n\nnet = Net()\nfor epoch in range(3):\n    train_local(net, loader, opt)\n"
            "    net.eval()\n    print(net(x))\n",
        ),
        # the same helper asked for eval mode inside the epoch loop, never restored: still fixed
        Invalid(
            "import torch\nclass Solver:\n    def fit(self, loader, epochs):\n        self.set_mode(True)\n"
            "        for epoch in range(epochs):\n            for x in loader:\n                self.net(x).sum().backward()\n"
            "                self.opt.step()\n            self.set_mode(False)\n            with torch.no_grad():\n"
            "                print(self.net(x).mean())\n\n    def set_mode(self, train):\n        if train:\n"
            "            self.net.train()\n        else:\n            self.net.eval()\n",
            "import torch\nclass Solver:\n    def fit(self, loader, epochs):\n        self.set_mode(True)\n"
            "        for epoch in range(epochs):\n            self.net.train()\n            for x in loader:\n"
            "                self.net(x).sum().backward()\n"
            "                self.opt.step()\n            self.set_mode(False)\n            with torch.no_grad():\n"
            "                print(self.net(x).mean())\n\n    def set_mode(self, train):\n        if train:\n"
            "            self.net.train()\n        else:\n            self.net.eval()\n",
        ),
    ]

    def check(self, facts):
        evaluated = leaking_evals(facts)
        if not evaluated:
            return
        for scope in [None, *facts.functions]:
            yield from self._check_scope(facts, scope, evaluated)

    def _check_scope(self, facts, scope, evaluated):
        if caller_owns_mode(facts, scope):
            return
        steps = [c for c in own_calls(facts, scope) if is_optimizer_step(c)]
        if not steps:
            return
        nested = [f for f in facts.functions if facts.function_of.get(f) is scope] if scope is not None else []
        if not (calls_backward(facts, scope) or any(calls_backward(facts, f) for f in nested)):
            return
        # `self.model` switched to eval in another class is another object.
        anchor = scope if scope is not None else facts.tree
        evaluated = {
            m: lines
            for m, nodes in evaluated.items()
            if (
                lines := [
                    n.lineno
                    for n in nodes
                    if same_object(facts, m, anchor, n)
                    and not another_functions_object(facts, scope, m, n)
                    and not other_global(facts, scope, m, n)
                    and not evaluated_after_training(facts, scope, n)
                ]
            )
        }
        uses_by_module: dict[str, list[ast.AST]] = {}
        for call in own_calls(facts, scope):
            target = forward_target(facts, call)
            if target in evaluated and facts.grad_mode_at(call) != "disabled":
                uses_by_module.setdefault(target, []).append(call)
        # Only forwards that run before an optimizer step train: a test pass after the last
        # step (a script's `net.eval()` then test loop) is evaluation, not a training step.
        last_step = max(map(pos, steps))
        # ...and only forwards inside every loop around some step: a reference forward before
        # the training loop (`before = model(x); for _ in range(3): ...; opt.step()`) trains nothing.
        step_loops = [set(map(id, own_loops_around(facts, s, scope))) for s in steps]

        def trains(use) -> bool:
            if pos(use) >= last_step:
                return False
            loops = set(map(id, own_loops_around(facts, use, scope)))
            return any(around <= loops for around in step_loops)

        uses_by_module = {m: kept for m, uses in uses_by_module.items() if (kept := [u for u in uses if trains(u)])}
        for f in nested:  # an LBFGS closure: the forward runs inside optimizer.step(closure)
            for call in own_calls(facts, f):
                target = forward_target(facts, call)
                if target in evaluated and target not in uses_by_module:
                    uses_by_module[target] = list(steps)
        optimized = optimized_modules(facts, scope, steps)
        findings: dict[tuple, list[str]] = {}
        notes: dict[tuple, tuple] = {}
        for module, uses in uses_by_module.items():
            if module_sensitivity(facts, module, uses[0]) == FREE or not_a_module(facts, module, uses[0]):
                continue  # training a mode-free module in eval mode changes nothing; a non-module has no mode
            items = mode_items(facts, scope, {module})
            built = built_here(facts, scope, module)
            if built and not any(i.kind != "train" for i in items):
                continue  # a fresh module of this function: other functions' `net` are other objects
            if self._caller_sets_mode(facts, scope, module):
                continue
            if scope is not None and mode_api(facts, scope, (module,)):
                continue  # the class's own train()/eval() methods: its users own the mode
            if switches_others_only(facts, scope, module):
                continue
            if optimized is not None and not any(related(module, o) for o in optimized):
                continue  # not trained here: the optimizers update other parameters (or an input)
            frozen = [
                s for s in own_switches(facts, scope) if s.mode == "eval" and s.receiver.startswith(module + ".")
            ]
            fresh = bool(built) and pos(built[0]) < min(map(pos, uses)) and constructed(built[0])
            fresh = fresh or (not built and entered_in_train_mode(facts, scope, module))
            plan = plan_train_insertion(facts, scope, uses, items, fresh)
            if plan.outcome in ("ok", "silent"):
                continue
            if plan.outcome == "insert" and built and pos(built[0]) >= pos(plan.target):
                plan = Plan("nofix")  # `.train()` there would run before the module exists
            plan = past_bindings(facts, scope, plan, module, uses)
            # where it shows: the first step that may run in eval mode (a notebook's first
            # training loop may be fine, a later one not)
            first = min((u for u in uses if not train_at(facts, scope, u, items, fresh)), key=pos, default=min(uses, key=pos))
            if frozen or plan.outcome == "nofix":
                key = ("nofix", module)
            else:
                key = (plan.target.lineno, plan.target.col_offset)
                notes[key] = (facts.span(plan.target), plan.in_loop is not None)
            findings.setdefault(key, []).append(module)
            notes.setdefault(("first", key), (first, frozen))
        for key, modules in findings.items():
            first, frozen = notes[("first", key)]
            where = f"`{scope.name}`" if scope is not None else "this loop"
            names = ", ".join(f"`{m}`" for m in modules)
            line = min(l for m in modules for l in evaluated[m])
            switch = next(n for m in modules for n in leaking_evals(facts).get(m, ()) if n.lineno == line)
            message = f"{where} may train {names} in eval mode: `{facts.segment(switch)}` (line {line}) is not undone before every step"
            anchors = [scope] if scope is not None else []
            if key[0] == "nofix":
                reason = f"a submodule is frozen here (line {frozen[0].call.lineno})" if frozen else "no single place for `.train()`"
                yield self.report(facts, first, message, no_fix=reason, anchors=anchors)
                continue
            span, in_loop = notes[key]
            spot = "the epoch loop's body" if in_loop else "the function"
            title = f"Insert {'; '.join(f'`{m}.train()`' for m in modules)} at the start of {spot}"
            yield self.report(facts, first, message, anchors=anchors, data=(tuple(modules), span), fix_title=title)

    @staticmethod
    def _caller_sets_mode(facts, scope, module) -> bool:
        """Every call site elsewhere in the file sets train mode right before calling ``scope``
        (one call after a script's `model.eval()` is a step in eval mode, whatever the others do)."""
        if scope is None:
            return False
        calls = training_callers(facts, scope)
        for call in calls:
            caller = facts.function_of.get(call)
            passed = {dotted_name(a) for a in [*call.args, *(k.value for k in call.keywords)]} - {None}
            names = {module} | {p for p in passed if p}
            items = mode_items(facts, caller, names)
            if not (any(i.kind == "train" for i in items) and all_train_at(facts, caller, [call], items, caller is None)):
                return False
        return bool(calls)

    def fix(self, finding, ctx):
        modules, span = finding.data
        target = statement_at(ctx, span)
        return insert_before(ctx, target, [ctx.statement(f"{m}.train()\n") for m in modules])

    @staticmethod
    def contract():
        # gradfix verify: every forward of the training function runs in training mode.
        from gradfix.verify.contract import Contract, ForwardMode

        return Contract(
            "every training step runs in training mode",
            may_differ=("*: forwards", "*: training *"),
            expect=(ForwardMode("train", "training", True),),
            downstream=True,
            keep=("*: grad mode after", "exception"),
        )
