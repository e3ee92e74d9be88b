"""GF304 data-mutation."""

from __future__ import annotations

import ast
import re

from gradfix.lazy import cst

from gradfix.model import FixSafety
from gradfix.analysis.insertion import joinable_statement, plan_no_grad
from gradfix.analysis.provenance import DETACHED, PARAMETER_NAME, grad_free_operand, origin
from gradfix.analysis.tensor_data import grads_may_require_grad, lazy_parameter, manages_storage, may_be_torch_data, parameter_attributes
from gradfix.analysis.vocabulary import STORAGE_VIEWS, closure_evaluation, optimizer_state, owner_class
from gradfix.analysis.regions import builds_torch_module, header_records_no_graph, header_updates_optimizer_state, records_no_graph, updates_optimizer_state
from gradfix.analysis.statements import (
    alone_on_its_lines,
    body_without_docstring,
    decorate_with_no_grad,
    grad_with,
    is_within,
    one_line_if,
    statement_block,
    torch_reachable,
    wrap_in_no_grad,
)
from gradfix.rule import GAP, Invalid, Rule, Valid, attribute

# Tensor methods that overwrite values in place. Shape/storage changers (`resize_`, `set_`,
# `t_`, `squeeze_`...) are left out: they behave differently on a tensor that requires grad.
_INPLACE = frozenset(
    """
    copy_ add_ sub_ mul_ div_ zero_ fill_ clamp_ clamp_min_ clamp_max_ clip_ normal_ uniform_
    bernoulli_ exponential_ geometric_ cauchy_ log_normal_ random_ masked_fill_ masked_scatter_
    index_fill_ index_copy_ index_add_ index_put_ scatter_ scatter_add_ addcmul_ addcdiv_ lerp_
    pow_ sqrt_ rsqrt_ exp_ log_ neg_ abs_ sign_ floor_ ceil_ round_ trunc_ fmod_ remainder_ renorm_
    sigmoid_ tanh_ relu_ fill_diagonal_ addmm_ addmv_ addr_ baddbmm_ addbmm_ mean_ reciprocal_
    """.split()
)
# torch functions that build a tensor from sizes: their `requires_grad=False` default reaches
# an `out=` tensor, so under `no_grad` `torch.zeros(3, out=p)` turns `p.requires_grad` off and
# `torch.randn(3, out=p)` raises (pinned in tests/facts/test_gf304_out_facts.py, with the list).
_FACTORIES = frozenset(
    """
    arange empty eye full linspace logspace normal ones ones_like rand randint randn randperm range
    zeros zeros_like fft.fftfreq fft.rfftfreq
    """.split()
)
# A for-loop over these is a loop over parameters.
_PARAM_SOURCE = re.compile(r"param|weight|buffers\(|state_dict\(")
# Receivers whose `.data` is an ordinary attribute (a dataset, a PackedSequence, `self.data`).
_NOT_A_TENSOR = re.compile(r"^(self|cls)$|data|set$|batch|packed|loader|sample|record", re.IGNORECASE)


_LAZY_REASON = "a lazy module's parameter is uninitialised until its first forward: written without `.data`, it raises"
_STORAGE_REASON = "the function manages the memory behind `.data`: a write autograd sees could make backward raise"


def _last_name(expr: ast.expr) -> str | None:
    while isinstance(expr, ast.Subscript):
        expr = expr.value
    if isinstance(expr, ast.Attribute):
        return expr.attr
    if isinstance(expr, ast.Name):
        return expr.id
    return None


def _data_attribute(expr: ast.expr) -> ast.Attribute | None:
    """``X.data`` under ``X.data`` / ``X.data[i]`` / ``X.data[i][j]``, and views of them that
    share their memory (``X.data.narrow(0, 0, k)``, ``X.data.view(-1)[0]``)."""
    while isinstance(expr, ast.Subscript) or (
        isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr in STORAGE_VIEWS
    ):
        expr = expr.value if isinstance(expr, ast.Subscript) else expr.func.value
    if isinstance(expr, ast.Attribute) and expr.attr == "data":
        return expr
    return None


def _out_keyword(facts, call: ast.Call) -> ast.expr | None:
    """The ``out=`` argument of a call of a torch function (``torch.add(a, b, out=p.data)``,
    ``T.clamp(..)``, ``from torch import add``), which it writes in place."""
    out = next((k.value for k in call.keywords if k.arg == "out"), None)
    if out is None or not (facts.call_qualname(call) or "").startswith("torch."):
        return None
    return out


def _written_call(stmt: ast.stmt) -> tuple[ast.expr, int] | None:
    """For an expression statement, the expression under its chain of in-place methods and
    how many there are: ``p.data.add_(1).clamp_(0, 1)`` -> (``p.data``, 2)."""
    if not isinstance(stmt, ast.Expr):
        return None
    expr, inplace = stmt.value, 0
    while isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr in _INPLACE:
        expr, inplace = expr.func.value, inplace + 1
    return expr, inplace


def _factory_write(facts, stmt: ast.stmt) -> bool:
    """``stmt`` writes ``out=`` of a factory (``torch.randn(3, out=w.data)``, also followed by
    ``.mul_(s)``): see _FACTORIES."""
    found = _written_call(stmt)
    call = found[0] if found else None
    if not isinstance(call, ast.Call) or _out_keyword(facts, call) is None:
        return False
    return facts.call_qualname(call).removeprefix("torch.") in _FACTORIES


def _written_data(facts, stmt: ast.stmt) -> ast.Attribute | None:
    """The ``X.data`` that ``stmt`` writes through, if it does: an in-place method on it, the
    ``out=`` of a torch function (``torch.add(a, b, out=p.data)``, ``torch.randn(n,
    out=p.data).mul_(s)``), an augmented assignment, an item assignment."""
    found = _written_call(stmt)
    if found is not None:
        expr, inplace = found
        out = _out_keyword(facts, expr) if isinstance(expr, ast.Call) else None
        if out is not None:
            return _data_attribute(out)
        return _data_attribute(expr) if inplace else None
    if isinstance(stmt, ast.AugAssign):
        return _data_attribute(stmt.target)
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Subscript):
        # `w.data[i] = v` writes; `w.data = w.data[:, keep]` rebinds (a shape change): not flagged.
        return _data_attribute(stmt.targets[0])
    return None


# In-place initialisers and the torch.nn.init function that runs the same call under `no_grad`
# (method -> (init function, the most positional arguments, the keywords it shares); pinned in
# tests/facts/test_gf304_init_facts.py).
_INIT_FUNCTIONS = {
    "normal_": ("normal_", 2, {"mean", "std", "generator"}),
    "uniform_": ("uniform_", 2, {"generator"}),
    "fill_": ("constant_", 1, set()),
    "zero_": ("zeros_", 0, set()),
}


