"""GF302 eval-without-no-grad.

Also holds the "wrap these consecutive statements in ``with torch.no_grad():``" fix helper that
GF304 shares.
"""

from __future__ import annotations

import ast
from typing import Callable, Sequence

from gradfix.lazy import cst

from gradfix.facts import FileFacts, dotted_name
from gradfix.model import FixSafety, Span
from gradfix.rule import Invalid, Rule, Valid
from gradfix.rules.gf301_prefer_inference_mode import (
    feeds_training,
    is_hook_like,
    is_within,
    own_nodes,
    torch_reachable,
    uses_grads,
)


# -- shared with GF304: statement runs and the wrapping edit -------------------------------------
def statement_block(facts: FileFacts, stmt: ast.stmt) -> tuple[ast.AST, str] | None:
    """The (parent node, field) whose statement list holds ``stmt``."""
    parent = facts.parents.get(stmt)
    for field in ("body", "orelse", "finalbody"):
        body = getattr(parent, field, None)
        if isinstance(body, list) and any(s is stmt for s in body):
            return parent, field
    return None


def alone_on_its_lines(facts: FileFacts, first: ast.stmt, last: ast.stmt) -> bool:
    """No other statement shares a line with the run ``first``..``last`` (no ``;``, no
    ``if x: stmt`` one-liner), so the run can move into an indented block."""
    before = facts.line_text(first.lineno).encode("utf-8")[: first.col_offset]
    after = facts.line_text(last.end_lineno).encode("utf-8")[last.end_col_offset :].strip()
    return not before.strip() and (not after or after.startswith(b"#"))


def can_wrap(facts: FileFacts, run: Sequence[ast.stmt]) -> bool:
    """Whether ``run`` (consecutive statements of one block) can move into a ``with`` body.

    Not when it suspends (``yield``/``await``: the grad mode would leak to the consumer while
    suspended) or defines functions/classes (decorator positions differ between parsers).
    """
    if not alone_on_its_lines(facts, run[0], run[-1]):
        return False
    if any(facts.line_text(s.lineno).encode("utf-8")[: s.col_offset].strip() for s in run):
        return False
    for stmt in run:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return False
        for node in ast.walk(stmt):
            if isinstance(node, (ast.Yield, ast.YieldFrom, ast.Await)):
                return False
    return True


def wrap_in_no_grad(
    ctx,
    spans: Sequence[Span],
    transform: Callable[[cst.BaseStatement], cst.BaseStatement] | None = None,
) -> list:
    """Edits that put the consecutive statements at ``spans`` into one ``with torch.no_grad():``.

    The first statement becomes the ``with`` (keeping its leading comments and blank lines
    above the ``with``), the others are removed from their place; ``transform`` may rewrite
    each statement on the way in. Comments between the statements move with them.
    """
    from gradfix.fixer import Edit

    stmts = [ctx.node_at(span, cst.BaseStatement) for span in spans]
    body = [transform(s) if transform else s for s in stmts]
    leading = stmts[0].leading_lines
    body[0] = body[0].with_changes(leading_lines=())
    header = ctx.statement(f"with {ctx.torch_name()}.no_grad():\n    pass\n")
    wrapper = header.with_changes(body=header.body.with_changes(body=body), leading_lines=leading)
    return [Edit(stmts[0], wrapper)] + [Edit(s, cst.RemoveFromParent()) for s in stmts[1:]]


def smallest_run(facts: FileFacts, func, nodes: Sequence[ast.AST]) -> list[ast.stmt] | None:
    """The fewest consecutive statements of one block (owned by ``func``) that hold ``nodes``.

    Nodes in different blocks (an ``if`` and its ``else``) give the statement enclosing both.
    """
    paths = []
    for node in nodes:
        path = []
        current = node
        while current is not None and current is not func:
            if isinstance(current, ast.stmt):
                block = statement_block(facts, current)
                if block is None:
                    return None
                body = getattr(*block)
                path.append((block, next(i for i, s in enumerate(body) if s is current)))
            current = facts.parents.get(current)
        paths.append(list(reversed(path)))
    if not paths or not all(paths):
        return None
    level = 0
    while all(len(p) > level for p in paths) and len({(id(p[level][0][0]), p[level][0][1], p[level][1]) for p in paths}) == 1:
        level += 1
    if all(len(p) > level for p in paths) and len({(id(p[level][0][0]), p[level][0][1]) for p in paths}) == 1:
        block = paths[0][level][0]
        indexes = [p[level][1] for p in paths]
        return getattr(*block)[min(indexes) : max(indexes) + 1]
    if level == 0:
        return None
    block, index = paths[0][level - 1]
    return [getattr(*block)[index]]


