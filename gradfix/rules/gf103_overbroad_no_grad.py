"""GF103 overbroad-no-grad."""

from __future__ import annotations

import ast

from gradfix.lazy import cst, transformer

from gradfix.analysis.gradflow import BUILTINS, Flow, analyses, short_code, tainting_with_regions
from gradfix.analysis.vocabulary import COMPUTE_METHODS, DETACHING_METHODS, VIEW_METHODS
from gradfix.facts import target_names
from gradfix.model import FixSafety
from gradfix.rule import GRAD_DISABLING, Invalid, Option, Rule, Valid


class OverbroadNoGrad(Rule):
    """
    ## What it does
    In a training function (one that calls `.backward()`), finds a grad-disabled `with`
    block whose results are the *only* source of the tensor that is `.backward()`ed: the
    trainable stage runs inside `no_grad` together with the frozen one (article §6.1).

    ```python
    with torch.no_grad():
        hidden = model.encoder(inputs)
        outputs = model.decoder(hidden)  # the decoder is meant to train
    loss = criterion(outputs, labels)
    loss.backward()
    ```

    It fires only when the loss is grad-free on every path: a value from a `no_grad` block
    that meets anything that may carry history (a module called outside the block, a
    function parameter such as `logits`) is a legitimate target, not this bug. Target
    networks (`with torch.no_grad(): target = target_net(s2)` then `crit(q, target)`),
    distillation teachers, EMA updates and metrics are therefore not reported. Labels and
    batches (loop variables over a loader, parameters named `y`, `labels`, `batch`...) and
    loss criteria (`criterion`, `nn.MSELoss()`, `F.*`) are assumed not to add history, except
    criteria that may hold parameters: built in the file from a class that is not a
    parameter-free `torch.nn` loss (`CenterLoss(...)`, `losses.ArcFaceLoss(...)`,
    `nn.AdaptiveLogSoftmaxWithLoss`), loss helpers of the file that call a model they do not
    receive (`def d_loss(real, fake): return bce(D(real), ...)`), and names that say so
    (`center_loss`, `disc_loss_fn`, `adv_criterion`). A loop over a model's outputs
    (`for logits in student(batch)`) is not a loop over data.

    The block and the backward may sit in different functions: a helper that computes the
    forward under `no_grad` and returns the output, a training loop (or a LightningModule's
    `training_step`, whose returned loss Lightning backpropagates) that calls it. The finding
    is on the block; its fix changes the helper for every caller. A backward in a `try` whose
    handler names `RuntimeError` expects the error (a tutorial showing it): not reported.

    ## Why is this bad?
    Nothing inside `no_grad` records a graph, so the loss has no `grad_fn` and
    `loss.backward()` raises `RuntimeError: element 0 of tensors does not require grad and
    does not have a grad_fn` (pinned in `tests/facts/test_gf103_facts.py`): the decoder
    never trains.

    ## Example
    ```python
    with torch.no_grad():
        hidden = model.encoder(inputs)
        outputs = model.decoder(hidden)
    ```

    ## Use instead
    ```python
    hidden = model.encoder(inputs)
    outputs = model.decoder(hidden.detach())
    ```
    or, with `style = "narrow"` (no graph is recorded for the frozen stage: less memory):
    ```python
    with torch.no_grad():
        hidden = model.encoder(inputs)
    outputs = model.decoder(hidden)
    ```

    ## Fix safety
    Unsafe: it changes behaviour on purpose — gradients now flow into the consumer stage, so
    it trains, and the RuntimeError disappears; the frozen stage still gets no gradient
    (both styles give the same gradients; pinned in the facts tests). The fix is offered only
    for the clear two-stage shape: a block of simple assignments whose first statement (the
    frozen stage) binds names that every later statement (the consumers) uses, directly or
    through each other, and where un-freezing the consumers gives the loss a `grad_fn`.
    `detach` drops the `with` and adds `.detach()` at each use of the frozen names in the
    consumers (after an attribute/subscript chain such as `out.last_hidden_state`); `narrow`
    keeps the `with` around the first statement and moves the consumers after it. A block
    holding a single statement `out = dec(enc(x))` becomes `out = dec(enc(x).detach())` in
    both styles (narrowing it would need a new name). `detach` falls back to `narrow` when a
    frozen name is also read outside the consumers (detaching there would let gradients into
    the frozen stage) or when a name unpacked from the frozen stage (`out, hidden = rnn(x)`) is
    used other than as a tensor method's receiver (it may be a tuple such as an LSTM's
    `(h, c)`, which has no `.detach()`), and `narrow` falls back to `detach` for `inference_mode` (inference
    tensors cannot be saved for backward). Other shapes are reported without a fix.
    """

    code = "GF103"
    name = "overbroad-no-grad"
    summary = "no_grad block also covers the stage that should train"
    fix_safety = FixSafety.UNSAFE
    triggers = ("backward", "training_step")
    requires = (GRAD_DISABLING,)
    options = (
        Option("style", ("detach", "narrow"), "detach: drop the block, detach the frozen output; narrow: keep no_grad on the frozen stage only"),
    )

    VALID = [
        # Evaluation: no backward.
        Valid("import torch\ndef evaluate(model, x, y, crit):\n    with torch.no_grad():\n        h = model.encoder(x)\n        out = model.decoder(h)\n    return crit(out, y)\n"),
        # Target network (DQN): the target is a label; q carries history.
        Valid(
            "import torch\ndef dqn_step(net, target_net, batch, crit, opt, gamma):\n    s, a, r, s2 = batch\n"
            "    with torch.no_grad():\n        target = r + gamma * target_net(s2).max(1).values\n"
            "    q = net(s).gather(1, a)\n    loss = crit(q, target)\n    opt.zero_grad()\n    loss.backward()\n    opt.step()\n"
        ),
        # Distillation: the teacher is frozen, the student trains.
        Valid(
            "import torch\nimport torch.nn.functional as F\ndef distill(student, teacher, x, T):\n    with torch.no_grad():\n"
            "        t_logits = teacher(x)\n    s_logits = student(x)\n    loss = F.kl_div(F.log_softmax(s_logits / T, -1), F.softmax(t_logits / T, -1))\n    loss.backward()\n"
        ),
        # EMA update and metrics inside no_grad do not feed the loss.
        Valid(
            "import torch\ndef step(model, ema, x, y, crit):\n    loss = crit(model(x), y)\n    loss.backward()\n    with torch.no_grad():\n"
            "        for pe, p in zip(ema.parameters(), model.parameters()):\n            pe.mul_(0.99).add_(p, alpha=0.01)\n        acc = (model(x).argmax(1) == y).float().mean()\n    return acc\n"
        ),
        # Frozen backbone, trainable head outside the block.
        Valid(
            "import torch\ndef step(backbone, head, x, y, crit):\n    with torch.no_grad():\n        feats = backbone(x)\n"
            "    loss = crit(head(feats), y)\n    loss.backward()\n"
        ),
        # Label smoothing under no_grad; `logits` is a parameter that may carry history.
        Valid(
            "import torch\ndef step(logits, labels, crit):\n    with torch.no_grad():\n        soft = labels * 0.9 + 0.05\n"
            "    loss = crit(logits, soft)\n    loss.backward()\n"
        ),
        # Re-assigned from a grad-enabled computation before the loss.
        Valid(
            "import torch\ndef step(model, x, y, crit):\n    with torch.no_grad():\n        out = model(x)\n    out = model(x)\n"
            "    loss = crit(out, y)\n    loss.backward()\n"
        ),
        # backward inside no_grad on a graph built before the block.
        Valid("import torch\ndef step(model, x, opt):\n    loss = model(x).sum()\n    with torch.no_grad():\n        loss.backward()\n        opt.step()\n"),
        # A conditional region and a local `torch` are not grad-disabled regions.
        Valid(
            "import torch, contextlib\ndef step(model, x, y, crit, frozen):\n    with torch.no_grad() if frozen else contextlib.nullcontext():\n"
            "        out = model(x)\n    loss = crit(out, y)\n    loss.backward()\n"
        ),
        # The toggle hack (GF202) switches grad back on inside the block.
        Valid(
            "import torch\ndef adapt(backbone, adapter, x, y, crit):\n    with torch.no_grad():\n        feats = backbone(x)\n"
            "        torch.set_grad_enabled(True)\n        loss = crit(adapter(feats), y)\n        loss.backward()\n"
            "        torch.set_grad_enabled(False)\n"
        ),
        # `w` is a parameter that may carry history: the loss may have a grad_fn.
        Valid(
            "import torch\ndef step(model, w, x):\n    with torch.no_grad():\n        h = model.enc(x)\n        out = model.dec(h)\n"
            "    loss = (out * w).sum()\n    loss.backward()\n"
        ),
        Valid("def step(torch, model, x, y, crit):\n    with torch.no_grad():\n        out = model(x)\n    loss = crit(out, y)\n    loss.backward()\n"),
        # Deep supervision: the loop runs over the student's outputs, not over a data loader
        # (the word `batch` in `student(batch)` does not make them data).
        Valid(
            "import torch\nimport torch.nn.functional as F\ndef step(student, teacher, batch, opt):\n    with torch.no_grad():\n"
            "        soft = F.softmax(teacher(batch), -1)\n    for logits in student(batch):\n"
            "        loss = F.kl_div(F.log_softmax(logits, -1), soft, reduction='batchmean')\n        loss.backward()\n"
        ),
        # A criterion with parameters (metric learning on a frozen trunk): the loss trains them.
        Valid(
            "import torch\nfrom pytorch_metric_learning import losses\nloss_func = losses.ArcFaceLoss(10, 128)\n"
            "def step(trunk, embedder, x, y, opt):\n    with torch.no_grad():\n        h = trunk(x)\n        emb = embedder(h)\n"
            "    loss = loss_func(emb, y)\n    loss.backward()\n"
        ),
        Valid(
            "import torch\nimport torch.nn as nn\nclass Probe(nn.Module):\n    def __init__(self, enc, d, n):\n        super().__init__()\n"
            "        self.enc = enc\n        self.crit = nn.AdaptiveLogSoftmaxWithLoss(d, n, cutoffs=[10])\n"
            "    def step(self, x, y):\n        with torch.no_grad():\n            h = self.enc(x)\n        self.crit(h, y).loss.backward()\n"
        ),
        # A GAN helper named like a loss that runs the (global) discriminator.
        Valid(
            "import torch\nbce = torch.nn.BCELoss()\ndef discriminator_loss(real, fake):\n"
            "    return bce(D(real), torch.ones(len(real), 1)) + bce(D(fake), torch.zeros(len(fake), 1))\n"
            "def train(gen, loader, opt_d):\n    for real, _ in loader:\n        with torch.no_grad():\n"
            "            fake = gen(torch.randn(len(real), 8))\n        loss_d = discriminator_loss(real, fake)\n        loss_d.backward()\n"
        ),
    ]
    INVALID = [
        Invalid(
            "import torch\ndef train(model, loader, criterion, optimizer):\n    for inputs, labels in loader:\n"
            "        with torch.no_grad():  # frozen encoder\n            hidden = model.encoder(inputs)\n"
            "            outputs = model.decoder(hidden)\n        loss = criterion(outputs, labels)\n        loss.backward()\n",
            "import torch\ndef train(model, loader, criterion, optimizer):\n    for inputs, labels in loader:\n"
            "        # frozen encoder\n        hidden = model.encoder(inputs)\n"
            "        outputs = model.decoder(hidden.detach())\n        loss = criterion(outputs, labels)\n        loss.backward()\n",
        ),
        Invalid(
            "import torch as T\ndef train(model, loader, criterion):\n    for inputs, labels in loader:\n"
            "        with T.no_grad():\n            hidden = model.encoder(inputs)\n"
            "            outputs = model.decoder(hidden)\n        loss = criterion(outputs, labels)\n        loss.backward()\n",
            "import torch as T\ndef train(model, loader, criterion):\n    for inputs, labels in loader:\n"
            "        with T.no_grad():\n            hidden = model.encoder(inputs)\n"
            "        outputs = model.decoder(hidden)\n        loss = criterion(outputs, labels)\n        loss.backward()\n",
            options={"style": "narrow"},
        ),
        Invalid(
            "from torch import no_grad\ndef step(enc, dec, x, y, crit):\n    with no_grad():\n        out = dec(enc(x))\n"
            "    crit(out, y).backward()\n",
            "def step(enc, dec, x, y, crit):\n    out = dec(enc(x).detach())\n    crit(out, y).backward()\n",
        ),
        # `detach` falls back to `narrow`: `h` is read after the block (detaching there would let
        # gradients into the encoder).
        Invalid(
            "import torch\ndef step(model, x, y, crit):\n    with torch.no_grad():\n        h = model.enc(x)\n        out = model.dec(h)\n"
            "    loss = crit(out, y)\n    loss.backward()\n    return h.norm()\n",
            "import torch\ndef step(model, x, y, crit):\n    with torch.no_grad():\n        h = model.enc(x)\n    out = model.dec(h)\n"
            "    loss = crit(out, y)\n    loss.backward()\n    return h.norm()\n",
        ),
        # `narrow` falls back to `detach` for inference_mode (inference tensors cannot be saved
        # for backward); uses whose result carries no history (`h.size(0)`) get no `.detach()`.
        Invalid(
            "import torch\ndef step(model, x, y, crit):\n    with torch.inference_mode():\n        h, c = model.enc(x)\n"
            "        out = model.dec(h.mean(1), c[0].float(), n=h.size(0))\n    crit(out, y).backward()\n",
            "import torch\ndef step(model, x, y, crit):\n    h, c = model.enc(x)\n"
            "    out = model.dec(h.detach().mean(1), c[0].detach().float(), n=h.size(0))\n    crit(out, y).backward()\n",
            options={"style": "narrow"},
        ),
        # `hidden` is unpacked from the encoder's result and passed on as is: it may be an LSTM's
        # `(h, c)` tuple, which has no `.detach()`, so `detach` falls back to `narrow` ...
        Invalid(
            "import torch\ndef train(encoder, decoder, loader, crit):\n    for src, tgt, y in loader:\n        with torch.no_grad():\n"
            "            enc_out, hidden = encoder(src)\n            logits = decoder(tgt, hidden, enc_out)\n"
            "        crit(logits, y).backward()\n",
            "import torch\ndef train(encoder, decoder, loader, crit):\n    for src, tgt, y in loader:\n        with torch.no_grad():\n"
            "            enc_out, hidden = encoder(src)\n        logits = decoder(tgt, hidden, enc_out)\n"
            "        crit(logits, y).backward()\n",
        ),
        # ... and for inference_mode, where `narrow` is not possible, there is no fix.
        Invalid(
            "import torch\ndef train(encoder, decoder, src, tgt, y, crit):\n    with torch.inference_mode():\n"
            "        enc_out, hidden = encoder(src)\n        logits = decoder(tgt, hidden)\n    crit(logits, y).backward()\n",
            None,
        ),
        # The only call inside is one stage fed by made-up data (a generator under no_grad in
        # a discriminator step): no frozen stage to detach, reported without a fix.
        Invalid(
            "import torch\ndef d_step(gen, images, crit):\n    with torch.no_grad():\n"
            "        fake = gen(torch.randn(images.size(0), 64))\n    crit(fake, images).backward()\n",
            None,
        ),
        # The whole step is inside no_grad: no clear frozen stage, reported without a fix.
        Invalid(
            "import torch\ndef step(model, x, y, crit, opt):\n    with torch.autograd.grad_mode.no_grad():\n        out = model(x)\n"
            "        loss = crit(out, y)\n        loss.backward()\n        opt.step()\n",
            None,
        ),
        # A parameter-free torch criterion built in the file; a loss helper that only uses torch.
        Invalid(
            "import torch\nimport torch.nn as nn\ncriterion = nn.CrossEntropyLoss()\ndef smooth_loss(out, y):\n"
            "    return criterion(out, y) + 0.1 * torch.logsumexp(out, 1).mean()\n"
            "def step(enc, dec, loader):\n    for x, y in loader:\n        with torch.no_grad():\n"
            "            out = dec(enc(x))\n        smooth_loss(out, y).backward()\n",
            "import torch\nimport torch.nn as nn\ncriterion = nn.CrossEntropyLoss()\ndef smooth_loss(out, y):\n"
            "    return criterion(out, y) + 0.1 * torch.logsumexp(out, 1).mean()\n"
            "def step(enc, dec, loader):\n    for x, y in loader:\n        out = dec(enc(x).detach())\n"
            "        smooth_loss(out, y).backward()\n",
        ),
        Invalid(
            "import torch\ndef step(model, batch, crit):\n    x, y = batch\n    with torch.set_grad_enabled(False):\n"
            "        h = model.encoder(x)\n        h = model.pool(h)\n        out = model.decoder(h)\n    crit(out, y).backward()\n",
            None,
        ),
    ]

    # -- detection --------------------------------------------------------------------------
    def check(self, facts):
        # One finding per block, wherever the backward that it feeds runs (this function or a
        # caller: the forward in one function and the backward in another).
        by_region: dict = {}
        for analysis in analyses(facts):
            for site in analysis.sites:
                if site.kind == "backward":
                    for region in tainting_with_regions(facts, site):
                        by_region.setdefault(region.owner, (region, []))[1].append(site)
        for region, sites in sorted(by_region.values(), key=lambda rs: rs[0].owner.lineno):
            plan = self._plan(facts, facts.enclosing_function(region.owner), region, sites)
            yield self.report(
                facts,
                region.owner,
                self._message(facts, region, sites),
                fix=plan is not None,
                anchors=[region.owner, *(s.stmt for s in sites if s.stmt.lineno != region.owner.lineno)],
                data=plan,
                fix_title=self._fix_title(plan),
            )

    def _message(self, facts, region, sites) -> str:
        site = sites[0]
        tensor = short_code(facts, site.tensor, 30)
        where = f"line {site.origin.call.lineno}"
        return f"`{tensor}`, backpropagated at {where}, is computed only from this block: no grad_fn, backward raises RuntimeError"

    @staticmethod
    def _fix_title(plan) -> str | None:
        if plan is None:
            return None
        if plan[0] == "single":
            return "Drop the block and detach the inner call's result"
        first, last = plan[2], plan[3]
        lines = f"line {first}" if first == last else f"lines {first}-{last}"
        if plan[0] == "narrow":
            return f"Keep no_grad around the frozen stage only; move {lines} out"
        frozen = ", ".join(f"`{n}`" for n in plan[4])
        return f"Drop the block; detach {frozen} where {lines} read it"

    def _plan(self, facts, func, region, sites):
        """What the fix does (picklable), or None when the shape is not clear."""
        owner = region.owner
        if not isinstance(owner, ast.With) or len(owner.items) != 1 or owner.items[0].optional_vars is not None:
            return None
        body = owner.body
        previous_end = owner.lineno
        for stmt in body:
            if not isinstance(stmt, ast.Assign) or stmt.lineno <= previous_end:
                return None  # compound statements, bare calls, `;`-joined or same-line bodies
            if not all(_plain_target(t) for t in stmt.targets):
                return None
            previous_end = stmt.end_lineno
        calls = {id(s.call) for s in sites}

        def fixes_the_loss(detached) -> bool:
            after = analyses(facts, Flow(facts, ignore={owner}, detached=detached))
            return all(s.status is None for a in after for s in a.sites if id(s.call) in calls)

        drop_import = _import_of(facts, region)
        if len(body) == 1:
            value = body[0].value
            if not isinstance(value, ast.Call):
                return None
            inner = [a for a in (*value.args, *(k.value for k in value.keywords)) if isinstance(a, ast.Call)]
            if len(inner) != 1 or not _stage_call(facts, inner[0]) or not fixes_the_loss([inner[0]]):
                return None  # `gen(torch.randn(n, z))`: the inner call makes data, it is no frozen stage
            return ("single", (facts.span(inner[0]),), drop_import)

        first, consumers = body[0], body[1:]
        if len(first.targets) != 1:
            return None
        frozen = set(target_names(first.targets[0]))
        derived = set(frozen)
        uses: list[ast.AST] = []
        for stmt in consumers:
            bound = _bound_names(stmt)
            if frozen & bound or not (_loads(stmt) & derived):
                return None  # rebinds a frozen name, or does not consume the frozen stage
            derived |= bound
            for node in ast.walk(stmt):
                if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in frozen:
                    wrap = _detach_point(facts, node)
                    if wrap is None:
                        return None
                    if wrap is not _NO_HISTORY:
                        uses.append(wrap)
        if not fixes_the_loss([first]):
            return None
        style = self.opts["style"]
        # `enc_out, hidden = lstm_encoder(src)`: an unpacked element may itself be a tuple (an
        # LSTM's `(h, c)`), and `hidden.detach()` would raise AttributeError. Only a use that is
        # already a tensor method's receiver (`hidden.mean(1)`) proves a tensor there.
        unpacked = isinstance(first.targets[0], (ast.Tuple, ast.List))
        detach_ok = not _read_elsewhere(facts, func, frozen, consumers) and not (
            unpacked and any(not _method_receiver(facts, u) for u in uses)
        )
        narrow_ok = region.api != "torch.inference_mode"
        if style == "narrow" and not narrow_ok:
            style = "detach"
        elif style == "detach" and not detach_ok:
            style = "narrow"
        if (style == "detach" and not detach_ok) or (style == "narrow" and not narrow_ok):
            return None
        lines = (consumers[0].lineno, consumers[-1].end_lineno, tuple(sorted(frozen)))
        if style == "narrow":
            return ("narrow", (), *lines)
        return ("detach", tuple(facts.span(u) for u in uses), *lines, drop_import)

    # -- fix ----------------------------------------------------------------------------------
    def fix(self, finding, ctx):
        from gradfix.fixer import Edit, FixError

        plan = finding.data
        if not plan:
            return None
        kind = plan[0]
        with_node = ctx.node_at(finding.span, cst.With)
        block = with_node.body
        if not isinstance(block, cst.IndentedBlock):
            raise FixError("the block is not an indented block")
        if any(line.comment is not None for line in block.footer):
            raise FixError("a comment ends the block; cannot tell where it belongs")
        statements = list(block.body)
        if kind == "narrow":
            narrowed = with_node.with_changes(body=block.with_changes(body=statements[:1]))
            return [Edit(with_node, cst.FlattenSentinel([narrowed, *statements[1:]]))]
        targets = {ctx.node_at(span, cst.BaseExpression) for span in plan[1]}
        detacher = transformer(_Detach)(targets)
        statements = [s.visit(detacher) for s in statements]
        if detacher.done != len(targets):
            raise FixError("could not place every .detach()")
        carried = list(with_node.leading_lines)
        if block.header.comment is not None:
            carried.append(cst.EmptyLine(indent=True, comment=block.header.comment))
        statements[0] = statements[0].with_changes(leading_lines=[*carried, *statements[0].leading_lines])
        drop_import = plan[-1]
        if drop_import:
            ctx.remove_import_if_unused(*drop_import)
        return [Edit(with_node, cst.FlattenSentinel(statements))]

    @staticmethod
    def contract():
        # gradfix verify (both styles): if the original raised the no-grad RuntimeError it is
        # gone; the trainable stage gets gradients, the frozen stage none and stays unchanged.
        from gradfix.verify.contract import Contract, ExceptionFixed, Grads, Unchanged

        return Contract(
            "trainable stage now learns, frozen stage stays frozen",
            may_differ=("exception", "*: forwards", "*: returned*"),
            expect=(
                ExceptionFixed("RuntimeError", "does not require grad", required=False),
                Grads("trainable", True),
                Grads("frozen", False),
                Unchanged("frozen"),
            ),
            downstream=True,
            # `keep` patterns cannot be used here: the original raises in the first call, so the
            # calls after it are "not observed" before and always differ.
            keep=(),
        )