def _init_call(facts, run, inside) -> tuple[str, str | None] | None:
    """For a ``with`` that would hold one statement, ``w.data.normal_(0, 0.02)`` (an in-place
    initialiser called on the ``.data`` itself, its result unused): the ``torch.nn.init``
    function to call instead and the prefix to write it with (the file's ``nn``/``init``
    import; None: ``torch.nn.init`` through torch's own name)."""
    if len(run) != 1 or len(inside) != 1:
        return None
    stmt, attr = inside[0]
    lone = run[0]
    while isinstance(lone, ast.If) and not lone.orelse and len(lone.body) == 1:
        lone = lone.body[0]  # `if init_bias: b.data.fill_(0)`: the `if` needs no block either
    if lone is not stmt or not isinstance(stmt, ast.Expr):
        return None
    call = stmt.value
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.value is attr):
        return None
    found = _INIT_FUNCTIONS.get(call.func.attr)
    if found is None:
        return None
    function, most, keywords = found
    if any(isinstance(a, ast.Starred) for a in call.args) or len(call.args) > most or any(k.arg not in keywords for k in call.keywords):
        return None
    for target, suffix in (("torch.nn.init", ""), ("torch.nn", ".init")):
        alias = facts.module_alias(target)
        if alias is not None and facts.resolve_name(alias, stmt) == target:
            return function, alias + suffix
    return (function, None) if torch_reachable(facts, stmt) and facts.torch_name_writable() else None


def _own_parameter(facts, receiver: ast.expr) -> bool:
    """``self.mu_W`` where the class binds ``self.mu_W = nn.Parameter(...)``."""
    return (
        isinstance(receiver, ast.Attribute)
        and isinstance(receiver.value, ast.Name)
        and receiver.value.id == "self"
        and receiver.attr in parameter_attributes(facts, owner_class(facts, receiver))
    )


def _loop_over_parameters(facts, name: str, at: ast.AST) -> bool:
    """Whether ``name`` is bound by a ``for`` over something parameter-like in the same function."""
    func = facts.enclosing_function(at)
    for stmt in facts.statements(func):
        if isinstance(stmt, (ast.For, ast.AsyncFor)) and any(
            isinstance(n, ast.Name) and n.id == name for n in ast.walk(stmt.target)
        ):
            if _PARAM_SOURCE.search(facts.segment(stmt.iter)):
                return True
    return False


_LEAF_SOURCE = re.compile(r"requires_grad|Parameter\(")


def _computed_local(facts, name: str, at: ast.AST) -> bool:
    """Whether ``name`` is assigned in its function from a computation that is neither a
    parameter (``w = self.weight``) nor a leaf made to require grad (``w = torch.randn(..,
    requires_grad=True)``): ``p = F.softmax(x)`` is then an activation that backward may have
    saved, and writing to it under ``no_grad`` would raise where ``.data`` did not."""
    func = facts.enclosing_function(at)
    for stmt in facts.statements(func):
        if isinstance(stmt, ast.Assign):
            targets = stmt.targets
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            targets = [stmt.target]
        else:
            continue
        if any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store) for t in targets for n in ast.walk(t)):
            source = facts.segment(stmt.value)
            if not (_PARAM_SOURCE.search(source) or _LEAF_SOURCE.search(source)):
                return True
    return False


def _mapping_key(facts, stmt: ast.stmt, attr: ast.Attribute) -> bool:
    """Whether ``stmt`` writes ``X.data[key] = v`` with a key no tensor takes: a string
    (``g.nodes['v'].data['x'] = t``: DGL's feature dict) or a name bound as the key of a ``for
    k, v in m.items()`` / ``for k in m.keys()`` loop in the same function. Such a ``.data``
    is a mapping."""
    target = stmt.targets[0] if isinstance(stmt, ast.Assign) else getattr(stmt, "target", None)
    if not (isinstance(target, ast.Subscript) and target.value is attr):
        return False
    key = target.slice
    if isinstance(key, ast.Constant) and isinstance(key.value, str):
        return True
    if not isinstance(key, ast.Name):
        return False
    for loop in facts.statements(facts.enclosing_function(stmt)):
        if not isinstance(loop, (ast.For, ast.AsyncFor)):
            continue
        it = loop.iter
        if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute) and it.func.attr in ("items", "keys")):
            continue
        bound = loop.target.elts[0] if isinstance(loop.target, ast.Tuple) and loop.target.elts else loop.target
        if isinstance(bound, ast.Name) and bound.id == key.id:
            return True
    return False


_FORWARD_REASON = (
    "written in `forward`, between uses of the tensor by one graph: without `.data` the write "
    "bumps its version and backward through an earlier use raises"
)


def _in_forward(facts, func) -> bool:
    """A module's ``forward`` (or ``__call__``): what it writes in place may already be saved
    for backward by an earlier call in the same graph (a masked conv applied twice). A class
    with no base at all is no module: its ``__call__`` is a plain helper (labml's
    ``WeightDecay``, called from an optimizer's step)."""
    if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)) or func.name not in ("forward", "__call__"):
        return False
    cls = facts.parents.get(func)
    return isinstance(cls, ast.ClassDef) and (func.name == "forward" or bool(cls.bases))


def _receiver_kind(facts, receiver: ast.expr) -> str:
    """``param`` (fix it: a parameter, buffer, gradient or the optimizer's state),
    ``unknown`` (report only) or ``other`` (stay silent)."""
    name = _last_name(receiver)
    if name is None:
        return "unknown"
    if not may_be_torch_data(facts, receiver):
        return "other"
    if PARAMETER_NAME.search(name):
        if isinstance(receiver, ast.Name) and _computed_local(facts, name, receiver):
            return "unknown"
        return "param"
    if _own_parameter(facts, receiver) or optimizer_state(facts, receiver):
        return "param"
    if _NOT_A_TENSOR.search(name):
        return "other"
    if isinstance(receiver, ast.Name) and _loop_over_parameters(facts, name, receiver):
        return "param"
    return "unknown"


