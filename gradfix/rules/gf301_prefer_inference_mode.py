"""GF301 prefer-inference-mode.

Also holds the helpers the other GF3xx rules share: "does this code use grads / does the file
train with this function's results" (GF302), ``is_within``, ``own_nodes``, ``source_of`` and
``torch_reachable`` (GF302-GF304).
"""

from __future__ import annotations

import ast

from gradfix.lazy import cst

from gradfix.facts import FileFacts
from gradfix.model import FixSafety
from gradfix.rule import Invalid, Rule, Valid

# Methods whose results autograd may need, or whose grad mode the caller/framework owns.
_HOOK_NAMES = {"forward", "__call__", "backward"}
_HOOK_PREFIXES = ("register_", "on_")
_HOOK_SUFFIXES = ("_hook", "_step", "_epoch_end", "_batch_end")
# Calls that show a function works with gradients.
_GRAD_METHODS = {"backward", "requires_grad_", "retain_grad"}
_GRAD_FUNCTIONS = {"torch.autograd.grad", "torch.autograd.backward"}
# Containers a pure function must not fill with its tensors unless they are its own locals.
_STORE_METHODS = {"append", "extend", "insert", "update", "setdefault", "add", "put", "__setitem__"}


def source_of(facts: FileFacts, node: ast.AST) -> str:
    """Source text of ``node`` from the file's lines (``FileFacts.segment`` re-splits the
    whole file on every call, which is quadratic when a rule asks for every finding)."""
    first, last = node.lineno, node.end_lineno or node.lineno
    lines = [facts.line_text(n).encode("utf-8") for n in range(first, last + 1)]
    if len(lines) == 1:
        return lines[0][node.col_offset : node.end_col_offset].decode("utf-8", "replace")
    lines[0], lines[-1] = lines[0][node.col_offset :], lines[-1][: node.end_col_offset]
    return b"\n".join(lines).decode("utf-8", "replace")


def torch_reachable(facts: FileFacts, node: ast.AST) -> bool:
    """Whether the name the fixer will write for torch (``FixContext.torch_name``: a
    module-level ``import torch [as T]``, else an added ``import torch``) means the module at
    ``node``: a parameter or local named ``torch`` there would capture ``torch.no_grad()``."""
    names = facts.torch_module_names()
    if names:
        return all(facts.resolve_name(n, node) == "torch" for n in names)
    scopes = [facts.scope_of_node[f] for f in facts.enclosing_functions(node)] + [facts.scope_of_node[facts.tree]]
    return all("torch" not in scope.locals and "torch" not in scope.imports for scope in scopes)


def is_hook_like(name: str) -> bool:
    """``forward``, hooks and framework step methods: the caller owns their grad mode."""
    return name in _HOOK_NAMES or name.startswith(_HOOK_PREFIXES) or name.endswith(_HOOK_SUFFIXES)


def uses_grads(facts: FileFacts, root: ast.AST) -> bool:
    """Whether code under ``root`` computes or asks for gradients (nested functions included).

    ``.backward()``, ``torch.autograd.grad``, ``.requires_grad_()``, ``requires_grad=...``,
    ``.retain_grad()``, reading ``.grad``, an optimizer ``.step()``, or a region that turns
    grad mode on (``enable_grad``, ``set_grad_enabled(x)``).
    """
    for node in ast.walk(root):
        if isinstance(node, ast.Attribute) and (node.attr in _GRAD_METHODS or node.attr in ("grad", "requires_grad")):
            return True
        if isinstance(node, ast.keyword) and node.arg == "requires_grad":
            return True
        if isinstance(node, ast.Call):
            if facts.call_qualname(node) in _GRAD_FUNCTIONS:
                return True
            if isinstance(node.func, ast.Attribute) and node.func.attr == "step":
                return True
    for region in facts.regions:
        if region.mode != "disabled" and is_within(facts, region.owner, root):
            return True
    return False


def is_within(facts: FileFacts, node: ast.AST, root: ast.AST) -> bool:
    while node is not None:
        if node is root:
            return True
        node = facts.parents.get(node)
    return False


def _training_scopes(facts: FileFacts) -> set:
    """Functions (None: module level) that train: they use grads, or are forward/step hooks."""
    cache = facts.__dict__.get("_gf3_training_scopes")
    if cache is not None:
        return cache
    scopes: set = set()
    for mc in facts.method_calls:
        if mc.method in ("backward", "step"):
            scopes.add(facts.function_of.get(mc.call))
    for call in facts.calls:
        if facts.call_qualname(call) in _GRAD_FUNCTIONS:
            scopes.add(facts.function_of.get(call))
    for func in facts.functions:
        if is_hook_like(func.name):
            scopes.add(func)
    facts.__dict__["_gf3_training_scopes"] = scopes
    return scopes


def _references(facts: FileFacts) -> dict[str, set]:
    """Name -> the functions (None: module) that mention it as ``name`` or ``x.name``."""
    cache = facts.__dict__.get("_gf3_references")
    if cache is not None:
        return cache
    refs: dict[str, set] = {}
    for node, func in facts.function_of.items():
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            refs.setdefault(node.id, set()).add(func)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            refs.setdefault(node.attr, set()).add(func)
    facts.__dict__["_gf3_references"] = refs
    return refs