def _uses_grad_checkpointing(facts: FileFacts, func) -> bool:
    """Whether ``func`` turns on gradient checkpointing (timm's ``set_grad_checkpointing()``,
    HF's ``gradient_checkpointing_enable()``, ``torch.utils.checkpoint``): a test of that code
    path needs grad mode on, or it runs a different path."""
    for node in own_nodes(func):
        if isinstance(node, ast.Call):
            callee = node.func
            last = callee.attr if isinstance(callee, ast.Attribute) else getattr(callee, "id", "")
            if "grad_checkpoint" in last or "gradient_checkpoint" in last:
                return True
            if last.startswith("checkpoint") and (facts.call_qualname(node) or "").startswith("torch.utils.checkpoint"):
                return True
    return False


_SIMPLE = (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr, ast.Assert, ast.Pass)


def _split_at_unrelated(facts: FileFacts, run: Sequence[ast.stmt], calls: Sequence[ast.Call]) -> list[list[ast.stmt]]:
    """``run`` cut into the groups of statements that each ``with`` should hold.

    Statements between the forward calls stay inside when they only post-process the
    outputs (``z = z.round()``: simple statements whose calls are methods of names bound in
    the group, or no calls at all); anything else (saving a checkpoint, building another
    model, a ``try``) is left outside, so only the forward calls and their glue run without
    grad. Leading and trailing statements without calls are dropped."""
    holds = [any(is_within(facts, c, stmt) for c in calls) for stmt in run]
    groups: list[list[ast.stmt]] = []
    current: list[ast.stmt] = []
    pending: list[ast.stmt] = []
    bound: set[str] = set()
    for stmt, has_call in zip(run, holds):
        if has_call:
            if current and pending is not None:
                current.extend(pending)
            elif current:
                groups.append(current)
                current = []
            current.append(stmt)
            pending = []
            bound |= {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
            continue
        if current and pending is not None and _is_glue(stmt, bound):
            pending.append(stmt)
            bound |= {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        else:
            pending = None
    if current:
        groups.append(current)
    return groups


def _grad_off_decorator(func) -> bool:
    """A decorator of the project's own that says it turns grad off (yolov5's
    ``@smart_inference_mode()``, a ``@no_grad_if(..)`` helper): ``FileFacts`` only knows torch's
    own, so the function may already run without grad; stay silent."""
    for decorator in func.decorator_list:
        expr = decorator.func if isinstance(decorator, ast.Call) else decorator
        last = (dotted_name(expr) or "").rpartition(".")[2].lower()
        if "inference_mode" in last or "no_grad" in last:
            return True
    return False


def _unresolved_grad_context(facts: FileFacts, func) -> bool:
    """A ``with X.no_grad():`` (or inference_mode/set_grad_enabled) that ``FileFacts`` could not
    resolve, e.g. ``torch`` bound only by ``from utils import *``: the calls may already run
    without grad, and a fix would add a second ``import torch``; stay silent."""
    for node in ast.walk(func):
        if isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                expr = item.context_expr.func if isinstance(item.context_expr, ast.Call) else item.context_expr
                last = (dotted_name(expr) or "").rpartition(".")[2]
                if last in ("no_grad", "inference_mode", "set_grad_enabled") and facts.qualname(expr) is None:
                    return True
    return False


def _fresh_bindings(func, receivers: set[str]) -> list[tuple]:
    """``(position, "bind", receiver, node)`` for each assignment in ``func`` that binds one of
    ``receivers`` to another object (``norm = Normalizer()``: a new module, in training mode).
    ``model = model.eval()`` / ``model = model.to(dev)`` return the same module: not fresh."""
    out = []
    for node in own_nodes(func):
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and node.value is not None:
            targets, value = [node.target], node.value
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.withitem)):
            targets = [node.target if not isinstance(node, ast.withitem) else node.optional_vars]
            value = None
        else:
            continue
        for target in targets:
            for element in ast.walk(target) if target is not None else ():
                name = dotted_name(element) if isinstance(element, (ast.Name, ast.Attribute)) else None
                if name not in receivers or not isinstance(getattr(element, "ctx", None), ast.Store):
                    continue
                root = value
                while isinstance(root, (ast.Call, ast.Attribute)):
                    if dotted_name(root) == name:
                        break
                    root = root.func if isinstance(root, ast.Call) else root.value
                if value is not None and root is not None and dotted_name(root) == name:
                    continue  # the same module, returned by one of its own methods
                if isinstance(value, ast.Call) and any(dotted_name(a) == name for a in value.args):
                    continue  # a wrapper of the same module: `torch.jit.script(model)`, `DataParallel(model)`
                out.append(((node.lineno, node.col_offset), "bind", name, node))
    return out