class DataMutation(Rule):
    """
    ## What it does
    Finds in-place writes through `.data`: `p.data.copy_(..)`, `p.data.add_(..)`,
    `p.data.mul_(..)`, `p.data.zero_()`, `p.data.normal_(..)`, `p.data[i] = v`,
    `p.data -= lr * g`, and the `out=` of a torch function (`torch.add(a, b, out=p.data)`,
    `torch.clamp(w.data, -1, 1, out=w.data)`, `torch.add(.., out=p.data).clamp_(0, 1)`), on
    parameters, buffers and gradients.

    ## Why is this bad?
    `.data` is an alias that autograd does not track: writes through it skip the version
    counter, so if the tensor was saved for a backward pass, that backward silently uses the
    new values and computes wrong gradients instead of raising (pinned in
    `tests/facts/test_gf304_facts.py`). `with torch.no_grad():` plus the tensor itself is the
    supported way to update parameters.

    ## Example
    ```python
    for p in model.parameters():
        p.data.add_(p.grad, alpha=-lr)
    m.weight.data.normal_(0, 0.02)
    m.bias.data.zero_()
    ```

    ## Use instead
    ```python
    with torch.no_grad():
        for p in model.parameters():
            p.add_(p.grad, alpha=-lr)
        m.weight.normal_(0, 0.02)
        m.bias.zero_()
    ```
    or `@torch.no_grad()` on a function that does nothing else (a weight-init function for
    `model.apply`). A gradient needs no `with`: `p.grad.data.zero_()`, `p.grad.data *= k`,
    `p.grad.data.clamp_(-c, c)` become `p.grad.zero_()`, `p.grad *= k`, `p.grad.clamp_(-c, c)`,
    as torch's own optimizers write them; so does a state dict's entry, a detached tensor
    (`for n, p in delta.state_dict().items(): p.data += base[n]` becomes `p += base[n]`).

    ## Fix safety
    Unsafe: the version counter now applies, so code that overwrote a tensor that a pending
    backward had saved now raises `RuntimeError: ... modified by an inplace operation` instead
    of silently computing wrong gradients. In the ordinary case (an optimizer step, weight
    init, a target-network copy) the values are the same. One finding per `no_grad` the fix
    writes, never one `with` per statement: consecutive writes share one block; an `if/elif`
    whose branches only write (the weight-init loop over `model.modules()`) and a loop whose
    body only writes go in whole when the rest of them computes nothing that could need a
    graph (`if p.grad is None: continue`, `isinstance(m, nn.Conv2d)`, `n = m.kernel_size[0] *
    m.out_channels`, logging, a `torch.distributed` collective such as `dist.all_reduce(p.grad)`)
    and nothing they compute is read after the block; writes
    separated only by such statements, by fresh tensors built without `requires_grad=` (`b =
    torch.zeros(n)`), by integer offsets (`ptr += w.numel()`, a script's `layer_id += 1`) or
    by values computed only from tensors that need no grad (`mask =
    m.weight.data.abs().gt(t).float()`, `pruned += torch.sum(mask)`, `mask[keep] = 1`,
    `cfg.append(int(mask.sum()))`) share one block, and those may be read after it (the same
    values under `no_grad`, pinned in `tests/facts/test_gf304_facts.py`); writes of one block separated only by the construction
    of `torch.nn` layers (`self.bn1 = nn.BatchNorm1d(h)` between two init writes: the same module
    under `no_grad`, pinned there too) share one block as well; consecutive
    loops like that share one `with`; and a function whose whole body would be wrapped (but a
    `return` of an argument) gets `@torch.no_grad()` instead, unless it is a generator or
    coroutine. A lone initialiser that would get a `with` of its own (`w.data.normal_(0,
    0.02)` between layer constructions) becomes the `torch.nn.init` function that runs it under
    `no_grad` (`nn.init.normal_(w, 0, 0.02)`; `uniform_`, `fill_` -> `constant_`, `zero_` ->
    `zeros_`: the same values, pinned in `tests/facts/test_gf304_init_facts.py`), written with
    the file's own `nn`/`init` import. Nested loops whose bodies hold nothing else share one `with` around the outer
    loop. In an optimizer's update (the loops over `self.param_groups` and `group['params']`)
    torch.optim's convention applies: the update's own maths (torch functions, methods of the
    tensors and state it works on, `state['step'] += 1`, helpers of the file that do only
    that) goes under `no_grad` with the writes, so `step()` is decorated and `loss =
    closure()` runs under `torch.enable_grad()`, as torch.optim's `step()` does (the same
    values and losses, pinned in `tests/facts/test_optimizer_update_facts.py`); a call gradfix
    cannot see into (another module's helper, `self.base_optimizer.step()`) keeps the rest of
    the update outside. A loop that also runs a forward pass or a backward keeps them outside the block.
    Inside the block, `.data` reads that are operands of the write go too (`p.copy_(q)` for
    `p.data.copy_(q.data)`: under `no_grad` the same values, and nothing recorded, pinned in
    `tests/facts/test_gf304_data_reads_facts.py`), but not one an in-place method is called
    on (`q.data.t_()` changes only the alias). Inside an existing grad-disabled region `.data`
    is just dropped. So it is on a write to a `.grad` (`p.grad.data.mul_(s)` -> `p.grad.mul_(s)`,
    no `with`) whose operands cannot require grad (constants, names like `lr` or `clip`,
    `.data`/`.grad` reads): an ordinary `.grad` does not require grad, so the in-place op records
    nothing and gives the same values (pinned in `tests/facts/test_gf304_facts.py`); in a block
    that also updates parameters the one `with` holds both. Where the file passes
    `create_graph=` (a `.grad` is then a graph node, and an in-place op on it outside `no_grad`
    would be recorded into that graph, which the `.data` write was not) or an operand may
    require grad (`p.grad.data.add_(p, alpha=wd)`: `p` does), the write is wrapped like any
    other. Only receivers that are surely tensors with autograd state (names like
    `param`, `weight`, `bias`, `grad`, `p`, `w`, or a loop over `.parameters()`) are fixed;
    a bare name assigned from some other computation in the same function (`p =
    F.softmax(x)`: an activation that backward may have saved) and other receivers are
    reported without a fix, and so is every write in a module's `forward` (a masked conv
    applied twice in one graph: without `.data` the write bumps the weight's version and
    backward through the first use raises). Those whose `.data` is usually an
    ordinary attribute (`self.data`, `dataset.data`, a `PackedSequence`, a mapping written with
    string keys or the keys of an `.items()` loop, an object of another array or graph
    library: built by `dgl.*`/`scipy.*`/`pandas.*`... or handed to a `scipy` function) are
    not reported. Nor is a `.data` that is not torch's (`gradfix/analysis/tensor_data.py`): an
    object of a plain class that keeps its value in `self.data` (micrograd's `Value`, defined in
    the file or in a project module), any bare name nothing ties to torch in a file that defines
    such a class, and every receiver in a file that imports modules but never torch (no star
    import, no mention of `torch`). There the rewrite would be harmful: `p += -lr * p.grad` on a
    `Value` rebinds `p` and the parameters are never updated.
    Rebinding `.data` (`w.data = w.data[:, keep]`, a shape change) and reading it are not
    flagged.

    An `out=` write becomes `torch.add(a, b, out=p)` inside the block: outside `no_grad`,
    `out=` a tensor that requires grad raises (`functions with out=... arguments don't support
    automatic differentiation`); inside it the values are the same and `p` stays a leaf
    parameter (pinned in `tests/facts/test_gf304_out_facts.py`). When the result has another
    shape than `p`, `out=p.data` resizes only the alias while `out=p` resizes `p` (torch warns
    about both). The `out=` of a factory that builds a tensor from sizes (`torch.randn(3,
    out=w.data)`, `zeros`, `full`, `arange`, `normal(mean, std, size)`...) is reported without
    a fix: its `requires_grad=False` default reaches the `out=` tensor, so under `no_grad`
    `torch.zeros(3, out=w)` silently turns `w.requires_grad` off (and `torch.randn` raises);
    write `w.normal_()` / `w.zero_()` under `no_grad` instead. An `out=` write whose result is
    also bound (`y = torch.add(a, b, out=p.data)`) is not flagged, as `y = p.data.add_(1)` is
    not: the fix would change what `y` is.
    """

    code = "GF304"
    name = "data-mutation"
    summary = "In-place write through `.data` bypasses autograd's checks"
    fix_safety = FixSafety.UNSAFE
    triggers = ("data",)
    # A write: `.data[i] =`, `.data += `, `.data.add_(..)`, `.data.narrow(..).fill_(..)`, or a
    # torch function's `out=`.
    requires = (
        (
            attribute("data", rf"(?:\[|\.{GAP}(?:\w+_|{'|'.join(sorted(STORAGE_VIEWS))}){GAP}\(|[-+*/@%&|^<>]*=)"),
            rf"out(?<![\w.]out){GAP}=",
        ),
    )
    uses_project = True  # is `.data` torch's? (a plain `Value` class of another file)

    VALID = [
        Valid(
            """
            def prune(w, keep):
                w.data = w.data[:, keep]
            """
        ),
        Valid(
            """
            def show(x):
                print(x.data.cpu().numpy())
                y = x.data[0]
            """
        ),
        Valid(
            """
            def log(loss):
                return loss.data[0]
            """
        ),
        Valid(
            """
            def f(p):
                q = p.data.clone().add_(1)
                return q
            """
        ),
        Valid(
            """
            import torch
            def f(p, v):
                with torch.no_grad():
                    p.copy_(v)
            """
        ),
        # `.data` as an ordinary attribute.
        Valid(
            """
            class Buf:
                def reset(self):
                    self.data.zero_()
            """
        ),
        Valid(
            """
            def norm(train_set):
                train_set.data.sub_(0.5).div_(0.5)
            """
        ),
        Valid(
            """
            def f(packed):
                packed.data.mul_(2)
            """
        ),
        # A mapping called `data` (DGL's node/edge features): string keys, keys of `.items()`.
        Valid(
            """
            import torch
            def f(g):
                g.nodes['v1'].data['x'] = torch.randn(5, 3)
            """
        ),
        Valid(
            """
            def to_graph(g, store):
                for attr, value in store.items():
                    g.nodes['paper'].data[attr] = value
            """
        ),
        Valid(
            """
            import dgl, torch
            def to_graph(edges, files, feats):
                g = dgl.heterograph(edges)
                for key in files:
                    for ntype in feats[key]:
                        g.nodes[ntype].data[key[5:]] = torch.from_numpy(feats[key][ntype])
            """
        ),
        # A SciPy sparse matrix: `.data` is its own values.
        Valid(
            """
            from scipy import sparse
            def set_diag(lap, value):
                if sparse.isspmatrix(lap):
                    lap = lap.tocoo()
                    lap.data[lap.row == lap.col] = value
                return lap
            """
        ),
        # `out=` of a NumPy function, and of a torch function into an ordinary attribute.
        Valid(
            """
            import numpy as np
            import torch
            class Buf:
                def fill(self, a, b, weight):
                    np.add(a, b, out=weight.data)
                    torch.add(a, b, out=self.data)
            """
        ),
        # A plain class that keeps its value in `self.data` (micrograd's `Value`): its objects and,
        # in that file, names nothing ties to torch are not tensors (`p += ..` would rebind `p`).
        Valid(
            """
            import torch
            class Value:
                def __init__(self, data):
                    self.data = data
                    self.grad = 0.0
            a = Value(2.0)
            a.data += 0.01 * a.grad
            def step(params, lr):
                for p in params:
                    p.data += -lr * p.grad
            """
        ),
        # A file that imports modules but never torch.
        Valid(
            """
            import math
            from engine import Value
            def step(model, lr):
                for p in model.parameters():
                    p.data += -lr * p.grad
            """
        ),
    ]
    INVALID = [
        # a write to a view of `.data` (one sharing its memory) writes `.data`
        Invalid(
            """
            import torch

            def reset_forget_bias(lstm, hidden):
                for name, p in lstm.named_parameters():
                    if "bias" in name:
                        p.data.narrow(0, hidden, hidden).fill_(1.0)
            """,
            """
            import torch

            @torch.no_grad()
            def reset_forget_bias(lstm, hidden):
                for name, p in lstm.named_parameters():
                    if "bias" in name:
                        p.narrow(0, hidden, hidden).fill_(1.0)
            """,
        ),
        # `out=` writes in place as an in-place method does; the `.data` operands go too.
        Invalid(
            """
            import torch as T

            def sgd(model, lr):
                for p in model.parameters():
                    T.add(p.data, p.grad.data, alpha=-lr, out=p.data)
            """,
            """
            import torch as T

            @T.no_grad()
            def sgd(model, lr):
                for p in model.parameters():
                    T.add(p, p.grad, alpha=-lr, out=p)
            """,
        ),
        Invalid(
            """
            import torch
            from torch import clamp

            def clip(model, log):
                clamp(model.weight.data, -1, 1, out=model.weight.data)
                log.write("clipped")
                return model
            """,
            """
            import torch
            from torch import clamp

            def clip(model, log):
                with torch.no_grad():
                    clamp(model.weight, -1, 1, out=model.weight)
                log.write("clipped")
                return model
            """,
        ),
        # A factory's `out=` (its `requires_grad=False` would reach `w`): reported without a fix.
        Invalid(
            """
            import torch
            def reinit(w):
                torch.randn(3, 4, out=w.data)
            """,
            None,
        ),
        # A star import may bring torch in: still reported.
        Invalid(
            """
            from blocks import *
            def init(m):
                m.weight.data.normal_(0, 0.02)
            """,
            """
            from blocks import *
            import torch

            @torch.no_grad()
            def init(m):
                m.weight.normal_(0, 0.02)
            """,
        ),
        # Next to a plain `Value` class, a leaf built by torch is still a tensor.
        Invalid(
            """
            import torch
            class Value:
                def __init__(self, data):
                    self.data = data
            w = torch.randn(3, requires_grad=True)
            w.data -= 0.1 * w.grad
            """,
            """
            import torch
            class Value:
                def __init__(self, data):
                    self.data = data
            w = torch.randn(3, requires_grad=True)
            with torch.no_grad():
                w -= 0.1 * w.grad
            """,
        ),
        Invalid(
            """
            import torch

            def sgd(model, lr):
                for p in model.parameters():
                    p.data.add_(-lr, p.grad.data)  # old signature kept
            """,
            """
            import torch

            @torch.no_grad()
            def sgd(model, lr):
                for p in model.parameters():
                    p.add_(-lr, p.grad)  # old signature kept
            """,
        ),
        Invalid(
            """
            import torch as T

            def init(m):
                # DCGAN init
                m.weight.data.normal_(1.0, 0.02)
                m.bias.data.fill_(0)
                print(m)
            """,
            """
            import torch as T

            @T.no_grad()
            def init(m):
                # DCGAN init
                m.weight.normal_(1.0, 0.02)
                m.bias.fill_(0)
                print(m)
            """,
        ),
        Invalid(
            """
            import torch
            @torch.no_grad()
            def step(params, lr):
                for p in params:
                    p.data -= lr * p.grad
                    p.grad.data.zero_()
            """,
            """
            import torch
            @torch.no_grad()
            def step(params, lr):
                for p in params:
                    p -= lr * p.grad
                    p.grad.zero_()
            """,
            count=2,
        ),
        Invalid(
            """
            def soft_update(target, source, tau):
                for t, s in zip(target.parameters(), source.parameters()):
                    t.data.copy_(t.data * (1.0 - tau) + s.data * tau)
            """,
            """
            import torch

            @torch.no_grad()
            def soft_update(target, source, tau):
                for t, s in zip(target.parameters(), source.parameters()):
                    t.copy_(t * (1.0 - tau) + s * tau)
            """,
        ),
        # Writes in the branches of an `if` in a loop: the function is decorated, once.
        Invalid(
            """
            import torch
            import torch.nn as nn

            def init_weights(model):
                for m in model.modules():
                    if isinstance(m, nn.Conv2d):
                        m.weight.data.normal_(0, 0.02)
                        m.bias.data.zero_()
                    elif isinstance(m, nn.BatchNorm2d):
                        m.weight.data.fill_(1)
                        m.bias.data.zero_()
            """,
            """
            import torch
            import torch.nn as nn

            @torch.no_grad()
            def init_weights(model):
                for m in model.modules():
                    if isinstance(m, nn.Conv2d):
                        m.weight.normal_(0, 0.02)
                        m.bias.zero_()
                    elif isinstance(m, nn.BatchNorm2d):
                        m.weight.fill_(1)
                        m.bias.zero_()
            """,
        ),
        # Two consecutive loops share one `with` (other work follows them); a `.data` read as
        # an operand goes too.
        Invalid(
            """
            import torch
            def copy(src, dst, log):
                for p in dst.parameters():
                    p.data.zero_()
                # then copy
                for p, q in zip(src.parameters(), dst.parameters()):
                    p.data.copy_(q.data)
                log.write("done")
            """,
            """
            import torch
            def copy(src, dst, log):
                with torch.no_grad():
                    for p in dst.parameters():
                        p.zero_()
                    # then copy
                    for p, q in zip(src.parameters(), dst.parameters()):
                        p.copy_(q)
                log.write("done")
            """,
        ),
        # The ResNet init: the arithmetic in the loop stays inside (nothing outside reads `n`).
        Invalid(
            """
            import math
            import torch
            import torch.nn as nn
            class Net(nn.Module):
                def reset(self):
                    for m in self.modules():
                        if isinstance(m, nn.Conv2d):
                            n = m.kernel_size[0] * m.kernel_size[1] * m.out_channels
                            m.weight.data.normal_(0, math.sqrt(2. / n))
                        elif isinstance(m, nn.Linear):
                            m.bias.data.zero_()
                    self.fc = nn.Linear(2, 2)
            """,
            """
            import math
            import torch
            import torch.nn as nn
            class Net(nn.Module):
                def reset(self):
                    with torch.no_grad():
                        for m in self.modules():
                            if isinstance(m, nn.Conv2d):
                                n = m.kernel_size[0] * m.kernel_size[1] * m.out_channels
                                m.weight.normal_(0, math.sqrt(2. / n))
                            elif isinstance(m, nn.Linear):
                                m.bias.zero_()
                    self.fc = nn.Linear(2, 2)
            """,
        ),
        # A tensor computed in the loop is read after it (under `no_grad` it would have no
        # history): only the write is wrapped.
        Invalid(
            """
            import torch
            def init(model):
                for m in model.modules():
                    ref = m.weight * 2
                    m.weight.data.mul_(0.5)
                return ref
            """,
            """
            import torch
            def init(model):
                for m in model.modules():
                    ref = m.weight * 2
                    with torch.no_grad():
                        m.weight.mul_(0.5)
                return ref
            """,
        ),
        # An integer read after the loop is the same under `no_grad`: the loop goes in whole.
        Invalid(
            """
            import torch
            def init(model):
                for m in model.modules():
                    n = m.weight.size(1) * 2
                    m.weight.data.normal_(0, 1 / n)
                return n
            """,
            """
            import torch
            def init(model):
                with torch.no_grad():
                    for m in model.modules():
                        n = m.weight.size(1) * 2
                        m.weight.normal_(0, 1 / n)
                return n
            """,
        ),
        # A generator: never decorated (the mode would leak while it is suspended).
        Invalid(
            """
            import torch
            def reset(params):
                for p in params:
                    p.data.mul_(0.9)
                    yield p
            """,
            """
            import torch
            def reset(params):
                for p in params:
                    with torch.no_grad():
                        p.mul_(0.9)
                    yield p
            """,
        ),
        Invalid(
            """
            import torch
            def mask(weight, idx):
                weight.data[idx] = 0
            """,
            """
            import torch
            @torch.no_grad()
            def mask(weight, idx):
                weight[idx] = 0
            """,
        ),
        # Writes in one loop body share one `with` around the loop, inside the training loop.
        Invalid(
            """
            import torch
            def train(model, loader, lr):
                for x in loader:
                    model(x).sum().backward()
                    for p in model.parameters():
                        if p.grad is None:
                            continue
                        p.data.add_(p.grad, alpha=-lr)
                        p.grad.data.zero_()
            """,
            """
            import torch
            def train(model, loader, lr):
                for x in loader:
                    model(x).sum().backward()
                    with torch.no_grad():
                        for p in model.parameters():
                            if p.grad is None:
                                continue
                            p.add_(p.grad, alpha=-lr)
                            p.grad.zero_()
            """,
        ),
        # Other work in the loop body: the `with` holds the write only.
        Invalid(
            """
            import torch
            def train(model, loader):
                for x in loader:
                    model(x).sum().backward()
                    model.weight.data.clamp_(0, 1)
            """,
            """
            import torch
            def train(model, loader):
                for x in loader:
                    model(x).sum().backward()
                    with torch.no_grad():
                        model.weight.clamp_(0, 1)
            """,
        ),
        # A set-up section: fresh tensors (no `requires_grad=`) and an integer offset between
        # the writes give the same values under `no_grad`, so one `with` holds the section
        # (without the `conv.train()` call, which is not grad-free work, the whole body would be
        # and `load` would be decorated).
        Invalid(
            """
            import torch
            def load(conv, weights, ptr):
                conv.train()
                n = conv.weight.numel()
                w = torch.from_numpy(weights[ptr:ptr + n]).view_as(conv.weight)
                conv.weight.data.copy_(w)
                b = torch.zeros(conv.out_channels)
                conv.bias.data.copy_(b)
                offset = 0
                offset += n
                if conv.bias is not None:
                    conv.bias.data.add_(1)
                print(b, offset)
            """,
            """
            import torch
            def load(conv, weights, ptr):
                conv.train()
                n = conv.weight.numel()
                w = torch.from_numpy(weights[ptr:ptr + n]).view_as(conv.weight)
                with torch.no_grad():
                    conv.weight.copy_(w)
                    b = torch.zeros(conv.out_channels)
                    conv.bias.copy_(b)
                    offset = 0
                    offset += n
                    if conv.bias is not None:
                        conv.bias.add_(1)
                print(b, offset)
            """,
        ),
        # A `.grad` does not require grad: `.data` goes, no `with` (torch's optimizers write
        # `p.grad.zero_()`); in a loop that also updates the parameter, the one `with` holds both.
        Invalid(
            """
            import torch
            def train(model, loader, opt, clip):
                for x in loader:
                    model(x).sum().backward()
                    for p in model.parameters():
                        p.grad.data.clamp_(-clip, clip)
                        p.grad.data *= 0.5
                    opt.step()
            """,
            """
            import torch
            def train(model, loader, opt, clip):
                for x in loader:
                    model(x).sum().backward()
                    for p in model.parameters():
                        p.grad.clamp_(-clip, clip)
                        p.grad *= 0.5
                    opt.step()
            """,
            count=2,
        ),
        # An operand that requires grad (the parameter itself) keeps the `no_grad`.
        Invalid(
            """
            import torch
            def decay(params, wd):
                for p in params:
                    p.grad.data.add_(p, alpha=wd)
            """,
            """
            import torch
            @torch.no_grad()
            def decay(params, wd):
                for p in params:
                    p.grad.add_(p, alpha=wd)
            """,
        ),
        # After `create_graph=True` a `.grad` is a graph node: the `no_grad` stays.
        Invalid(
            """
            import torch
            def hvp(model, loss):
                loss.backward(create_graph=True)
                for p in model.parameters():
                    p.grad.data.zero_()
                return model
            """,
            """
            import torch
            def hvp(model, loss):
                loss.backward(create_graph=True)
                with torch.no_grad():
                    for p in model.parameters():
                        p.grad.zero_()
                return model
            """,
        ),
        # Receiver of unknown kind: reported without a fix.
        Invalid(
            """
            def f(h):
                h.data.zero_()
            """,
            None,
        ),
        # `torch` is a local here: reported without a fix.
        Invalid(
            """
            def f(p, torch):
                p.data.zero_()
            """,
            None,
        ),
        # `p` is an activation here (softmax saves its output): reported without a fix.
        Invalid(
            """
            import torch
            def f(x):
                p = torch.softmax(x, -1)
                p.data.clamp_(1e-6, 1)
                return p
            """,
            None,
        ),
        # A leaf made to require grad (the classic tutorial's manual SGD): fixed.
        Invalid(
            """
            import torch
            w1 = torch.randn(3, 4, requires_grad=True)
            w1.data -= 0.1 * w1.grad
            """,
            """
            import torch
            w1 = torch.randn(3, 4, requires_grad=True)
            with torch.no_grad():
                w1 -= 0.1 * w1.grad
            """,
        ),
        # NumPy's testing helpers take tensors: the receiver is still a tensor (reported).
        Invalid(
            """
            import numpy as np
            import torch
            def f(h, ref):
                np.testing.assert_allclose(h, ref)
                h.data.zero_()
            """,
            None,
        ),
        # A one-line `if` whose test computes no graph moves under `no_grad` whole.
        Invalid(
            """
            def f(p, reset):
                if reset: p.data.zero_()
            """,
            """
            import torch

            @torch.no_grad()
            def f(p, reset):
                if reset: p.zero_()
            """,
        ),
        # ... but not one whose test records a graph: reported without a fix.
        Invalid(
            """
            def f(p, model, x):
                if model(x).sum() > 0: p.data.zero_()
            """,
            None,
        ),
        # Memory management (a sharded parameter refilled while autograd holds it): the write must
        # stay invisible to autograd, so it is reported without a fix.
        Invalid(
            """
            def fetch(params, flat):
                offset = 0
                for p in params:
                    n = p.numel_full
                    p.data.storage().resize_(n)
                    p.data[:] = flat[offset:offset + n].view_as(p)
                    offset += n
            """,
            None,
        ),
        # The file imports `no_grad` by name: the fix writes it as the file does, no `import torch`.
        Invalid(
            """
            from torch import no_grad
            import torch.nn as nn

            def init(model: nn.Module):
                for p in model.parameters():
                    p.data.uniform_(-0.1, 0.1)
            """,
            """
            from torch import no_grad
            import torch.nn as nn

            @no_grad()
            def init(model: nn.Module):
                for p in model.parameters():
                    p.uniform_(-0.1, 0.1)
            """,
        ),
        # A legacy optimizer's update: the whole update goes under `no_grad` (torch.optim's own
        # `step()` is decorated) and the closure re-evaluating the loss keeps grad mode.
        Invalid(
            """
            import torch

            class SGDMomentum(torch.optim.Optimizer):
                def step(self, closure=None):
                    loss = None
                    if closure is not None:
                        loss = closure()
                    for group in self.param_groups:
                        for p in group["params"]:
                            state = self.state[p]
                            if "buf" not in state:
                                state["buf"] = torch.zeros_like(p.data)
                            buf = state["buf"]
                            buf.mul_(group["momentum"]).add_(p.grad.data)
                            p.data.add_(buf, alpha=-group["lr"])
                    return loss
            """,
            """
            import torch

            class SGDMomentum(torch.optim.Optimizer):
                @torch.no_grad()
                def step(self, closure=None):
                    loss = None
                    if closure is not None:
                        with torch.enable_grad():
                            loss = closure()
                    for group in self.param_groups:
                        for p in group["params"]:
                            state = self.state[p]
                            if "buf" not in state:
                                state["buf"] = torch.zeros_like(p.data)
                            buf = state["buf"]
                            buf.mul_(group["momentum"]).add_(p.grad.data)
                            p.add_(buf, alpha=-group["lr"])
                    return loss
            """,
        ),
        # A lone initialiser between layer constructions: torch.nn.init's own function, which
        # runs under `no_grad` (the same values), not a `with` per statement.
        Invalid(
            """
            import torch
            from torch import nn

            class Net(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.fc = nn.Linear(4, 8)
                    self.fc.weight.data.normal_(0, 0.1)
                    self.out = nn.Linear(8, 2)
                    self.out.bias.data.zero_()
            """,
            """
            import torch
            from torch import nn

            class Net(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.fc = nn.Linear(4, 8)
                    nn.init.normal_(self.fc.weight, 0, 0.1)
                    self.out = nn.Linear(8, 2)
                    nn.init.zeros_(self.out.bias)
            """,
            count=2,
        ),
    ]

    def check(self, facts):
        from gradfix.engine import _suppressed  # the engine's own reading of ignore comments

        to_wrap: list[tuple[ast.stmt, ast.Attribute]] = []
        for func in [None, *facts.functions]:
            for stmt in facts.statements(func):
                attr = _written_data(facts, stmt)
                if attr is None:
                    continue
                kind = "other" if _mapping_key(facts, stmt, attr) else _receiver_kind(facts, attr.value)
                if kind == "other":
                    continue
                receiver = facts.segment(attr.value)
                disabled = facts.grad_mode_at(stmt) == "disabled"
                wrappable = _unit(facts, stmt) is not None and torch_reachable(facts, stmt, "no_grad")
                factory = _factory_write(facts, stmt)
                if manages_storage(facts, func):
                    yield self.report(facts, stmt, self._message(receiver), no_fix=_STORAGE_REASON)
                    continue
                if _in_forward(facts, func):
                    yield self.report(facts, stmt, self._message(receiver), no_fix=_FORWARD_REASON)
                    continue
                if lazy_parameter(facts, attr.value):
                    yield self.report(facts, stmt, self._message(receiver), no_fix=_LAZY_REASON)
                    continue
                if _in_place_method(facts, stmt, attr) == "":
                    yield self.report(facts, stmt, self._message(receiver), no_fix=_OUTER_NAME_REASON)
                    continue
                if kind == "param" and not disabled and wrappable and not factory:
                    if not _suppressed(self.report(facts, stmt, ""), facts.lines):
                        to_wrap.append((stmt, attr))
                    continue
                if kind == "param" and not disabled and _grad_write(facts, stmt, attr):
                    yield self._drop_grad_data(facts, stmt, attr)
                    continue
                fixable = kind == "param" and disabled and not factory
                if factory:
                    why = "a factory's `out=` on the tensor itself would clear its `requires_grad`"
                elif kind != "param":
                    why = f"`{receiver}` is not known to be a parameter, buffer or gradient: the rewrite depends on what it is"
                elif _unit(facts, stmt) is None:
                    why = "the write shares its line with other statements: no block can take it alone"
                elif not wrappable:
                    why = "`torch` is not bound where the write runs: no `torch.no_grad()` to write"
                else:
                    why = None
                yield self.report(
                    facts,
                    stmt,
                    self._message(receiver),
                    no_fix=None if fixable else why,
                    fix=fixable,
                    fix_title="Drop `.data` (already in a grad-disabled region)",
                    data=("drop", facts.span(attr), _in_place_method(facts, stmt, attr)) if fixable else None,
                )
        yield from self._runs(facts, to_wrap)

    def _runs(self, facts, to_wrap):
        """One finding per ``no_grad`` the fix writes (:func:`plan_no_grad`): consecutive
        writes of one block share it, writes in the branches of an ``if`` and in one loop body
        share one around the loop when the rest of it computes nothing, consecutive loops share
        one, and a function whose whole body would be wrapped is decorated."""
        by_function: dict = {}
        for stmt, attr in to_wrap:  # in source order, function by function
            by_function.setdefault(facts.function_of.get(stmt), []).append((stmt, attr))
        for func, writes in by_function.items():
            groups = self._groups(facts, writes)

            def joins(s, func=func):
                return (
                    records_no_graph(facts, s)
                    or updates_optimizer_state(facts, s)
                    # an optimizer's `loss = closure()`, kept under `torch.enable_grad()`
                    or bool(closure_evaluation(facts, func, s))
                    or _returns_unchanged(facts, func, s)
                )

            def header_ok(s):
                return header_records_no_graph(facts, s) or header_updates_optimizer_state(facts, s)

            plan = plan_no_grad(
                facts,
                func,
                groups,
                joins=joins,
                header_ok=header_ok,
                outside_ok=lambda before, after: all(joinable_statement(s, joins, header_ok) for s in [*before, *after]),
                private=True,
            )
            if plan.decorate and all(_grad_write(facts, s, a) for s, a in writes):
                yield from (self._drop_grad_data(facts, s, a) for s, a in writes)
                continue
            if plan.decorate:
                title = f"Decorate `{func.name}` with `@torch.no_grad()` and drop `.data`"
                kept = self._closures(facts, func, body_without_docstring(func))
                if kept:
                    title += "; the closure runs under `torch.enable_grad()`"
                yield self._finding(facts, writes, ("decorate", facts.span(func.body[0]), kept), title)
                continue
            for run in plan.runs:
                inside = [(s, a) for s, a in writes if any(is_within(facts, s, r) for r in run)]
                if all(_grad_write(facts, s, a) for s, a in inside):  # `p.grad.zero_()`: no `with`
                    yield from (self._drop_grad_data(facts, s, a) for s, a in inside)
                    continue
                init = _init_call(facts, run, inside)
                if init is not None:  # a lone `w.data.normal_(0, 0.02)`: torch.nn.init's own form
                    function, prefix = init
                    title = f"Use `torch.nn.init.{function}` (it runs under `no_grad`) instead of `.data`"
                    yield self._finding(facts, inside, ("init", facts.span(inside[0][0]), function, prefix), title)
                    continue
                where = "the loop" if isinstance(run[0], (ast.For, ast.While)) and len(run) == 1 else "the writes"
                title = f"Wrap {where} in `with torch.no_grad():` and drop `.data`"
                kept = self._closures(facts, func, run)
                if kept:
                    title += "; the closure runs under `torch.enable_grad()`"
                yield self._finding(facts, inside, ("wrap", tuple(facts.span(s) for s in run), kept), title)

    @staticmethod
    def _closures(facts, func, stmts) -> tuple:
        """The spans of an optimizer's ``loss = closure()`` among ``stmts`` and the statements
        in them: they keep grad mode, as in torch.optim's ``step()``."""
        found = [
            k
            for s in stmts
            for node in ast.walk(s)
            if isinstance(node, ast.stmt)
            for k in closure_evaluation(facts, func, node) or ()
        ]
        return tuple(facts.span(k) for k in dict.fromkeys(found))

    @staticmethod
    def _groups(facts, writes) -> list[list[ast.stmt]]:
        """The runs of statements ``writes`` need ``no_grad`` for: writes of one block next to
        each other; and writes separated only by the construction of the layers they initialise
        (`self.bn1 = nn.BatchNorm1d(h)`), with those constructions, unless one side is a lone
        write that becomes a ``torch.nn.init`` call (no block needed for it)."""
        groups: list[list[ast.stmt]] = []
        gaps: list[list[ast.stmt] | None] = []  # the statements between a group and the one before
        previous = None
        for write, _ in writes:
            stmt = _unit(facts, write)
            block = statement_block(facts, stmt)
            body = getattr(*block) if block else []
            index = next((i for i, s in enumerate(body) if s is stmt), None)
            same = previous is not None and previous[0] == block and None not in (index, previous[1])
            if groups and same and index == previous[1] + 1:
                groups[-1].append(stmt)
            else:
                between = body[previous[1] + 1 : index] if same else None
                gaps.append(between if between and all(builds_torch_module(facts, s) for s in between) else None)
                groups.append([stmt])
            previous = (block, index)
        attr_of = dict(writes)

        def lone_init(group):
            return len(group) == 1 and group[0] in attr_of and _init_call(facts, group, [(group[0], attr_of[group[0]])]) is not None

        merged = groups[:1]
        for group, between in zip(groups[1:], gaps[1:]):
            if between is not None and not lone_init(group) and not lone_init(merged[-1]):
                merged[-1] = [*merged[-1], *between, *group]
            else:
                merged.append(group)
        return merged

    def _drop_grad_data(self, facts, stmt, attr):
        return self.report(
            facts,
            stmt,
            self._message(facts.segment(attr.value)),
            fix_title=f"Drop `.data`: {_NEEDS_NO_GRAD_REASON[_detached(facts, attr)]}, no `no_grad` needed",
            data=("drop", facts.span(attr), _in_place_method(facts, stmt, attr)),
        )

    def _finding(self, facts, run, where, title):
        first = run[0][0]
        receivers = ", ".join(dict.fromkeys(f"`{facts.segment(a.value)}`" for _, a in run))
        message = self._message(receivers)
        if len(run) > 1:
            message += f" ({len(run)} writes, lines {first.lineno}-{run[-1][0].end_lineno})"
        attrs = tuple(facts.span(a) for stmt, attr in run for a in (attr, *_data_reads(facts, stmt, attr)))
        methods = tuple((facts.span(attr), m) for stmt, attr in run if (m := _in_place_method(facts, stmt, attr)))
        return self.report(facts, first, message, fix_title=title, data=(*where, attrs, methods))

    @staticmethod
    def _message(receiver: str) -> str:
        if not receiver.startswith("`"):
            receiver = f"`{receiver}`"
        return f"in-place write through `.data` of {receiver} bypasses autograd's version checks"

    def fix(self, finding, ctx):
        from gradfix.fixer import Edit

        mode, *where = finding.data
        if mode == "drop":
            span, method = where
            attr = ctx.node_at(span, cst.Attribute)
            if method:
                aug = ctx.parent(attr)
                return [Edit(aug, _method_call(attr.value, method, aug.value))]
            return [Edit(attr, attr.value)]
        if mode == "init":
            span, function, prefix, _, _ = where
            call = ctx.node_at(span, cst.Expr).value  # on its own line or `if c: w.data.zero_()`
            tensor = call.func.value.value  # `w` of `w.data.normal_`
            init = prefix or f"{ctx.torch_name()}.nn.init"
            new_call = call.with_changes(func=ctx.expr(f"{init}.{function}"), args=[cst.Arg(tensor), *call.args])
            if call.args:  # `normal_(0, 0.02)` -> `normal_(w, 0, 0.02)`: a comma after the tensor
                new_call = new_call.with_changes(args=[cst.Arg(tensor, comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))), *call.args])
            return [Edit(call, new_call)]
        spans, kept_spans, attr_spans, method_spans = where
        targets = {ctx.node_at(s, cst.Attribute) for s in attr_spans}
        kept = {ctx.node_at(s, cst.BaseStatement): lambda stmt: grad_with(ctx, "enable_grad", [stmt]) for s in kept_spans}
        methods = {ctx.node_at(s, cst.Attribute): m for s, m in method_spans}
        rewrite = _rewrite(targets, kept, methods)
        if mode == "decorate":
            return decorate_with_no_grad(ctx, spans, lambda s: s.visit(rewrite))
        return wrap_in_no_grad(ctx, spans, lambda s: s.visit(rewrite))

    @staticmethod
    def contract():
        # gradfix verify: values unchanged; autograd's version check may now raise where the
        # original silently overwrote a tensor saved for backward.
        from gradfix.verify.contract import Contract, NewErrorOnly

        return Contract(
            "values unchanged; overwriting a saved tensor now raises",
            may_differ=("exception",),
            expect=(NewErrorOnly("RuntimeError", "modified by an inplace operation"),),
            downstream=True,
        )


