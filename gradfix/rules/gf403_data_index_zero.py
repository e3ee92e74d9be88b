"""GF403 data-index-zero."""

from __future__ import annotations

import ast
import re

from gradfix.lazy import cst

from gradfix.analysis.calls import callees
from gradfix.analysis.project import strip_moves
from gradfix.analysis.tensor_data import may_be_torch_data
from gradfix.analysis.vocabulary import in_torch_version_branch
from gradfix.facts import dotted_name
from gradfix.model import FixSafety
from gradfix.rule import Invalid, Rule, Valid, attribute

# Functional losses whose default reduction gives a 0-dim tensor (F.*loss* is matched by name).
_FUNCTIONAL_LOSSES = frozenset(
    f"torch.nn.functional.{n}"
    for n in ("cross_entropy", "binary_cross_entropy", "binary_cross_entropy_with_logits", "kl_div")
)
_REDUCTIONS = frozenset({"torch.sum", "torch.mean"})
# Tensor methods that, called with no dimension, reduce to a 0-dim tensor.
_FULL_REDUCTIONS = frozenset("sum mean max min prod norm std var amax amin".split())
_CRITERION = re.compile(r"^(crit|criterion\w*|crit_\w+)$|loss", re.IGNORECASE)
# Names that say "many values": a per-sample loss vector is indexed on purpose.
_NOT_SCALAR_NAME = re.compile(
    r"losses$|per_|vec|unreduced|elementwise|none|_all$|list|map|mask|matrix"
    r"|hist|buf|queue|window|seq|arr|curve|record|track|terms|parts|components|items|stack",
    re.IGNORECASE,
)
# torch / torch.nn.functional functions whose result has their first argument's shape.
_ELEMENTWISE = frozenset(
    "relu relu6 elu selu celu gelu silu leaky_relu softplus sigmoid tanh abs exp log log1p sqrt rsqrt neg clamp clip square sign".split()
)
# Tensor methods that give their result a shape of its own (``crit(...).unsqueeze(0)``).
_SHAPING_METHODS = frozenset("view reshape unsqueeze expand expand_as repeat flatten view_as reshape_as".split())
_MAX_DEPTH = 8
# Calls that build a tensor of a given shape (``torch.zeros(1)``, ``Tensor([0])``, ``x.new(2)``):
# an accumulator made by one of them keeps that shape, so ``.data[0]`` still works on it.
_CONSTRUCTORS = frozenset(
    "zeros ones empty full rand randn randint tensor as_tensor from_numpy Tensor FloatTensor DoubleTensor "
    "HalfTensor LongTensor IntTensor ByteTensor new new_zeros new_ones new_full new_empty new_tensor "
    "zeros_like ones_like empty_like full_like rand_like randn_like".split()
)
# Wrappers and conversions that keep their argument's shape.
_SHAPE_KEEPING = frozenset("Variable cuda cpu to float double half type type_as fill_ zero_ detach clone".split())


def _shaped(expr: ast.expr) -> bool:
    """``expr`` builds a tensor with an explicit shape (possibly through shape-keeping calls)."""
    while isinstance(expr, ast.Call):
        func = expr.func
        last = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if last in _CONSTRUCTORS:
            return True
        if last == "Variable" and expr.args:
            expr = expr.args[0]
        elif last in _SHAPE_KEEPING and isinstance(expr.func, ast.Attribute):
            expr = expr.func.value
        else:
            return False
    return False


def _indexed_elsewhere(facts, func, name: str) -> bool:
    """``name.data[k]`` / ``name[k]`` with another index than 0 (or a slice): a vector, not a scalar."""
    for stmt in facts.statements(func):
        for node in ast.walk(stmt):
            if not isinstance(node, ast.Subscript):
                continue
            base = node.value
            if isinstance(base, ast.Attribute) and base.attr == "data":
                base = base.value
            if not (isinstance(base, ast.Name) and base.id == name):
                continue
            index = node.slice
            if not (isinstance(index, ast.Constant) and type(index.value) is int and index.value == 0):
                return True
    return False


def loss_like_name(name: str) -> bool:
    return "loss" in name.lower() and not _NOT_SCALAR_NAME.search(name)


