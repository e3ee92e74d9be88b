"""GF301 prefer-inference-mode."""

from __future__ import annotations

import ast

from gradfix.lazy import cst

from gradfix.analysis.grad_use import feeds_training, is_hook_like, uses_grads
from gradfix.analysis.statements import body_without_docstring, own_nodes, torch_reachable
from gradfix.facts import FileFacts
from gradfix.model import FixSafety
from gradfix.rule import Invalid, Rule, Valid

# Containers a pure function must not fill with its tensors unless they are its own locals.
_STORE_METHODS = {"append", "extend", "insert", "update", "setdefault", "add", "put", "__setitem__"}


def _returns_outputs(func) -> bool:
    for node in own_nodes(func):
        if isinstance(node, ast.Return) and node.value is not None:
            if not (isinstance(node.value, ast.Constant) and node.value.value is None):
                return True
        if isinstance(node, (ast.Yield, ast.YieldFrom)):
            return True
    return False


def _root_name(expr: ast.AST) -> str | None:
    while isinstance(expr, (ast.Attribute, ast.Subscript, ast.Call)):
        expr = expr.func if isinstance(expr, ast.Call) else expr.value
    return expr.id if isinstance(expr, ast.Name) else None


def _leaks_tensors(func) -> bool:
    """Whether ``func`` stores values anywhere but its own locals (attributes, globals,
    containers it was given) or mutates such objects in place: its inference tensors would
    outlive the call through a path other than its return value."""
    args = func.args
    params = {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg) if a is not None}
    nodes = list(ast.walk(func))  # nested functions included: they may run
    own_locals = {n.id for n in nodes if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)} - params
    for node in nodes:
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            return True
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, (ast.Store, ast.Del)):
            return True
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, (ast.Store, ast.Del)):
            if _root_name(node) not in own_locals:
                return True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            method = node.func.attr
            inplace = method.endswith("_") and not method.startswith("_")
            if (inplace or method in _STORE_METHODS) and _root_name(node.func.value) not in own_locals:
                return True
    return False


# Name words of functions whose results are meant for people, metrics or decoding, not for
# training. Others (`extract_features`, `embed`, `patchify`, `make_ema_teacher`,
# `estimate_returns_and_advantages`, `fuse`, `trunc_normal_`) often feed a loss or become model
# state in another file, where inference tensors break (`F.linear` saves its input, an EMA
# updates its copy in place).
_INFERENCE_WORDS = frozenset(
    """
    predict prediction predictions pred preds infer inference eval evaluate evaluation evaluator
    validate validation valid val test testing generate generation beam greedy search translate
    caption detect detection demo score scores scoring accuracy acc metric metrics knn topk
    benchmark
    """.split()
)
# Calls that build model state or export a model: tensors made under inference mode would
# become parameters/buffers (untrainable, not updatable in place) or go through a tracer.
_STATE_CALL_SUFFIXES = ("deepcopy", "load_state_dict", "to_empty", "register_buffer", "register_parameter")
_EXPORT_PREFIXES = ("torch.jit.", "torch.onnx.", "torch.export.", "torch.compile", "torch_tensorrt", "torch.fx.")
_PLAIN_METHODS = {"item", "tolist", "numpy"}


def _name_words(name: str) -> set[str]:
    """``predict_proba`` -> {predict, proba}; ``evalModel`` -> {eval, model}."""
    spaced = "".join(f"_{c.lower()}" if c.isupper() else c for c in name)
    return {w for w in spaced.split("_") if w}


def _returns_plain_values(func) -> bool:
    """Every ``return`` hands back ``x.item()`` / ``x.tolist()`` / ``x.numpy()`` /
    ``float(..)`` / ``int(..)``: no tensor leaves the function."""
    returns = []
    for node in own_nodes(func):
        if isinstance(node, (ast.Yield, ast.YieldFrom)):
            return False
        if isinstance(node, ast.Return) and node.value is not None:
            returns.append(node.value)
    for value in returns:
        if not isinstance(value, ast.Call):
            return False
        callee = value.func
        if isinstance(callee, ast.Attribute) and callee.attr in _PLAIN_METHODS:
            continue
        if isinstance(callee, ast.Name) and callee.id in ("float", "int", "bool"):
            continue
        return False
    return bool(returns)


def _builds_state(facts: FileFacts, func) -> bool:
    """Whether ``func`` creates modules/parameters, copies or loads a model, or exports one."""
    for node in own_nodes(func):
        if not isinstance(node, ast.Call):
            continue
        callee = node.func
        last = callee.attr if isinstance(callee, ast.Attribute) else getattr(callee, "id", "")
        if last.endswith(_STATE_CALL_SUFFIXES) or last in ("Parameter", "trace", "script", "export"):
            return True
        qualname = facts.call_qualname(node) or ""
        if qualname.startswith(_EXPORT_PREFIXES):
            return True
        if qualname.startswith("torch.nn.") and not qualname.startswith("torch.nn.functional") and last[:1].isupper():
            return True
    return False