def _unit(facts, stmt: ast.stmt) -> ast.stmt | None:
    """The statement that moves under ``no_grad`` for the write ``stmt``: itself, or the
    one-line ``if`` it is the body of when that ``if``'s test computes no graph (``if m.bias is
    not None: m.bias.data.zero_()``); None when it cannot move into a block."""
    if alone_on_its_lines(facts, stmt, stmt):
        return stmt
    owner = one_line_if(facts, stmt)
    return owner if owner is not None and header_records_no_graph(facts, owner) else None


def _data_reads(facts, stmt: ast.stmt, written: ast.Attribute) -> list[ast.Attribute]:
    """The ``.data`` reads among a write's operands (``p.data.copy_(q.data)``, ``p.data -= lr *
    p.grad.data``) that the fix drops with the written one: under ``no_grad``, ``q`` gives the
    same values and records nothing (pinned in tests/facts/test_gf304_data_reads_facts.py).
    Kept: a ``.data`` that an in-place method is called on (``q.data.t_()`` changes only the
    alias, ``q.t_()`` would change ``q``), and one whose receiver may not be a tensor."""
    found = []
    for node in ast.walk(stmt):
        if not (isinstance(node, ast.Attribute) and node.attr == "data" and isinstance(node.ctx, ast.Load)) or node is written:
            continue
        parent = facts.parents.get(node)
        if isinstance(parent, ast.Attribute) and parent.attr.endswith("_"):
            continue
        if _receiver_kind(facts, node.value) == "param" and not is_within(facts, written, node):
            found.append(node)
    return found