def feeds_training(facts: FileFacts, func: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Whether the same file may feed ``func``'s results into training.

    By name, transitively: some function that mentions ``func`` (directly or through the
    functions that call it) calls ``.backward()``/an optimizer ``.step()``/``autograd.grad``,
    or is a ``forward``/hook/step method. Over-approximate on purpose (any ``x.name`` counts).
    """
    training = _training_scopes(facts)
    refs = _references(facts)
    seen: set = {func}
    todo = [func.name]
    names_seen = {func.name}
    while todo:
        name = todo.pop()
        for caller in refs.get(name, ()):
            if caller in seen:
                continue
            if caller in training:
                return True
            seen.add(caller)
            caller_name = getattr(caller, "name", None)
            if caller_name and caller_name not in names_seen:
                names_seen.add(caller_name)
                todo.append(caller_name)
    return False


def own_nodes(func) -> list[ast.AST]:
    """Nodes of ``func``'s body, not descending into nested functions, lambdas or classes."""
    out: list[ast.AST] = []
    todo = list(func.body)
    while todo:
        node = todo.pop()
        out.append(node)
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            todo.extend(ast.iter_child_nodes(node))
    return out


def _body_without_docstring(func) -> list[ast.stmt]:
    body = list(func.body)
    first = body[0] if body else None
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        body = body[1:]
    return body


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
            "import torch\nclass M(torch.nn.Module):\n    @torch.no_grad()\n    def forward(self, x):\n"
            "        return self.net(x)\n"
        ),
        Valid(
            "import torch\nclass M(torch.nn.Module):\n    @torch.inference_mode()\n    def forward(self, x):\n"
            "        return self.net(x)\n"
        ),
        Valid("import torch\n@torch.no_grad()\ndef save_hook(module, inp, out):\n    return out.clone()\n"),
        Valid("import torch\n@torch.no_grad()\ndef validation_step(self, batch, i):\n    return self(batch)\n"),
        # Results feed training in the same file.
        Valid(
            "import torch\n@torch.no_grad()\ndef teacher_logits(teacher, x):\n    return teacher(x)\n\n"
            "def train_step(student, teacher, x, opt):\n    t = teacher_logits(teacher, x)\n"
            "    loss = kl(student(x), t)\n    loss.backward()\n    opt.step()\n"
        ),
        # Through an intermediate function.
        Valid(
            "import torch\n@torch.no_grad()\ndef encode(enc, x):\n    return enc(x)\n\n"
            "def features(enc, x):\n    return encode(enc, x)\n\n"
            "def train(enc, head, x):\n    head(features(enc, x)).sum().backward()\n"
        ),
        # No outputs returned (an EMA update or in-place init).
        Valid(
            "import torch\n@torch.no_grad()\ndef update_ema(ema, model, d):\n"
            "    for e, p in zip(ema.parameters(), model.parameters()):\n        e.mul_(d).add_(p, alpha=1 - d)\n"
        ),
        # Stores tensors outside its locals.
        Valid("import torch\n@torch.no_grad()\ndef embed(self, x):\n    self.cache = self.enc(x)\n    return self.cache\n"),
        # Uses grads (saliency maps) or turns them back on.
        Valid(
            "import torch\ndef saliency(model, x):\n    with torch.no_grad():\n        x = x.clone()\n"
            "        with torch.enable_grad():\n            x.requires_grad_()\n            y = model(x)\n"
            "    return y\n"
        ),
        # The body is not wholly one no_grad block.
        Valid("import torch\ndef predict(model, x):\n    model.eval()\n    with torch.no_grad():\n        y = model(x)\n    return y\n"),
        # A local `torch` that is not the module.
        Valid("def predict(torch, model, x):\n    with torch.no_grad():\n        return model(x)\n"),
        Valid("import torch\n@torch.set_grad_enabled(False)\ndef predict(model, x):\n    return model(x)\n"),
        # Results that other files typically train on (a linear probe on features, a PPO loss
        # on advantages, an MAE loss on patch targets): not an inference name.
        Valid("import torch\n@torch.no_grad()\ndef extract_features(model, loader):\n    return torch.cat([model(x) for x in loader])\n"),
        Valid(
            "import torch\nclass Agent(torch.nn.Module):\n    @torch.no_grad()\n"
            "    def estimate_returns_and_advantages(self, rewards, values):\n        return rewards - values, values\n"
        ),
        Valid("import torch\n@torch.no_grad()\ndef trunc_normal_(tensor, std=1.0):\n    with torch.no_grad():\n        return _trunc(tensor, std)\n"),
        # Builds a module (timm's `fuse`): its weights would be inference tensors.
        Valid(
            "import torch\nfrom torch import nn\nclass ConvBn(nn.Module):\n    @torch.no_grad()\n    def fuse_for_eval(self):\n"
            "        w = self.conv.weight * self.bn.weight[:, None, None, None]\n        m = nn.Conv2d(w.size(1), w.size(0), 1)\n"
            "        m.weight.copy_(w)\n        return m\n"
        ),
        Valid(
            "import copy\nimport torch\n@torch.no_grad()\ndef make_eval_teacher(model):\n    teacher = copy.deepcopy(model)\n"
            "    return teacher\n"
        ),
        # Reads the training flag: runs inside training, where its results may become a
        # target or an input that autograd saves (a base class's forward calls it).
        Valid(
            "import torch\nclass RotatedRPN(RPN):\n    @torch.no_grad()\n"
            "    def predict_proposals(self, anchors, deltas):\n"
            "        return decode(anchors, deltas)[: self.topk[self.training]]\n"
        ),
        Valid(
            "import torch\n@torch.no_grad()\ndef initial_prediction(model, x):\n    was_training = model.training\n"
            "    model.eval()\n    out = model(x).argmax(-1)\n    model.train(was_training)\n    return out\n"
        ),
        # Exporters: tracing under inference mode is a different code path.
        Valid("import torch\n@torch.no_grad()\ndef export_for_test(model, x):\n    return torch.jit.trace(model, x)\n"),
    ]
    INVALID = [
        # `assert not self.training` insists on evaluation (PyG's layer-wise `inference`).
        Invalid(
            "import torch\nclass SAGE(torch.nn.Module):\n    @torch.no_grad()\n    def inference(self, x):\n"
            "        assert not self.training\n        return self.lin(x)\n",
            "import torch\nclass SAGE(torch.nn.Module):\n    @torch.inference_mode()\n    def inference(self, x):\n"
            "        assert not self.training\n        return self.lin(x)\n",
        ),
        Invalid(
            "import torch\n\n@torch.no_grad()  # eval only\ndef predict(model, x):\n    return model(x).argmax(1)\n",
            "import torch\n\n@torch.inference_mode()  # eval only\ndef predict(model, x):\n    return model(x).argmax(1)\n",
        ),
        Invalid(
            "import torch as T\n\ndef predict(model, loader):\n    with T.no_grad():\n"
            "        outs = []\n        for x in loader:\n            outs.append(model(x))\n        return T.cat(outs)\n",
            "import torch as T\n\ndef predict(model, loader):\n    with T.inference_mode():\n"
            "        outs = []\n        for x in loader:\n            outs.append(model(x))\n        return T.cat(outs)\n",
        ),
        Invalid(
            "import torch\n@torch.no_grad\ndef predict(model, x):\n    return model(x)\n",
            "import torch\n@torch.inference_mode\ndef predict(model, x):\n    return model(x)\n",
        ),
        Invalid(
            "from torch import no_grad\n\n@no_grad()\ndef predict(model, x):\n    return model(x)\n",
            "import torch\n\n@torch.inference_mode()\ndef predict(model, x):\n    return model(x)\n",
        ),
        Invalid(
            "import torch\n@torch.autograd.grad_mode.no_grad()\ndef predict(model, x):\n    return model(x)\n",
            "import torch\n@torch.autograd.grad_mode.inference_mode()\ndef predict(model, x):\n    return model(x)\n",
        ),
        # A method of a model that nothing in the file trains through (nanoGPT's generate).
        Invalid(
            "import torch\nclass GPT(torch.nn.Module):\n    def forward(self, idx):\n        return self.head(idx)\n\n"
            "    @torch.no_grad()\n    def generate(self, idx, n):\n        for _ in range(n):\n"
            "            nxt = self(idx)[:, -1:].argmax(-1)\n            idx = torch.cat((idx, nxt), 1)\n        return idx\n",
            "import torch\nclass GPT(torch.nn.Module):\n    def forward(self, idx):\n        return self.head(idx)\n\n"
            "    @torch.inference_mode()\n    def generate(self, idx, n):\n        for _ in range(n):\n"
            "            nxt = self(idx)[:, -1:].argmax(-1)\n            idx = torch.cat((idx, nxt), 1)\n        return idx\n",
        ),
        # Any name, when only Python values come back (Rainbow's `act`).
        Invalid(
            "import torch\nclass Agent:\n    @torch.no_grad()\n    def act(self, state):\n"
            "        return (self.net(state) * self.support).sum(2).argmax(1).item()\n",
            "import torch\nclass Agent:\n    @torch.inference_mode()\n    def act(self, state):\n"
            "        return (self.net(state) * self.support).sum(2).argmax(1).item()\n",
        ),
        # `no_grad` imported by name and `torch` a local: reported without a fix.
        Invalid(
            "from torch import no_grad\ndef predict(model, x, torch):\n    with no_grad():\n        return model(x)\n",
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
            what = source_of(facts, region.expr)
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
                f"`{func.name}` only runs inference under `{what}`: `inference_mode()` is faster. "
                "Unsafe: the tensors it returns become inference tensors, which cannot be saved for "
                "backward or updated in place outside inference mode later",
                fix=fixable,
                anchors=[func, region.owner],
                data=import_from,
            )

    @staticmethod
    def _no_grad_region(facts, func):
        for region in facts.regions:
            if region.owner is func and region.api == "torch.no_grad":
                return region
        body = _body_without_docstring(func)
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