def _keeps_dims(call: ast.Call) -> bool:
    """``reduction='none'`` / ``reduce=False``: the result has one value per element."""
    for kw in call.keywords:
        if kw.arg == "reduction" and isinstance(kw.value, ast.Constant) and kw.value.value == "none":
            return True
        if kw.arg == "reduce" and isinstance(kw.value, ast.Constant) and kw.value.value is False:
            return True
        if kw.arg == "reduction" and not isinstance(kw.value, ast.Constant):
            return True  # unknown at this point: not provably a scalar
    return False


class _Scalars:
    """Decides, by name and assignment within one file, which expressions are 0-dim losses."""

    def __init__(self, facts):
        self.facts = facts
        self._unreduced_criteria: set[str] | None = None
        self._foreign_names: set[str] | None = None

    def unreduced_criteria(self) -> set[str]:
        """Last name components of criteria built with ``reduction='none'``/``reduce=False``."""
        if self._unreduced_criteria is None:
            found = set()
            for node in self.facts.function_of:
                if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and _keeps_dims(node.value):
                    for target in node.targets:
                        name = dotted_name(target)
                        if name:
                            found.add(name.rpartition(".")[2])
            self._unreduced_criteria = found
        return self._unreduced_criteria

    def is_scalar(self, expr: ast.expr, func, depth: int = 0, seen: frozenset = frozenset()) -> bool:
        if depth > _MAX_DEPTH:
            return False
        if isinstance(expr, ast.Call):
            return self._scalar_call(expr) or self._scalar_through(expr, func, depth, seen)
        if isinstance(expr, ast.Name):
            return self._scalar_name(expr.id, func, depth, seen)
        if isinstance(expr, ast.Attribute):
            return loss_like_name(expr.attr)
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, (ast.Add, ast.Sub, ast.Mult, ast.Div)):
            sides = [expr.left, expr.right]
            numbers = [s for s in sides if self._number(s, func)]
            rest = [s for s in sides if s not in numbers]
            return bool(rest) and all(self.is_scalar(s, func, depth + 1, seen) for s in rest)
        if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.USub):
            return self.is_scalar(expr.operand, func, depth + 1, seen)
        return False

    def _scalar_call(self, call: ast.Call) -> bool:
        if _keeps_dims(call):
            return False
        callee = call.func
        if isinstance(callee, ast.Attribute) and callee.attr in _FULL_REDUCTIONS:
            if self.facts.qualname(callee) in _REDUCTIONS:  # torch.sum(x): one argument only
                return len(call.args) == 1 and all(k.arg == "dtype" for k in call.keywords)
            return not call.args and all(k.arg == "dtype" for k in call.keywords)
        if self.facts.qualname(callee) in _FUNCTIONAL_LOSSES:
            return True
        if isinstance(callee, ast.Call):  # nn.MSELoss()(out, y)
            return not _keeps_dims(callee) and self._criterion_name(callee.func) and not self._foreign(callee)
        return self._criterion_name(callee) and not self._foreign_criterion(callee)

    def _foreign(self, call: ast.Call) -> bool:
        """``call`` builds a class of another package than torch and the project
        (``warpctc_pytorch.CTCLoss()`` returns a 1-element tensor): its result's shape is its own."""
        if not isinstance(call, ast.Call):
            return False  # `crit = crit.cuda()` strips to the name itself
        qual = self.facts.qualname(call.func) or ""
        root = qual.split(".", 1)[0]
        if not root or root == "torch" or qual.startswith("."):
            return False
        index = self.facts.project
        return index is None or not any(m.split(".", 1)[0] == root for m in index.modules)

    def _foreign_criterion(self, callee: ast.expr) -> bool:
        """The criterion called through ``callee`` (``criterion``, ``self.criterion``) is bound in
        this file to an instance of a foreign class (see :meth:`_foreign`)."""
        name = dotted_name(callee)
        return name is not None and name.rpartition(".")[2] in self._foreign_criteria()

    def _foreign_criteria(self) -> set[str]:
        """Last name components of what the file binds to an instance of a foreign class."""
        if self._foreign_names is None:
            self._foreign_names = {
                (dotted_name(t) or "").rpartition(".")[2]
                for node in self.facts.nodes_of(ast.Assign)
                if isinstance(node.value, ast.Call) and self._foreign(strip_moves(node.value))
                for t in node.targets
            } - {""}
        return self._foreign_names

    def _keeps_many(self, call: ast.Call) -> bool:
        """Evidence that ``call`` returns one value per element, whatever the target's name."""
        if _keeps_dims(call):
            return True
        callee = call.func
        if isinstance(callee, ast.Attribute) and callee.attr in _FULL_REDUCTIONS:
            return not self._scalar_call(call)  # a reduction over a dimension
        if self._foreign(call) or (isinstance(callee, ast.Call) and self._foreign(callee)) or self._foreign_criterion(callee):
            return True  # a foreign criterion's result has the shape it chooses
        name = dotted_name(callee)
        return name is not None and name.rpartition(".")[2] in self.unreduced_criteria()

    def _number(self, expr: ast.expr, func) -> bool:
        """A Python number: a literal, or a name that its scope binds to literals only
        (``mb_size = 64``)."""
        if isinstance(expr, ast.Name):
            values = self._bound_values(expr.id, func)
            return bool(values) and all(map(_number_literal, values))
        return _number_literal(expr)

    def _bound_values(self, name: str, func) -> list[ast.expr] | None:
        """What ``func``'s own statements assign to ``name`` (``=``, ``+=``, an annotated
        ``=``); None when a ``for`` or ``with`` binds it by unpacking (a loader's batch, a
        context's value: unknown)."""
        values = []
        for stmt in self.facts.statements(func):
            if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in stmt.targets):
                values.append(stmt.value)
            elif isinstance(stmt, (ast.AugAssign, ast.AnnAssign)) and isinstance(stmt.target, ast.Name):
                if stmt.target.id == name and stmt.value is not None:
                    values.append(stmt.value)
            elif isinstance(stmt, (ast.For, ast.AsyncFor, ast.With, ast.AsyncWith)) and _binds(stmt, name):
                return None
        return values

    def _scalar_through(self, call: ast.Call, func, depth: int, seen: frozenset) -> bool:
        """An element-wise torch function of a scalar (``F.relu(m - d_fake)``), or a call of
        file functions whose every ``return`` gives a scalar (``def D(x): return torch.mean(..)``)."""
        if self._elementwise(call):
            return self.is_scalar(call.args[0], func, depth + 1, seen)
        if not isinstance(call.func, ast.Name):
            return False
        helpers = callees(self.facts, call).defs
        returns = [
            (stmt.value, helper) for helper in helpers for stmt in self.facts.statements(helper)
            if isinstance(stmt, ast.Return) and stmt.value is not None
        ]
        return bool(returns) and all(self.is_scalar(value, helper, depth + 1, seen) for value, helper in returns)

    def _elementwise(self, call: ast.Call) -> bool:
        """``torch.X(t)`` / ``F.X(t)`` computing one value per element of its first argument."""
        qual = self.facts.qualname(call.func) if isinstance(call.func, (ast.Name, ast.Attribute)) else None
        module, _, name = (qual or "").rpartition(".")
        return module in ("torch", "torch.nn.functional") and name in _ELEMENTWISE and bool(call.args)

    def _torch_non_scalar(self, call: ast.Call) -> bool:
        """``torch.stack([...])``, ``torch.cat(...)``, ``x.view(1)``: evidence that beats the name
        (an element-wise function has its argument's shape: no evidence)."""
        func = call.func
        if isinstance(func, ast.Attribute) and func.attr in _SHAPING_METHODS:
            return True
        qual = self.facts.qualname(func) if isinstance(func, (ast.Name, ast.Attribute)) else None
        return qual is not None and qual.startswith("torch.") and not self._scalar_call(call) and not self._elementwise(call)

    def _criterion_name(self, callee: ast.expr) -> bool:
        name = dotted_name(callee)
        if name is None:
            return False
        last = name.rpartition(".")[2]
        if last in self.unreduced_criteria() or _NOT_SCALAR_NAME.search(last):
            return False
        return bool(_CRITERION.search(last))

    def _scalar_name(self, name: str, func, depth: int, seen: frozenset) -> bool:
        if _NOT_SCALAR_NAME.search(name) or name in seen:
            return False
        values = self._bound_values(name, func)
        if values is None:
            return False  # bound by unpacking a loader/context: unknown shape
        seen = seen | {name}
        numbers = [v for v in values if _number_literal(v)]
        tensors = [v for v in values if v not in numbers]
        # a binding's own call, or the calls it is computed from (`ctc(...) / n`)
        operands = [o for v in tensors for o in ((v,) if isinstance(v, ast.Call) else (getattr(v, "left", None), getattr(v, "right", None)))]
        calls = [c for c in operands if isinstance(c, ast.Call)]
        if any(self._keeps_many(v) or _shaped(v) or self._torch_non_scalar(v) for v in calls):
            return False  # one binding has one value per element, an explicit shape, or a shape of its own
        if _indexed_elsewhere(self.facts, func, name):
            return False
        if tensors and all(self.is_scalar(v, func, depth + 1, seen) for v in tensors):
            return True
        return loss_like_name(name)