_NEEDS_NO_GRAD_REASON = {False: "a `.grad` does not require grad", True: "a detached tensor does not require grad"}


def _written_tensor(attr: ast.Attribute) -> ast.expr:
    """The tensor whose ``.data`` ``attr`` is, items aside (``p.grad.data[mask]`` -> ``p.grad``)."""
    receiver = attr.value
    while isinstance(receiver, ast.Subscript):
        receiver = receiver.value
    return receiver


def _detached(facts, attr: ast.Attribute) -> bool:
    """The tensor behind ``attr`` (a ``X.data``) is a detached alias (a state dict's)."""
    found = origin(facts, _written_tensor(attr))
    return found is not None and found.kind == DETACHED


def _grad_write(facts, stmt: ast.stmt, attr: ast.Attribute) -> bool:
    """Whether ``stmt`` writes through ``X.grad.data`` with operands that cannot require grad,
    in a file where no ``.grad`` can (no ``create_graph=``), or through the ``.data`` of a
    detached tensor (a state dict's) with such operands: then ``X.grad.mul_(s)`` with no
    ``no_grad`` records nothing, like the ``.data`` write, and gives the same values (pinned in
    tests/facts/test_gf304_facts.py). This is what torch's own optimizers write
    (``p.grad.zero_()``)."""
    receiver = _written_tensor(attr)
    if _detached(facts, attr):
        owner = receiver  # `for name, p in model.state_dict().items(): p.data += ..`: a detached alias
    elif not (isinstance(receiver, ast.Attribute) and receiver.attr == "grad") or grads_may_require_grad(facts):
        return False
    else:
        owner = receiver.value
    while isinstance(owner, (ast.Attribute, ast.Subscript)):
        owner = owner.value
    owner_name = owner.id if isinstance(owner, ast.Name) else None
    operands: list[ast.AST] = []
    if isinstance(stmt, ast.Expr):
        call = stmt.value
        while isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr in _INPLACE:
            operands += [*call.args, *(k.value for k in call.keywords)]
            call = call.func.value
    elif isinstance(stmt, ast.AugAssign):
        operands.append(stmt.value)
    else:  # `p.grad.data[mask] = 0`: an index is an integer or bool tensor, which cannot require grad
        operands.append(stmt.value)
    return all(grad_free_operand(facts, e, owner_name) for e in operands)