class _Detach:  # a cst.CSTTransformer through lazy.transformer
    def __init__(self, targets):
        super().__init__()
        self.targets = targets
        self.done = 0

    def on_leave(self, original_node, updated_node):
        if original_node in self.targets:
            self.done += 1
            return cst.Call(func=cst.Attribute(value=updated_node, attr=cst.Name("detach")))
        return updated_node


def _stage_call(facts, call: ast.Call) -> bool:
    """A call that may run a model stage (``enc(x)``, ``model.encoder(x)``), not a torch
    function, a tensor method or a builtin."""
    func = call.func
    if not isinstance(func, (ast.Name, ast.Attribute)):
        return False
    qual = facts.qualname(func)
    if qual is not None and (qual.startswith("torch.") or qual.startswith("builtins.")):
        return False
    if isinstance(func, ast.Name):
        return func.id not in BUILTINS
    return func.attr not in VIEW_METHODS | COMPUTE_METHODS | DETACHING_METHODS


def _plain_target(target: ast.AST) -> bool:
    if isinstance(target, ast.Name):
        return True
    return isinstance(target, (ast.Tuple, ast.List)) and all(isinstance(e, ast.Name) for e in target.elts)


def _bound_names(stmt: ast.stmt) -> set[str]:
    if isinstance(stmt, ast.Assign):
        return {n for t in stmt.targets for n in target_names(t)}
    return set()


