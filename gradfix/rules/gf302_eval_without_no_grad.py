"""GF302 eval-without-no-grad."""

from __future__ import annotations

import ast
from typing import Sequence

from gradfix.lazy import cst

from gradfix.analysis.grad_use import feeds_training, is_hook_like, runs_own_forward, uses_grads
from gradfix.analysis.insertion import plan_no_grad
from gradfix.analysis.module_mode import evaluated_at, switches as mode_switches
from gradfix.analysis.regions import records_no_graph, tensor_function
from gradfix.analysis.toggles import toggles_grad_globally
from gradfix.analysis.statements import (
    can_wrap,
    decorate_with_no_grad,
    innermost_loop,
    is_within,
    own_nodes,
    smallest_run,
    torch_reachable,
    wrap_in_no_grad,
)
from gradfix.analysis.vocabulary import forward_callee, frozen_at, returned_closure
from gradfix.facts import FileFacts, dotted_name
from gradfix.model import FixSafety
from gradfix.rule import EVAL_CALL, Invalid, Rule, Valid


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
    outputs (``z = z.round()``, ``prompts = torch.cat((prompts, z))``: simple statements whose
    calls are methods of names bound in the group or torch's tensor functions, or no calls at
    all); anything else (saving a checkpoint, building another
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
        if current and pending is not None and _is_glue(facts, stmt, bound):
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


def _sets_up(stmt: ast.stmt) -> bool:
    """A statement that may run under the decorator as well: ``model.eval()``, a docstring, or an
    assignment that calls nothing (``total = 0.0``)."""
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
        func = stmt.value.func
        return isinstance(func, ast.Attribute) and func.attr in ("eval", "train")
    if isinstance(stmt, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
        return not any(isinstance(n, (ast.Call, ast.Yield, ast.YieldFrom, ast.Await, ast.NamedExpr)) for n in ast.walk(stmt))
    return False


def _is_glue(facts: FileFacts, stmt: ast.stmt, bound: set[str]) -> bool:
    if not isinstance(stmt, _SIMPLE):
        return False
    for node in ast.walk(stmt):
        if isinstance(node, ast.Call):
            if tensor_function(facts.qualname(node.func) or ""):
                continue
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
    Finds a function that puts a module in eval mode (`model.eval()`, `model.to(dev).eval()`)
    and then runs its forward (`model(x)`, `model.forward(x)`, or a call of a chain of methods
    that return the module itself: `model.to(dev)(x)`, `model.float()(x)`, `model.eval()(x)`)
    with grad mode on, in a function that never computes gradients (no `.backward()`,
    `torch.autograd.grad`, `.requires_grad_()`, `.grad`, optimizer `.step()`). A `.train()`
    anywhere in that chain (`model.train().to(dev)(x)`) puts it back in train mode first.

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
    @torch.no_grad()
    def evaluate(model, x):
        model.eval()
        logits = model(x)
        return logits.argmax(1)
    ```
    or, when the function does more than evaluate, one `with torch.no_grad():` around the
    loop (or the statements) that holds the forward calls.

    ## Fix safety
    Unsafe: the outputs no longer require grad and have no `grad_fn`, so a caller that
    backpropagates through what the function returns (an adversarial attack, a perceptual
    loss, a distillation step in another file) would get `element 0 of tensors does not
    require grad`. To keep that risk small the rule skips `forward`, `__call__`, hooks,
    `*_step` methods, a method that runs its own module's forward and returns its output with
    the graph (`def posterior(self, X): self.eval(); return Posterior(self(X))`, one more
    forward whose caller differentiates it; not `return self(x).data`), a function its
    enclosing function returns (`get_model_fn(model)` hands back `model_fn`, a stand-in for the forward whose
    caller may differentiate it), functions with `loss` in their name, functions whose results the same
    file feeds into training, functions already called under a grad-mode region, and
    functions that turn on gradient checkpointing (a test of that path needs grads). The fix
    decorates the function with `@torch.no_grad()` when only set-up statements (`model.eval()`,
    assignments that call nothing) and a final `return` would stay outside the block (the
    decorator goes closest to the `def`, under `@staticmethod`). Otherwise it writes one
    `with torch.no_grad():` around the innermost loop that holds the forward calls, never one
    per statement inside a loop; outside loops, around the smallest run of consecutive
    statements that holds them (the statement that holds them all when they sit in different
    branches). Statements between the calls stay in the block only when they post-process the
    outputs (`z = z.round()`) or only log (`print(..)`, a logger call: two loops with a `print`
    between share one `with`); unrelated work between them (saving a checkpoint, loading another
    model) splits the block in two, so it keeps running with grad mode on. The placement is the
    one GF304 uses (`gradfix/analysis/insertion.py`). A block that would hold a lone `with`
    statement, or the whole body of one, becomes that statement's first item instead: `with
    torch.no_grad(), gpytorch.settings.fast_pred_var():`, as one writes it by hand. Runs that contain
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
    triggers = ("eval",)
    requires = ((EVAL_CALL,),)

    VALID = [
        # a GP model's `posterior` runs its own forward in eval mode and hands back what
        # acquisition functions differentiate: one more forward, its caller's grad mode
        Valid(
            """
            import torch
            class GP(ExactGP):
                def posterior(self, X):
                    self.eval()
                    mvn = self(X)
                    return Posterior(self.likelihood(mvn, X))
            """
        ),
        # `torch` comes from a star import, so the `with` is not resolved: it may already be
        # `torch.no_grad()`, and wrapping would add a second `import torch`
        Valid(
            """
            from helpers import *

            def evaluate(model, loader):
                model.eval()
                hits = 0
                with torch.no_grad():
                    for x, y in loader:
                        scores = model(x)
                        hits += (scores.argmax(1) == y).sum().item()
                return hits
            """
        ),
        Valid(
            """
            import torch
            def evaluate(model, x):
                model.eval()
                with torch.no_grad():
                    return model(x)
            """
        ),
        Valid(
            """
            import torch
            @torch.no_grad()
            def evaluate(model, x):
                model.eval()
                return model(x)
            """
        ),
        Valid(
            """
            import torch
            def evaluate(model, x):
                model.eval()
                return model(x)

            def run(model, x):
                with torch.no_grad():
                    return evaluate(model, x)
            """
        ),
        # Saliency maps / adversarial examples use grads.
        Valid(
            """
            def saliency(model, x):
                model.eval()
                x.requires_grad_()
                score = model(x).max()
                score.backward()
                return x.grad
            """
        ),
        Valid(
            """
            import torch
            def fgsm(model, x, y, eps):
                model.eval()
                x = x.clone().requires_grad_(True)
                loss = F.cross_entropy(model(x), y)
                g, = torch.autograd.grad(loss, x)
                return x + eps * g.sign()
            """
        ),
        # A module whose every parameter is frozen records no graph for a plain input (and one
        # that requires grad, as an attack's, needs it).
        Valid(
            """
            import torch
            from torchvision.models import resnet50

            model = resnet50(pretrained=True)
            for param in model.parameters():
                param.requires_grad = False

            def predict(image):
                model.eval()
                return model(image).softmax(-1)
            """
        ),
        # A frozen network in a loss module: gradients must flow through it to the input.
        Valid(
            """
            class PerceptualLoss(nn.Module):
                def forward(self, x, y):
                    self.vgg.eval()
                    return F.mse_loss(self.vgg(x), self.vgg(y))
            """
        ),
        Valid(
            """
            def perceptual_loss(vgg, x, y):
                vgg.eval()
                return (vgg(x) - vgg(y)).abs().mean()
            """
        ),
        # Its result feeds training in the same file.
        Valid(
            """
            def teacher_out(teacher, x):
                teacher.eval()
                return teacher(x)

            def train(student, teacher, x, opt):
                loss = kd(student(x), teacher_out(teacher, x))
                loss.backward()
                opt.step()
            """
        ),
        # A bare toggle turned grads off (GF201 handles the toggle).
        Valid(
            """
            import torch
            def score(model, x):
                model.eval()
                torch.set_grad_enabled(False)
                return model(x)
            """
        ),
        Valid(
            """
            import torch
            def score(model, x):
                model.eval()
                return model(x)

            if __name__ == '__main__':
                torch.set_grad_enabled(False)
                score(None, None)
            """
        ),
        # Back in train mode before the call.
        Valid(
            """
            def step(model, x):
                model.eval()
                model.train()
                return model(x)
            """
        ),
        # The call is before eval(), or on another object.
        Valid(
            """
            def f(model, other, x):
                y = model(x)
                model.eval()
                return other(y)
            """
        ),
        Valid(
            """
            import torch
            def f(model, x):
                model.eval()
                with torch.enable_grad():
                    return model(x)
            """
        ),
        # A test of gradient checkpointing (timm's test_model_forward): the path needs grads.
        Valid(
            """
            def test_forward(model, x):
                model.eval()
                out = model(x)
                model.set_grad_checkpointing()
                assert model(x).allclose(out)
            """
        ),
        # `torch.utils.checkpoint` called by its bare name: the same test, the same need.
        Valid(
            """
            import torch
            from torch.utils.checkpoint import checkpoint
            def test_checkpointed(model, x):
                model.eval()
                out = model(x)
                assert torch.allclose(checkpoint(model, x, use_reentrant=False), out)
            """
        ),
        # A project decorator that turns grad off (yolov5's `@smart_inference_mode()`).
        Valid(
            """
            from utils import smart_inference_mode
            @smart_inference_mode()
            def run(model, x):
                model.eval()
                return model(x)
            """
        ),
        # The name is bound to a fresh module (in training mode) after `eval()`.
        Valid(
            """
            import torch
            def test_norm(x):
                norm = Normalize()
                norm = norm.eval()
                assert torch.jit.trace(norm, x)
                norm = Normalize().to(x.device)
                return norm(x)
            """
        ),
        # `.train()` in the callee chain runs before the forward: back in train mode.
        Valid(
            """
            def step(model, x, dev):
                model.eval()
                return model.train().to(dev)(x)
            """
        ),
        # Another module called through `.to(dev)`; `x.to(dev)` moves a tensor, no forward.
        Valid(
            """
            def embed(model, head, x, dev):
                model.eval()
                x = x.to(dev)
                return head.to(dev)(x)
            """
        ),
    ]
    INVALID = [
        # A `freeze(model)` helper's parameter is another object than this function's `model`.
        Invalid(
            """
            import torch

            def freeze(model):
                for p in model.parameters():
                    p.requires_grad = False

            def features(model, loader):
                model.eval()
                return [model(x) for x, _ in loader]
            """,
            """
            import torch

            def freeze(model):
                for p in model.parameters():
                    p.requires_grad = False

            @torch.no_grad()
            def features(model, loader):
                model.eval()
                return [model(x) for x, _ in loader]
            """,
        ),
        # A backbone frozen only in part (the head trains) still records a graph.
        Invalid(
            """
            import torch
            from torchvision.models import resnet50

            model = resnet50(pretrained=True)
            for name, p in model.named_parameters():
                if not name.startswith("fc"):
                    p.requires_grad = False

            def predict(image):
                model.eval()
                return model(image).softmax(-1)
            """,
            """
            import torch
            from torchvision.models import resnet50

            model = resnet50(pretrained=True)
            for name, p in model.named_parameters():
                if not name.startswith("fc"):
                    p.requires_grad = False

            @torch.no_grad()
            def predict(image):
                model.eval()
                return model(image).softmax(-1)
            """,
        ),
        # `model.forward(x)` is a forward call as `model(x)` is.
        Invalid(
            """
            import torch as T

            def features(model, x):
                model.eval()
                return model.forward(x).flatten(1)
            """,
            """
            import torch as T

            @T.no_grad()
            def features(model, x):
                model.eval()
                return model.forward(x).flatten(1)
            """,
        ),
        # A call of a method chain that returns the module (`.to()`, `.float()`): its forward.
        Invalid(
            """
            import torch
            def score(lstm, batches, device, log):
                lstm.eval()
                outs = []
                for x in batches:
                    outs.append(lstm.to(device).float()(x))
                log.write("scored")
                return outs
            """,
            """
            import torch
            def score(lstm, batches, device, log):
                lstm.eval()
                outs = []
                with torch.no_grad():
                    for x in batches:
                        outs.append(lstm.to(device).float()(x))
                log.write("scored")
                return outs
            """,
        ),
        # `model.eval()(x)` switches, then calls; `net.cuda().eval()` switches `net`.
        Invalid(
            """
            import torch
            def compare(model, net, x):
                net.cuda().eval()
                a = model.eval()(x)
                b = net(x.cuda())
                return a, b
            """,
            """
            import torch
            @torch.no_grad()
            def compare(model, net, x):
                net.cuda().eval()
                a = model.eval()(x)
                b = net(x.cuda())
                return a, b
            """,
        ),
        # A scripted copy keeps the eval mode (timm's test_model_forward_torchscript).
        Invalid(
            """
            import torch
            def check(model, x):
                model.eval()
                model = torch.jit.script(model)
                out = model(x)
                assert out.shape[0] == x.shape[0]
            """,
            """
            import torch
            def check(model, x):
                model.eval()
                model = torch.jit.script(model)
                with torch.no_grad():
                    out = model(x)
                assert out.shape[0] == x.shape[0]
            """,
        ),
        # `model.to(..)` returns the same module, still in eval mode.
        Invalid(
            """
            import torch
            def evaluate(model, x, dev):
                model.eval()
                model = model.to(dev)
                return model(x).argmax(1)
            """,
            """
            import torch
            def evaluate(model, x, dev):
                model.eval()
                model = model.to(dev)
                with torch.no_grad():
                    return model(x).argmax(1)
            """,
        ),
        Invalid(
            """
            import torch

            def evaluate(model, x):
                model.eval()
                # logits only
                logits = model(x)
                return logits.argmax(1)
            """,
            """
            import torch

            @torch.no_grad()
            def evaluate(model, x):
                model.eval()
                # logits only
                logits = model(x)
                return logits.argmax(1)
            """,
        ),
        Invalid(
            """
            import torch as T

            def validate(net, loader, crit):
                net.eval()
                total = 0.0
                for x, y in loader:
                    out = net(x)
                    total += crit(out, y).item()
                return total / len(loader)
            """,
            """
            import torch as T

            @T.no_grad()
            def validate(net, loader, crit):
                net.eval()
                total = 0.0
                for x, y in loader:
                    out = net(x)
                    total += crit(out, y).item()
                return total / len(loader)
            """,
        ),
        # Two eval'd modules: one finding, one block from the first call to the last.
        Invalid(
            """
            def reconstruct(self, x):
                self.encoder.eval()
                self.decoder.eval()
                z = self.encoder(x)
                z = z.round()
                return self.decoder(z)
            """,
            """
            import torch

            @torch.no_grad()
            def reconstruct(self, x):
                self.encoder.eval()
                self.decoder.eval()
                z = self.encoder(x)
                z = z.round()
                return self.decoder(z)
            """,
        ),
        # Calls in both branches: the `if` is wrapped.
        Invalid(
            """
            import torch
            def predict(model, x, tta):
                model.eval()
                if tta:
                    y = (model(x) + model(x.flip(-1))) / 2
                else:
                    y = model(x)
                return y
            """,
            """
            import torch
            @torch.no_grad()
            def predict(model, x, tta):
                model.eval()
                if tta:
                    y = (model(x) + model(x.flip(-1))) / 2
                else:
                    y = model(x)
                return y
            """,
        ),
        # Calls in nested loops with work after them: one `with` around the outer loop (entered
        # once), not one per statement or per epoch.
        Invalid(
            """
            import torch
            def validate(net, loader, log):
                net.eval()
                hits = []
                for epoch in range(2):
                    for x, y in loader:
                        out = net(x)
                        hits.append((out.argmax(1) == y).sum().item())
                log.write(str(sum(hits)))
                return hits
            """,
            """
            import torch
            def validate(net, loader, log):
                net.eval()
                hits = []
                with torch.no_grad():
                    for epoch in range(2):
                        for x, y in loader:
                            out = net(x)
                            hits.append((out.argmax(1) == y).sum().item())
                log.write(str(sum(hits)))
                return hits
            """,
        ),
        # Two loops with only logging between them: one `with` around both.
        Invalid(
            """
            import torch
            def compare(model, val, test, log):
                model.eval()
                for x in val:
                    log.append(model(x))
                print("val done")
                for x in test:
                    log.append(model(x))
                log.flush()
            """,
            """
            import torch
            def compare(model, val, test, log):
                model.eval()
                with torch.no_grad():
                    for x in val:
                        log.append(model(x))
                    print("val done")
                    for x in test:
                        log.append(model(x))
                log.flush()
            """,
        ),
        # The decorator goes under `@staticmethod`, closest to the `def`.
        Invalid(
            """
            import torch
            class Tester:
                @staticmethod
                def score(model, x):
                    model.eval()
                    return model(x)
            """,
            """
            import torch
            class Tester:
                @staticmethod
                @torch.no_grad()
                def score(model, x):
                    model.eval()
                    return model(x)
            """,
        ),
        # Unrelated work between the calls (Lightning's test_restore): two blocks.
        Invalid(
            """
            import torch
            def check_reload(model, batch, path):
                model.eval()
                before = model(batch)
                torch.save(model.state_dict(), path)
                model.load_state_dict(torch.load(path))
                after = model(batch)
                assert torch.equal(before, after)
            """,
            """
            import torch
            def check_reload(model, batch, path):
                model.eval()
                with torch.no_grad():
                    before = model(batch)
                torch.save(model.state_dict(), path)
                model.load_state_dict(torch.load(path))
                with torch.no_grad():
                    after = model(batch)
                assert torch.equal(before, after)
            """,
        ),
        # `torch` is a parameter here, not the module: reported, not fixed.
        Invalid(
            """
            import torch
            def predict(model, x, torch):
                model.eval()
                return model(x)
            """,
            None,
        ),
        # A generator: reported, not fixed.
        Invalid(
            """
            def stream(model, xs):
                model.eval()
                for x in xs:
                    yield model(x)
            """,
            None,
        ),
        # The file imports `no_grad` under its own name: the fix writes that name.
        Invalid(
            """
            from torch import no_grad as ng

            def score(model, batches):
                model.eval()
                total = 0.0
                for x in batches:
                    total += model(x).sum().item()
                return total
            """,
            """
            from torch import no_grad as ng

            @ng()
            def score(model, batches):
                model.eval()
                total = 0.0
                for x in batches:
                    total += model(x).sum().item()
                return total
            """,
        ),
    ]

    def check(self, facts):
        if toggles_grad_globally(facts):
            return
        switches_by_func: dict = {}  # function -> [(position, "eval"/"train", receiver, call)]
        for s in mode_switches(facts):  # `model.eval()`, `model.to(dev).eval()`, `model.train(...)`
            func = facts.function_of.get(s.call)
            method = s.call.func.attr
            switches_by_func.setdefault(func, []).append(((s.call.lineno, s.call.col_offset), method, s.receiver, s.call))
        callers = None
        for func, switches in switches_by_func.items():
            if func is None or isinstance(func, ast.Lambda) or not any(s[1] == "eval" for s in switches):
                continue
            name = func.name
            if is_hook_like(name) or "loss" in name.lower() or returned_closure(facts, func) or runs_own_forward(facts, func):
                continue  # a forward (or another of the module's), a hook, a returned model function: its caller's grad mode
            if any(r.owner is func for r in facts.regions) or uses_grads(facts, func):
                continue
            if _grad_off_decorator(func) or _unresolved_grad_context(facts, func):
                continue
            calls = self._forward_calls_in_eval_mode(facts, func, {s[2] for s in switches})
            if not calls or _uses_grad_checkpointing(facts, func):
                continue
            callers = self._calls_by_name(facts) if callers is None else callers
            if any(facts.regions_around(c) for c in callers.get(name, ())) or feeds_training(facts, func):
                continue
            modules = list(dict.fromkeys(forward_callee(c) for c in calls))
            switch = min((s for s in switches if s[1] == "eval" and s[2] in modules), key=lambda s: s[0])[3]
            run = smallest_run(facts, func, calls)
            groups = _split_at_unrelated(facts, run, calls) if run is not None else []
            fixable = bool(groups) and all(can_wrap(facts, g) for g in groups) and torch_reachable(facts, run[0], "no_grad")
            plan, title = None, None
            if fixable:
                plan, title = self._plan(facts, func, groups)
            names = ", ".join(f"`{m}`" for m in modules)
            yield self.report(
                facts,
                switch,
                f"{names} in eval mode, then called with grad enabled (line {calls[0].lineno}): "
                "a graph is recorded for nothing",
                fix=fixable,
                fix_title=title,
                anchors=[func, calls[0]],
                data=plan,
            )

    @staticmethod
    def _plan(facts, func, groups):
        """Where the ``no_grad`` goes (:func:`plan_no_grad`, as GF304): the innermost loop that
        holds the calls goes in whole (an evaluation function: nothing in it needs a graph),
        blocks separated only by logging become one, and the function is decorated when only
        set-up statements (``model.eval()``, assignments that call nothing) and a final
        ``return`` would stay outside."""
        loop = innermost_loop(facts, func, [s for g in groups for s in g])
        if loop is not None and not can_wrap(facts, [loop]):
            loop = None

        def outside_ok(before, after):
            return all(_sets_up(s) for s in before) and (not after or (len(after) == 1 and isinstance(after[0], ast.Return)))

        plan = plan_no_grad(
            facts,
            func,
            groups,
            joins=lambda s: (loop is not None and is_within(facts, s, loop)) or records_no_graph(facts, s),
            header_ok=lambda s: True,
            outside_ok=outside_ok,
        )
        if plan.decorate:
            return ("decorate", facts.span(func.body[0])), f"Decorate `{func.name}` with `@torch.no_grad()`"
        runs = plan.runs
        what = "the loop" if len(runs) == 1 and len(runs[0]) == 1 and isinstance(runs[0][0], (ast.For, ast.While)) else "the calls"
        return ("wrap", tuple(tuple(facts.span(s) for s in r) for r in runs)), f"Wrap {what} in `with torch.no_grad():`"

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
    def _forward_calls_in_eval_mode(facts, func, receivers: set[str]) -> list[ast.Call]:
        """Forward calls of ``m`` (``m(x)``, ``m.forward(x)``, ``m.to(dev)(x)``: :func:`forward_callee`)
        in ``func``, outside any grad region, that some path reaches with ``m`` (one of
        ``receivers``) in the eval mode ``func`` set (gradfix/analysis/module_mode.py): not after
        an ``m.train()`` or a fresh binding of ``m`` on every path since."""
        found = []
        for node in own_nodes(func):
            if not isinstance(node, ast.Call) or facts.regions_around(node):
                continue
            module = forward_callee(node)
            if module in receivers and not frozen_at(facts, module, node) and evaluated_at(facts, func, module, node):
                found.append(node)
        return sorted(found, key=lambda c: (c.lineno, c.col_offset))

    def fix(self, finding, ctx):
        if not finding.data:
            return None
        kind, where = finding.data
        if kind == "decorate":
            return decorate_with_no_grad(ctx, where)
        return [edit for group in where for edit in wrap_in_no_grad(ctx, group)]

    @staticmethod
    def contract():
        # gradfix verify: same values, but no graph is recorded (outputs no longer require grad).
        from gradfix.verify.contract import Contract, ForwardMode, NoGraphReturned

        return Contract(
            "same values, no graph recorded",
            may_differ=("*: returned*.requires_grad", "*: forwards"),
            expect=(NoGraphReturned("eval"), ForwardMode("eval", "grad", False)),
        )