def _returns_unchanged(facts, func, stmt: ast.stmt) -> bool:
    """``return`` / ``return name`` of a value nothing under the decorator computes: a
    parameter the function never rebinds (``init(m)`` hands the module back), or a name bound
    only to constants and by a closure evaluation (``loss = None`` ... ``loss = closure()``)."""
    if not isinstance(stmt, ast.Return):
        return False
    if stmt.value is None:
        return True
    if not isinstance(stmt.value, ast.Name):
        return False
    name = stmt.value.id
    params = {a.arg for a in (*func.args.posonlyargs, *func.args.args, *func.args.kwonlyargs)}
    binders = [facts.parents.get(n) for n in ast.walk(func) if isinstance(n, ast.Name) and n.id == name and not isinstance(n.ctx, ast.Load)]
    if name in params:
        return not binders
    return bool(binders) and all(
        isinstance(b, ast.Assign) and (isinstance(b.value, ast.Constant) or closure_evaluation(facts, func, b)) for b in binders
    )


def _rewrite(targets, wrap=None, methods=None):
    """A transformer that rewrites ``X.data`` -> ``X`` for the given original ``Attribute``
    nodes (``w.data -= v`` -> ``w.sub_(v)`` for those in ``methods``, see
    :func:`_in_place_method`) and replaces each statement in ``wrap`` (original node -> builder)
    by what its builder makes of it (the class is built on first use: libcst loads lazily)."""
    wrap = wrap or {}
    methods = methods or {}

    class Rewrite(cst.CSTTransformer):
        def leave_Attribute(self, original_node, updated_node):
            return updated_node.value if original_node in targets else updated_node

        def leave_AugAssign(self, original_node, updated_node):
            method = methods.get(original_node.target)
            return _method_call(updated_node.target, method, updated_node.value) if method else updated_node

        def leave_SimpleStatementLine(self, original_node, updated_node):
            build = wrap.get(original_node)
            return build(updated_node) if build else updated_node

    return Rewrite()