def _loads(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


_NO_HISTORY = ast.Pass()  # a use whose result carries no history anyway (``hidden.size(0)``)


def _detach_point(facts, name: ast.Name) -> ast.AST | None:
    """Where ``.detach()`` goes for this use: after ``name.attr``/``name[i]`` chains, before a method call.

    None: the use cannot take a ``.detach()``; ``_NO_HISTORY``: it needs none.
    """
    node = name
    while True:
        parent = facts.parents.get(node)
        if isinstance(parent, ast.Subscript) and parent.value is node:
            node = parent
        elif isinstance(parent, ast.Attribute) and parent.value is node:
            grand = facts.parents.get(parent)
            if isinstance(grand, ast.Call) and grand.func is parent:
                if parent.attr in DETACHING_METHODS:
                    return _NO_HISTORY
                return node  # `hidden.mean(1)` -> `hidden.detach().mean(1)`
            node = parent
        elif isinstance(parent, ast.Starred):
            return None  # `*hidden` unpacks a container: no tensor to detach
        else:
            return node


def _method_receiver(facts, node: ast.AST) -> bool:
    """``node`` is the receiver of a method call (``node.mean(1)``)."""
    parent = facts.parents.get(node)
    grand = facts.parents.get(parent)
    return isinstance(parent, ast.Attribute) and isinstance(grand, ast.Call) and grand.func is parent


def _read_elsewhere(facts, func, names: set[str], consumers: list[ast.stmt]) -> bool:
    inside = {id(n) for stmt in consumers for n in ast.walk(stmt)}
    root = facts.tree if func is None else func
    return any(
        isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id in names and id(n) not in inside
        for n in ast.walk(root)
    )


def _import_of(facts, region) -> tuple[str, str] | None:
    """``("torch", "no_grad")`` when the block's manager is a from-imported name (may become unused)."""
    expr = region.expr.func if isinstance(region.expr, ast.Call) else region.expr
    if not isinstance(expr, ast.Name):
        return None
    target = facts.resolve_name(expr.id, expr)
    if not target or "." not in target:
        return None
    module, _, name = target.rpartition(".")
    return (module, name) if name == expr.id else None