def _number_literal(expr: ast.expr) -> bool:
    return isinstance(expr, ast.Constant) and type(expr.value) in (int, float)


def _binds(stmt: ast.stmt, name: str) -> bool:
    targets = [stmt.target] if isinstance(stmt, (ast.For, ast.AsyncFor)) else [
        i.optional_vars for i in stmt.items if i.optional_vars is not None
    ]
    return any(isinstance(n, ast.Name) and n.id == name for t in targets for n in ast.walk(t))


class DataIndexZero(Rule):
    """
    ## What it does
    Finds `<scalar>.data[0]` where the base is a loss or a full reduction: a name assigned
    from a criterion call (`criterion(...)`, `crit(...)`, `loss_fn(...)`, any callee whose
    name contains `loss`), `F.*loss*`/`F.cross_entropy(...)`, a full reduction without a
    dimension (`.sum()`, `.mean()`, `.max()`, `.min()`, `.norm()`, `.prod()`, `.std()`,
    `.var()`), sums of those, or a name containing `loss`, in code, f-strings and
    `.format(...)` arguments alike.

    ## Why is this bad?
    Before PyTorch 0.4 a loss was a one-element tensor and `loss.data[0]` read its value.
    Since 0.4 losses and full reductions are 0-dim tensors, and indexing one raises
    `IndexError: invalid index of a 0-dim tensor. Use tensor.item()` (pinned in
    `tests/facts/test_gf403_facts.py`). The logging line of every 2017 training loop now
    crashes the first step.

    ## Example
    ```python
    loss = criterion(output, target)
    print("loss {:.4f}".format(loss.data[0]))
    ```

    ## Use instead
    ```python
    loss = criterion(output, target)
    print("loss {:.4f}".format(loss.item()))
    ```

    ## Fix safety
    Safe: `.data[0]` raises `IndexError` on a 0-dim tensor today, and `.item()` returns its
    value as a Python number. Plain tensor indexing (`output.data[0]`, the first row of a
    batch) is not flagged; neither are losses built with `reduction='none'`/`reduce=False`
    (in the call, or where the criterion is assigned in the same file), reductions over a
    dimension (`.sum(1)`), names that say "many values" (`losses`, `loss_per_sample`,
    `loss_vec`, `loss_history`, `loss_terms`), names bound by a `for`/`with` target, nor
    `loss.data[0][1]` (two indices: not a scalar). Evidence beats the name: a name also bound
    to a tensor built with a shape (`loss = torch.zeros(1)` then `loss += crit(...)`, which
    stays shape `(1,)`), to a torch function that is no reduction (`torch.stack`, `torch.cat`)
    or to a reshaping method (`.unsqueeze(0)`, `.view(1)`), or indexed elsewhere with another
    index (`total_loss.data[1]`), is left alone, and so is the result of a criterion of another
    package than torch and the project (warp-ctc's `CTCLoss` returns a one-element tensor). A
    `.data[0]` in a branch selected by torch's version (`if torch.__version__ ...: loss.item()
    else: loss.data[0]`) is the author's code for that torch (as for GF401, GF402 and GF404).
    So is a `.data` that is not torch's
    (`gradfix/analysis/tensor_data.py`, shared with GF304): in a file that imports modules but
    never torch, or on an object of a plain class that keeps its value in `self.data`. The name heuristic is the risk: a one-element
    1-D tensor named `*loss*` whose shape the file does not show gives a 0-dim tensor from
    `.data[0]` and a Python number from `.item()`.
    """

    code = "GF403"
    name = "data-index-zero"
    summary = "`loss.data[0]` raises IndexError on 0-dim tensors: use `loss.item()`"
    fix_safety = FixSafety.SAFE
    triggers = ("data",)
    requires = ((attribute("data", r"\["),),)  # `<loss>.data[0]`
    uses_project = True  # is `.data` torch's? (a plain `Value` class of another file)

    VALID = [
        Valid(
            """
            out = model(x)
            first = out.data[0]
            """
        ),
        Valid(
            """
            def act(policy, state):
                probs = policy(state)
                return probs.data[0]
            """
        ),
        Valid(
            """
            losses = criterion(out, y)
            first = losses.data[0]
            """
        ),
        Valid(
            """
            import torch.nn as nn
            crit = nn.NLLLoss(reduce=False)
            l = crit(out, y)
            print(l.data[0])
            """
        ),
        Valid(
            """
            import torch.nn.functional as F
            l = F.mse_loss(a, b, reduction='none')
            print(l.data[0])
            """
        ),
        Valid(
            """
            row_sum = x.sum(1)
            print(row_sum.data[0])
            """
        ),
        Valid(
            """
            loss = criterion(out, y)
            loss.data[0] = 0
            """
        ),
        Valid(
            """
            loss = criterion(out, y)
            v = loss.data[1]
            """
        ),
        Valid(
            """
            loss = criterion(out, y)
            v = loss.data[0][1]
            """
        ),
        Valid(
            """
            value = critic(state)
            adv = reward - value.data[0]
            """
        ),
        Valid(
            """
            for loss in per_gpu:
                print(loss.data[0])
            """
        ),
        # the criterion is unreduced, whatever the result is called
        Valid(
            """
            import torch.nn as nn
            per_item = nn.NLLLoss(reduction='none')
            batch_loss = per_item(out, y)
            v = batch_loss.data[0]
            """
        ),
        Valid(
            """
            total_loss = scores.sum(dim=1)
            print(total_loss.data[0])
            """
        ),
        # An accumulator built with a shape keeps it: `.data[0]` works today, `.item()` would
        # change its type (and raise for more than one element).
        Valid(
            """
            import torch
            from torch.autograd import Variable
            def step(out, y):
                loss = Variable(torch.zeros(1)).cuda()
                loss += criterion(out, y)
                return loss.data[0]
            """
        ),
        Valid(
            """
            import torch
            val_loss = torch.zeros(2)
            val_loss += torch.stack([crit(a, b), n])
            mean = val_loss.data[0] / val_loss.data[1]
            """
        ),
        Valid(
            """
            def log(stats):
                total_loss = criterion(out, y)
                print(total_loss.data[0], total_loss[1:])
            """
        ),
        # A torch function or reshaping method that is not a reduction says "shape", whatever the name.
        Valid(
            """
            import torch
            loss_terms = torch.stack([l1, l2])
            first_loss = torch.cat([a, b])
            print(loss_terms.data[0], first_loss.data[0])
            """
        ),
        Valid(
            """
            loss = criterion(out, y).unsqueeze(0)
            print(loss.data[0])
            """
        ),
        Valid(
            """
            def log(self):
                print(self.loss_history.data[0], self.loss_buffer.data[0])
            """
        ),
    ]
    INVALID = [
        # Scalars through an element-wise function, a file function returning a reduction, a
        # number bound to a name, and a few levels of arithmetic (an EBGAN/AVB training loop).
        Invalid(
            """
            import torch
            import torch.nn.functional as F

            mb_size = 32

            def D(x):
                return torch.mean(torch.sum((x - ae(x)) ** 2, 1))

            for it in range(100):
                d_loss = D(x) + F.relu(m - D(g(z)))
                loglike = -F.binary_cross_entropy(out, x, size_average=False) / mb_size
                elbo = -(torch.mean(t) + loglike)
                print(d_loss.data[0], elbo.data[0])
            """,
            """
            import torch
            import torch.nn.functional as F

            mb_size = 32

            def D(x):
                return torch.mean(torch.sum((x - ae(x)) ** 2, 1))

            for it in range(100):
                d_loss = D(x) + F.relu(m - D(g(z)))
                loglike = -F.binary_cross_entropy(out, x, size_average=False) / mb_size
                elbo = -(torch.mean(t) + loglike)
                print(d_loss.item(), elbo.item())
            """,
            count=2,
        ),
        Invalid(
            """
            loss = criterion(output, target)
            print('loss {:.4f}'.format(loss.data[0]))  # log
            """,
            """
            loss = criterion(output, target)
            print('loss {:.4f}'.format(loss.item()))  # log
            """,
        ),
        Invalid(
            """
            import torch.nn.functional as F

            def test(out, y):
                return F.nll_loss(out, y, size_average=False).data[0]
            """,
            """
            import torch.nn.functional as F

            def test(out, y):
                return F.nll_loss(out, y, size_average=False).item()
            """,
        ),
        Invalid(
            """
            def step(out, y):
                err_real = self.crit(out, y)
                err_fake = self.crit(fake, y0)
                err = err_real + 0.5 * err_fake
                print(f"err {err.data[0]:.3f}")
            """,
            """
            def step(out, y):
                err_real = self.crit(out, y)
                err_fake = self.crit(fake, y0)
                err = err_real + 0.5 * err_fake
                print(f"err {err.item():.3f}")
            """,
        ),
        Invalid(
            """
            mse = (a - b).pow(2).mean()
            psnr = 10 * log10(1 / mse.data[0])
            """,
            """
            mse = (a - b).pow(2).mean()
            psnr = 10 * log10(1 / mse.item())
            """,
        ),
        Invalid(
            """
            def log(self):
                total += self.train_loss.data[0]
            """,
            """
            def log(self):
                total += self.train_loss.item()
            """,
        ),
        Invalid(
            """
            import torch
            s = torch.sum(x)
            print(s.data[ 0 ])
            """,
            """
            import torch
            s = torch.sum(x)
            print(s.item())
            """,
        ),
    ]

    def check(self, facts):
        scalars = _Scalars(facts)
        for node in facts.nodes_of(ast.Subscript):
            if not (
                isinstance(node.ctx, ast.Load)
                and isinstance(node.slice, ast.Constant)
                and type(node.slice.value) is int
                and node.slice.value == 0
                and isinstance(node.value, ast.Attribute)
                and node.value.attr == "data"
            ):
                continue
            parent = facts.parents.get(node)
            if isinstance(parent, ast.Subscript) and parent.value is node:
                continue  # loss.data[0][1]: two indices, so not a scalar
            base = node.value.value
            if not may_be_torch_data(facts, base) or not scalars.is_scalar(base, facts.enclosing_function(node)):
                continue
            if in_torch_version_branch(facts, node):
                continue  # `else:  # torch 0.3`: there a loss is 1-dim and `.data[0]` is right
            text = facts.segment(base)
            shown = text if len(text) <= 40 and "\n" not in text else "..."
            yield self.report(
                facts,
                node,
                f"`{shown}.data[0]` raises IndexError: losses and full reductions are 0-dim since PyTorch 0.4",
                fix_title=f"Write `{shown}.item()`",
            )

    def fix(self, finding, ctx):
        from gradfix.fixer import Edit

        node = ctx.node_at(finding.span, cst.Subscript)
        data = node.value
        if not isinstance(data, cst.Attribute):
            return None
        item = cst.Call(func=cst.Attribute(value=data.value, attr=cst.Name("item")))
        return [Edit(node, item.with_changes(lpar=node.lpar, rpar=node.rpar))]

    @staticmethod
    def contract():
        # gradfix verify: "safe" because the original raises IndexError; the rewrite runs on.
        from gradfix.verify.contract import Contract, ExceptionFixed

        return Contract(
            "the IndexError disappears", ("exception",), (ExceptionFixed("IndexError", "0-dim"),), downstream=True
        )