# `w.data -= v` -> `w.sub_(v)`: the in-place method of each augmented assignment
_AUG_METHODS = {ast.Add: "add_", ast.Sub: "sub_", ast.Mult: "mul_", ast.Div: "div_", ast.Pow: "pow_"}
_OUTER_NAME_REASON = "without `.data` the assignment would bind a local name in place of the outer tensor"


def _in_place_method(facts, stmt: ast.stmt, attr: ast.Attribute) -> str | None:
    """For ``w.data -= v`` in a function where ``w`` is not its own name (a global, a name of
    an enclosing function): the tensor method that updates ``w`` in place (``sub_``), as
    ``w -= v`` there would make ``w`` local and raise UnboundLocalError; "" when the operator
    has none; None for any other write."""
    if not (isinstance(stmt, ast.AugAssign) and stmt.target is attr and isinstance(attr.value, ast.Name)):
        return None
    func = facts.function_of.get(stmt)
    if func is None or isinstance(func, ast.Lambda) or attr.value.id in facts.scope_of_node[func].locals:
        return None
    return _AUG_METHODS.get(type(stmt.op), "")


def _method_call(tensor, method: str, value) -> "cst.Expr":
    return cst.Expr(cst.Call(func=cst.Attribute(value=tensor, attr=cst.Name(method)), args=[cst.Arg(value)]))