def _is_glue(stmt: ast.stmt, bound: set[str]) -> bool:
    if not isinstance(stmt, _SIMPLE):
        return False
    for node in ast.walk(stmt):
        if isinstance(node, ast.Call):
            callee = node.func
            while isinstance(callee, (ast.Attribute, ast.Subscript)):
                callee = callee.value
            if not (isinstance(node.func, ast.Attribute) and isinstance(callee, ast.Name) and callee.id in bound):
                return False
    return True


# -- the rule ---------------------------------------------------------------------------------------
class EvalWithoutNoGrad(Rule):
    """
    ## What it does
    Finds a function that puts a module in eval mode (`model.eval()`) and then calls the
    module (`model(x)`) with grad mode on, in a function that never computes gradients (no
    `.backward()`, `torch.autograd.grad`, `.requires_grad_()`, `.grad`, optimizer `.step()`).

    ## Why is this bad?
    `model.eval()` only switches dropout and batch norm to inference behaviour; it does not
    turn off autograd (pinned in `tests/facts/test_gf302_facts.py`). Every forward call still
    records a graph and keeps its activations alive until the outputs die: evaluation uses far
    more memory and time than it needs.

    ## Example
    ```python
    def evaluate(model, x):
        model.eval()
        logits = model(x)
        return logits.argmax(1)
    ```

    ## Use instead
    ```python
    def evaluate(model, x):
        model.eval()
        with torch.no_grad():
            logits = model(x)
        return logits.argmax(1)
    ```

    ## Fix safety
    Unsafe: the outputs no longer require grad and have no `grad_fn`, so a caller that
    backpropagates through what the function returns (an adversarial attack, a perceptual
    loss, a distillation step in another file) would get `element 0 of tensors does not
    require grad`. To keep that risk small the rule skips `forward`, `__call__`, hooks,
    `*_step` methods, functions with `loss` in their name, functions whose results the same
    file feeds into training, functions already called under a grad-mode region, and
    functions that turn on gradient checkpointing (a test of that path needs grads). The fix
    wraps the smallest run of consecutive statements that holds the forward calls; when they
    sit in different branches it wraps the statement that holds them all. Statements between
    the calls stay in the block only when they post-process the outputs (`z = z.round()`);
    unrelated work between them (saving a checkpoint, loading another model) splits the block
    in two, so it keeps running with grad mode on. Runs that contain
    `yield`/`await` are reported without a fix (the mode would leak while suspended). A file
    with a bare `torch.set_grad_enabled(...)` statement is skipped: the mode at the calls is
    decided at run time (GF201 reports the toggle). Functions under a decorator of the
    project's own whose name says it turns grad off (`@smart_inference_mode()`) are skipped,
    and so are calls made after the name was bound to another module (a fresh one is in
    training mode); `model = model.to(dev)` and `model = torch.jit.script(model)` keep it.
    """

    code = "GF302"
    name = "eval-without-no-grad"
    summary = "Module called in eval mode without `no_grad`: a graph is recorded for nothing"
    fix_safety = FixSafety.UNSAFE
    triggers = (".eval()",)

    VALID = [
        # `torch` comes from a star import, so the `with` is not resolved: it may already be
        # `torch.no_grad()`, and wrapping would add a second `import torch`
        Valid(
            "from helpers import *\n\ndef evaluate(model, loader):\n    model.eval()\n    hits = 0\n"
            "    with torch.no_grad():\n        for x, y in loader:\n            scores = model(x)\n"
            "            hits += (scores.argmax(1) == y).sum().item()\n    return hits\n"
        ),
        Valid(
            "import torch\ndef evaluate(model, x):\n    model.eval()\n    with torch.no_grad():\n"
            "        return model(x)\n"
        ),
        Valid("import torch\n@torch.no_grad()\ndef evaluate(model, x):\n    model.eval()\n    return model(x)\n"),
        Valid(
            "import torch\ndef evaluate(model, x):\n    model.eval()\n    return model(x)\n\n"
            "def run(model, x):\n    with torch.no_grad():\n        return evaluate(model, x)\n"
        ),
        # Saliency maps / adversarial examples use grads.
        Valid(
            "def saliency(model, x):\n    model.eval()\n    x.requires_grad_()\n"
            "    score = model(x).max()\n    score.backward()\n    return x.grad\n"
        ),
        Valid(
            "import torch\ndef fgsm(model, x, y, eps):\n    model.eval()\n    x = x.clone().requires_grad_(True)\n"
            "    loss = F.cross_entropy(model(x), y)\n    g, = torch.autograd.grad(loss, x)\n    return x + eps * g.sign()\n"
        ),
        # A frozen network in a loss module: gradients must flow through it to the input.
        Valid(
            "class PerceptualLoss(nn.Module):\n    def forward(self, x, y):\n        self.vgg.eval()\n"
            "        return F.mse_loss(self.vgg(x), self.vgg(y))\n"
        ),
        Valid("def perceptual_loss(vgg, x, y):\n    vgg.eval()\n    return (vgg(x) - vgg(y)).abs().mean()\n"),
        # Its result feeds training in the same file.
        Valid(
            "def teacher_out(teacher, x):\n    teacher.eval()\n    return teacher(x)\n\n"
            "def train(student, teacher, x, opt):\n    loss = kd(student(x), teacher_out(teacher, x))\n"
            "    loss.backward()\n    opt.step()\n"
        ),
        # A bare toggle turned grads off (GF201 handles the toggle).
        Valid(
            "import torch\ndef score(model, x):\n    model.eval()\n    torch.set_grad_enabled(False)\n"
            "    return model(x)\n"
        ),
        Valid(
            "import torch\ndef score(model, x):\n    model.eval()\n    return model(x)\n\n"
            "if __name__ == '__main__':\n    torch.set_grad_enabled(False)\n    score(None, None)\n"
        ),
        # Back in train mode before the call.
        Valid("def step(model, x):\n    model.eval()\n    model.train()\n    return model(x)\n"),
        # The call is before eval(), or on another object.
        Valid("def f(model, other, x):\n    y = model(x)\n    model.eval()\n    return other(y)\n"),
        Valid(
            "import torch\ndef f(model, x):\n    model.eval()\n    with torch.enable_grad():\n        return model(x)\n"
        ),
        # A test of gradient checkpointing (timm's test_model_forward): the path needs grads.
        Valid(
            "def test_forward(model, x):\n    model.eval()\n    out = model(x)\n    model.set_grad_checkpointing()\n"
            "    assert model(x).allclose(out)\n"
        ),
        # A project decorator that turns grad off (yolov5's `@smart_inference_mode()`).
        Valid(
            "from utils import smart_inference_mode\n@smart_inference_mode()\ndef run(model, x):\n"
            "    model.eval()\n    return model(x)\n"
        ),
        # The name is bound to a fresh module (in training mode) after `eval()`.
        Valid(
            "import torch\ndef test_norm(x):\n    norm = Normalize()\n    norm = norm.eval()\n"
            "    assert torch.jit.trace(norm, x)\n    norm = Normalize().to(x.device)\n    return norm(x)\n"
        ),
    ]
    INVALID = [
        # A scripted copy keeps the eval mode (timm's test_model_forward_torchscript).
        Invalid(
            "import torch\ndef check(model, x):\n    model.eval()\n    model = torch.jit.script(model)\n"
            "    out = model(x)\n    assert out.shape[0] == x.shape[0]\n",
            "import torch\ndef check(model, x):\n    model.eval()\n    model = torch.jit.script(model)\n"
            "    with torch.no_grad():\n        out = model(x)\n    assert out.shape[0] == x.shape[0]\n",
        ),
        # `model.to(..)` returns the same module, still in eval mode.
        Invalid(
            "import torch\ndef evaluate(model, x, dev):\n    model.eval()\n    model = model.to(dev)\n"
            "    return model(x).argmax(1)\n",
            "import torch\ndef evaluate(model, x, dev):\n    model.eval()\n    model = model.to(dev)\n"
            "    with torch.no_grad():\n        return model(x).argmax(1)\n",
        ),
        Invalid(
            "import torch\n\ndef evaluate(model, x):\n    model.eval()\n    # logits only\n"
            "    logits = model(x)\n    return logits.argmax(1)\n",
            "import torch\n\ndef evaluate(model, x):\n    model.eval()\n    # logits only\n"
            "    with torch.no_grad():\n        logits = model(x)\n    return logits.argmax(1)\n",
        ),
        Invalid(
            "import torch as T\n\ndef validate(net, loader, crit):\n    net.eval()\n    total = 0.0\n"
            "    for x, y in loader:\n        out = net(x)\n        total += crit(out, y).item()\n"
            "    return total / len(loader)\n",
            "import torch as T\n\ndef validate(net, loader, crit):\n    net.eval()\n    total = 0.0\n"
            "    for x, y in loader:\n        with T.no_grad():\n            out = net(x)\n"
            "        total += crit(out, y).item()\n    return total / len(loader)\n",
        ),
        # Two eval'd modules: one finding, one block from the first call to the last.
        Invalid(
            "def reconstruct(self, x):\n    self.encoder.eval()\n    self.decoder.eval()\n"
            "    z = self.encoder(x)\n    z = z.round()\n    return self.decoder(z)\n",
            "import torch\n\ndef reconstruct(self, x):\n    self.encoder.eval()\n    self.decoder.eval()\n"
            "    with torch.no_grad():\n        z = self.encoder(x)\n        z = z.round()\n        return self.decoder(z)\n",
        ),
        # Calls in both branches: the `if` is wrapped.
        Invalid(
            "import torch\ndef predict(model, x, tta):\n    model.eval()\n    if tta:\n"
            "        y = (model(x) + model(x.flip(-1))) / 2\n    else:\n        y = model(x)\n    return y\n",
            "import torch\ndef predict(model, x, tta):\n    model.eval()\n    with torch.no_grad():\n        if tta:\n"
            "            y = (model(x) + model(x.flip(-1))) / 2\n        else:\n            y = model(x)\n    return y\n",
        ),
        # Unrelated work between the calls (Lightning's test_restore): two blocks.
        Invalid(
            "import torch\ndef check_reload(model, batch, path):\n    model.eval()\n    before = model(batch)\n"
            "    torch.save(model.state_dict(), path)\n    model.load_state_dict(torch.load(path))\n"
            "    after = model(batch)\n    assert torch.equal(before, after)\n",
            "import torch\ndef check_reload(model, batch, path):\n    model.eval()\n    with torch.no_grad():\n"
            "        before = model(batch)\n    torch.save(model.state_dict(), path)\n    model.load_state_dict(torch.load(path))\n"
            "    with torch.no_grad():\n        after = model(batch)\n    assert torch.equal(before, after)\n",
        ),
        # `torch` is a parameter here, not the module: reported, not fixed.
        Invalid("import torch\ndef predict(model, x, torch):\n    model.eval()\n    return model(x)\n", None),
        # A generator: reported, not fixed.
        Invalid("def stream(model, xs):\n    model.eval()\n    for x in xs:\n        yield model(x)\n", None),
    ]

    def check(self, facts):
        if self._toggles_grad_globally(facts):
            return
        switches_by_func: dict = {}  # function -> [(position, "eval"/"train", receiver, call)]
        for m in facts.method_calls:
            if m.method in ("eval", "train") and m.receiver and not (m.method == "eval" and m.call.args):
                func = facts.function_of.get(m.call)
                switches_by_func.setdefault(func, []).append(((m.call.lineno, m.call.col_offset), m.method, m.receiver, m.call))
        callers = None
        for func, switches in switches_by_func.items():
            if func is None or isinstance(func, ast.Lambda) or not any(s[1] == "eval" for s in switches):
                continue
            name = func.name
            if is_hook_like(name) or "loss" in name.lower():
                continue
            if any(r.owner is func for r in facts.regions) or uses_grads(facts, func):
                continue
            if _grad_off_decorator(func) or _unresolved_grad_context(facts, func):
                continue
            events = switches + _fresh_bindings(func, {s[2] for s in switches})
            calls = self._forward_calls_in_eval_mode(facts, func, sorted(events, key=lambda s: s[0]))
            if not calls or _uses_grad_checkpointing(facts, func):
                continue
            callers = self._calls_by_name(facts) if callers is None else callers
            if any(facts.regions_around(c) for c in callers.get(name, ())) or feeds_training(facts, func):
                continue
            modules = list(dict.fromkeys(dotted_name(c.func) for c in calls))
            switch = min((s for s in switches if s[1] == "eval" and s[2] in modules), key=lambda s: s[0])[3]
            run = smallest_run(facts, func, calls)
            groups = _split_at_unrelated(facts, run, calls) if run is not None else []
            fixable = bool(groups) and all(can_wrap(facts, g) for g in groups) and torch_reachable(facts, run[0])
            names = ", ".join(f"`{m}`" for m in modules)
            yield self.report(
                facts,
                switch,
                f"{names} in eval mode but called with grad enabled: `eval()` does not disable autograd, "
                "so a graph is recorded for nothing; wrap the calls in `with torch.no_grad():`. "
                "Unsafe: the outputs no longer require grad, so callers can no longer backpropagate through them",
                fix=fixable,
                anchors=[func, calls[0]],
                data=tuple(tuple(facts.span(s) for s in g) for g in groups) if fixable else None,
            )

    @staticmethod
    def _toggles_grad_globally(facts) -> bool:
        """A bare ``torch.set_grad_enabled(...)`` statement anywhere in the file: the grad
        mode at a call is then a run-time matter (GF201's business), so stay silent."""
        for call in facts.calls:
            if isinstance(facts.parents.get(call), ast.Expr):
                if facts.call_qualname(call) in ("torch.set_grad_enabled", "torch._C._set_grad_enabled"):
                    return True
        return False

    @staticmethod
    def _calls_by_name(facts) -> dict[str, list[ast.Call]]:
        """Calls by the callee's last name (``f(..)``, ``x.f(..)``): a function some code calls
        inside a grad-mode region already runs with the mode its caller chose."""
        out: dict[str, list[ast.Call]] = {}
        for call in facts.calls:
            callee = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", None)
            if callee:
                out.setdefault(callee, []).append(call)
        return out

    @staticmethod
    def _forward_calls_in_eval_mode(facts, func, switches) -> list[ast.Call]:
        """Calls ``m(...)`` in ``func``, outside any grad region, after ``m.eval()`` with no
        ``m.train()`` nor a fresh binding of ``m`` in between (by source position).
        ``switches`` are sorted by position."""
        receivers = {s[2] for s in switches}
        found = []
        for node in own_nodes(func):
            if not isinstance(node, ast.Call):
                continue
            receiver = dotted_name(node.func)
            if receiver not in receivers:
                continue
            here = (node.lineno, node.col_offset)
            before = [s[1] for s in switches if s[2] == receiver and s[0] < here]
            if before and before[-1] == "eval" and not facts.regions_around(node):
                found.append(node)
        return sorted(found, key=lambda c: (c.lineno, c.col_offset))

    def fix(self, finding, ctx):
        if not finding.data:
            return None
        return [edit for group in finding.data for edit in wrap_in_no_grad(ctx, group)]

    @staticmethod
    def contract():
        # gradfix verify: same values, but no graph is recorded (outputs no longer require grad).
        from gradfix.verify.contract import Contract, ForwardMode, NoGraphReturned

        return Contract(
            "same values, no graph recorded",
            may_differ=("*: returned*.requires_grad", "*: forwards"),
            expect=(NoGraphReturned("eval"), ForwardMode("eval", "grad", False)),
        )