def _reads_training_flag(func) -> bool:
    """Whether ``func`` reads some module's ``.training`` flag (``self.pre_nms_topk[self.training]``,
    ``was_training = model.training``): it is written to run in the middle of training, where a
    caller (often a base class's ``forward`` in another file) may feed its results into a loss.
    Inference tensors there raise once they are saved for backward (detectron2's RRPN proposals
    go into ROIAlign; PyG's GNNExplainer trains its masks against the initial prediction).
    ``assert not self.training`` does not count: it insists on evaluation."""
    nodes = own_nodes(func)
    asserted = {id(n) for a in nodes if isinstance(a, ast.Assert) for n in ast.walk(a)}
    return any(
        isinstance(node, ast.Attribute) and node.attr == "training" and isinstance(node.ctx, ast.Load)
        and id(node) not in asserted
        for node in nodes
    )


class PreferInferenceMode(Rule):
    """
    ## What it does
    Finds pure-inference functions (decorated with `torch.no_grad()`, or whose body is one
    `with torch.no_grad():` block) that never compute gradients, return their outputs, are not
    a `forward` method, hook or framework `*_step` method, and whose results the same file
    never feeds into training. The function's name must say it predicts, evaluates, tests,
    generates or scores (`predict`, `evaluate`, `validate`, `generate`, `accuracy`, ...), or it
    must return only Python values (`.item()`, `.tolist()`, `.numpy()`): feature extractors,
    target/teacher builders, `fuse`/init helpers and exporters are left alone. Off by default:
    it would flag nearly every evaluation loop.

    ## Why is this bad?
    `torch.inference_mode()` also skips view tracking and version counting, so inference runs
    a little faster and uses less memory than under `torch.no_grad()`.

    ## Example
    ```python
    @torch.no_grad()
    def predict(model, loader):
        return torch.cat([model(x) for x in loader])
    ```

    ## Use instead
    ```python
    @torch.inference_mode()
    def predict(model, loader):
        return torch.cat([model(x) for x in loader])
    ```

    ## Fix safety
    Unsafe: tensors made under `inference_mode` are inference tensors. They cannot be saved
    for backward later (`RuntimeError: Inference tensors cannot be saved for backward`, pinned
    in `tests/facts/test_gf301_facts.py`) nor updated in place outside inference mode. A caller
    in another file that fine-tunes on the returned tensors would break, which is why
    `forward` methods and hooks are never changed, and functions whose results reach a
    `.backward()` in the same file are left alone. Functions that store tensors anywhere but
    their return value (attributes, caches, arguments), that build modules or parameters
    (`nn.Conv2d(..)`, `nn.Parameter`, `copy.deepcopy`: their weights would be inference
    tensors that can be neither trained nor updated in place, e.g. by an EMA) or that export a
    model (`torch.jit`, `torch.onnx`, `torch.export`) are not reported, nor functions that read
    a module's `.training` flag: they run in the middle of training, where a caller in another
    file (often a base class's `forward`) may feed their results into a loss. The fix keeps the
    spelling of the torch module (`T.no_grad()` becomes `T.inference_mode()`).
    """

    code = "GF301"
    name = "prefer-inference-mode"
    summary = "Pure-inference function under `no_grad` could use `inference_mode`"
    fix_safety = FixSafety.UNSAFE
    default_enabled = False
    triggers = ("no_grad",)

    VALID = [
        # forward methods and hooks: fine-tuning would break.
        Valid(
            """
            import torch
            class M(torch.nn.Module):
                @torch.no_grad()
                def forward(self, x):
                    return self.net(x)
            """
        ),
        Valid(
            """
            import torch
            class M(torch.nn.Module):
                @torch.inference_mode()
                def forward(self, x):
                    return self.net(x)
            """
        ),
        Valid(
            """
            import torch
            @torch.no_grad()
            def save_hook(module, inp, out):
                return out.clone()
            """
        ),
        Valid(
            """
            import torch
            @torch.no_grad()
            def validation_step(self, batch, i):
                return self(batch)
            """
        ),
        # Results feed training in the same file.
        Valid(
            """
            import torch
            @torch.no_grad()
            def teacher_logits(teacher, x):
                return teacher(x)

            def train_step(student, teacher, x, opt):
                t = teacher_logits(teacher, x)
                loss = kl(student(x), t)
                loss.backward()
                opt.step()
            """
        ),
        # Through an intermediate function.
        Valid(
            """
            import torch
            @torch.no_grad()
            def encode(enc, x):
                return enc(x)

            def features(enc, x):
                return encode(enc, x)

            def train(enc, head, x):
                head(features(enc, x)).sum().backward()
            """
        ),
        # No outputs returned (an EMA update or in-place init).
        Valid(
            """
            import torch
            @torch.no_grad()
            def update_ema(ema, model, d):
                for e, p in zip(ema.parameters(), model.parameters()):
                    e.mul_(d).add_(p, alpha=1 - d)
            """
        ),
        # Stores tensors outside its locals.
        Valid(
            """
            import torch
            @torch.no_grad()
            def embed(self, x):
                self.cache = self.enc(x)
                return self.cache
            """
        ),
        # Uses grads (saliency maps) or turns them back on.
        Valid(
            """
            import torch
            def saliency(model, x):
                with torch.no_grad():
                    x = x.clone()
                    with torch.enable_grad():
                        x.requires_grad_()
                        y = model(x)
                return y
            """
        ),
        # The body is not wholly one no_grad block.
        Valid(
            """
            import torch
            def predict(model, x):
                model.eval()
                with torch.no_grad():
                    y = model(x)
                return y
            """
        ),
        # A local `torch` that is not the module.
        Valid(
            """
            def predict(torch, model, x):
                with torch.no_grad():
                    return model(x)
            """
        ),
        Valid(
            """
            import torch
            @torch.set_grad_enabled(False)
            def predict(model, x):
                return model(x)
            """
        ),
        # Results that other files typically train on (a linear probe on features, a PPO loss
        # on advantages, an MAE loss on patch targets): not an inference name.
        Valid(
            """
            import torch
            @torch.no_grad()
            def extract_features(model, loader):
                return torch.cat([model(x) for x in loader])
            """
        ),
        Valid(
            """
            import torch
            class Agent(torch.nn.Module):
                @torch.no_grad()
                def estimate_returns_and_advantages(self, rewards, values):
                    return rewards - values, values
            """
        ),
        Valid(
            """
            import torch
            @torch.no_grad()
            def trunc_normal_(tensor, std=1.0):
                with torch.no_grad():
                    return _trunc(tensor, std)
            """
        ),
        # Builds a module (timm's `fuse`): its weights would be inference tensors.
        Valid(
            """
            import torch
            from torch import nn
            class ConvBn(nn.Module):
                @torch.no_grad()
                def fuse_for_eval(self):
                    w = self.conv.weight * self.bn.weight[:, None, None, None]
                    m = nn.Conv2d(w.size(1), w.size(0), 1)
                    m.weight.copy_(w)
                    return m
            """
        ),
        Valid(
            """
            import copy
            import torch
            @torch.no_grad()
            def make_eval_teacher(model):
                teacher = copy.deepcopy(model)
                return teacher
            """
        ),
        # Reads the training flag: runs inside training, where its results may become a
        # target or an input that autograd saves (a base class's forward calls it).
        Valid(
            """
            import torch
            class RotatedRPN(RPN):
                @torch.no_grad()
                def predict_proposals(self, anchors, deltas):
                    return decode(anchors, deltas)[: self.topk[self.training]]
            """
        ),
        Valid(
            """
            import torch
            @torch.no_grad()
            def initial_prediction(model, x):
                was_training = model.training
                model.eval()
                out = model(x).argmax(-1)
                model.train(was_training)
                return out
            """
        ),
        # Exporters: tracing under inference mode is a different code path.
        Valid(
            """
            import torch
            @torch.no_grad()
            def export_for_test(model, x):
                return torch.jit.trace(model, x)
            """
        ),
    ]
    INVALID = [
        # `assert not self.training` insists on evaluation (PyG's layer-wise `inference`).
        Invalid(
            """
            import torch
            class SAGE(torch.nn.Module):
                @torch.no_grad()
                def inference(self, x):
                    assert not self.training
                    return self.lin(x)
            """,
            """
            import torch
            class SAGE(torch.nn.Module):
                @torch.inference_mode()
                def inference(self, x):
                    assert not self.training
                    return self.lin(x)
            """,
        ),
        Invalid(
            """
            import torch

            @torch.no_grad()  # eval only
            def predict(model, x):
                return model(x).argmax(1)
            """,
            """
            import torch

            @torch.inference_mode()  # eval only
            def predict(model, x):
                return model(x).argmax(1)
            """,
        ),
        Invalid(
            """
            import torch as T

            def predict(model, loader):
                with T.no_grad():
                    outs = []
                    for x in loader:
                        outs.append(model(x))
                    return T.cat(outs)
            """,
            """
            import torch as T

            def predict(model, loader):
                with T.inference_mode():
                    outs = []
                    for x in loader:
                        outs.append(model(x))
                    return T.cat(outs)
            """,
        ),
        Invalid(
            """
            import torch
            @torch.no_grad
            def predict(model, x):
                return model(x)
            """,
            """
            import torch
            @torch.inference_mode
            def predict(model, x):
                return model(x)
            """,
        ),
        Invalid(
            """
            from torch import no_grad

            @no_grad()
            def predict(model, x):
                return model(x)
            """,
            """
            import torch

            @torch.inference_mode()
            def predict(model, x):
                return model(x)
            """,
        ),
        Invalid(
            """
            import torch
            @torch.autograd.grad_mode.no_grad()
            def predict(model, x):
                return model(x)
            """,
            """
            import torch
            @torch.autograd.grad_mode.inference_mode()
            def predict(model, x):
                return model(x)
            """,
        ),
        # A method of a model that nothing in the file trains through (nanoGPT's generate).
        Invalid(
            """
            import torch
            class GPT(torch.nn.Module):
                def forward(self, idx):
                    return self.head(idx)

                @torch.no_grad()
                def generate(self, idx, n):
                    for _ in range(n):
                        nxt = self(idx)[:, -1:].argmax(-1)
                        idx = torch.cat((idx, nxt), 1)
                    return idx
            """,
            """
            import torch
            class GPT(torch.nn.Module):
                def forward(self, idx):
                    return self.head(idx)

                @torch.inference_mode()
                def generate(self, idx, n):
                    for _ in range(n):
                        nxt = self(idx)[:, -1:].argmax(-1)
                        idx = torch.cat((idx, nxt), 1)
                    return idx
            """,
        ),
        # Any name, when only Python values come back (Rainbow's `act`).
        Invalid(
            """
            import torch
            class Agent:
                @torch.no_grad()
                def act(self, state):
                    return (self.net(state) * self.support).sum(2).argmax(1).item()
            """,
            """
            import torch
            class Agent:
                @torch.inference_mode()
                def act(self, state):
                    return (self.net(state) * self.support).sum(2).argmax(1).item()
            """,
        ),
        # `no_grad` imported by name and `torch` a local: reported without a fix.
        Invalid(
            """
            from torch import no_grad
            def predict(model, x, torch):
                with no_grad():
                    return model(x)
            """,
            None,
        ),
    ]

    def check(self, facts):
        for func in facts.functions:
            region = self._no_grad_region(facts, func)
            if region is None or is_hook_like(func.name):
                continue
            decorators = [facts.qualname(d.func if isinstance(d, ast.Call) else d) or "" for d in func.decorator_list]
            if any(d.startswith("torch.jit") for d in decorators):
                continue
            if not _returns_outputs(func) or uses_grads(facts, func) or _leaks_tensors(func):
                continue
            if not (_INFERENCE_WORDS & _name_words(func.name) or _returns_plain_values(func)):
                continue
            if _builds_state(facts, func) or _reads_training_flag(func) or feeds_training(facts, func):
                continue
            what = facts.segment(region.expr)
            func_expr = region.expr.func if isinstance(region.expr, ast.Call) else region.expr
            import_from = None
            fixable = True
            if isinstance(func_expr, ast.Name):
                fixable = torch_reachable(facts, func_expr)
                target = facts.resolve_name(func_expr.id, func_expr) or ""
                module, _, name = target.rpartition(".")
                if name == func_expr.id:
                    import_from = (module, name)
            yield self.report(
                facts,
                region.expr,
                f"`{func.name}` only runs inference under `{what}`: `torch.inference_mode()` is faster",
                fix_title="Use `torch.inference_mode()` (its tensors can never enter autograd later)",
                fix=fixable,
                anchors=[func, region.owner],
                data=import_from,
            )

    @staticmethod
    def _no_grad_region(facts, func):
        for region in facts.regions:
            if region.owner is func and region.api == "torch.no_grad":
                return region
        body = body_without_docstring(func)
        if len(body) == 1 and isinstance(body[0], (ast.With, ast.AsyncWith)):
            for region in facts.regions:
                if region.owner is body[0] and region.api == "torch.no_grad" and region.called:
                    return region
        return None

    def fix(self, finding, ctx):
        from gradfix.fixer import Edit

        node = ctx.node_at(finding.span, cst.BaseExpression)
        func = node.func if isinstance(node, cst.Call) else node
        if isinstance(func, cst.Attribute):
            return [Edit(func, func.with_changes(attr=cst.Name("inference_mode")))]
        replacement = ctx.expr(f"{ctx.torch_name()}.inference_mode")
        if finding.data:
            ctx.remove_import_if_unused(*finding.data)
        return [Edit(func, replacement)]

    @staticmethod
    def contract():
        # gradfix verify: same values; forwards now run in inference mode, results are
        # inference tensors.
        from gradfix.verify.contract import Contract, ForwardMode

        return Contract(
            "same values, computed in inference mode",
            may_differ=("*: returned*.is_inference", "*: forwards"),
            expect=(ForwardMode("predict", "inference", True),),
        )
