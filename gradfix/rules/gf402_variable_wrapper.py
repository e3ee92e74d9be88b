"""GF402 variable-wrapper (and the ``Variable(...)`` helpers GF401 shares)."""

from __future__ import annotations

import ast
import functools
import io
import os
import re
import tokenize
from dataclasses import dataclass
from typing import Iterator

from gradfix.lazy import cst

from gradfix.model import FixSafety
from gradfix.rule import Invalid, Rule, Valid

VARIABLE = "torch.autograd.Variable"
# The pre-0.4 signature: Variable(data, requires_grad=False, volatile=False, _grad_fn=None, name=None)
_POSITIONAL = ("data", "requires_grad", "volatile")


@dataclass(frozen=True)
class VariableCall:
    """One call of ``torch.autograd.Variable`` with its arguments sorted out.

    ``blocker`` says why no exact rewrite can be built (``**kwargs``, extra arguments), or
    is None. ``import_module`` is the module to drop ``Variable`` from once it is unused
    (None when the call does not use a plain ``from ... import Variable``).
    """

    call: ast.Call
    data: ast.expr | None
    requires_grad: ast.expr | None
    volatile: ast.expr | None
    blocker: str | None
    import_module: str | None


def fix_variable_call(finding, ctx):
    """``Variable(x, ...)`` -> ``x.detach()`` (``.requires_grad_(flag)``), dropping the import
    once unused; ``finding.data`` is ``(has requires_grad flag, import module or None)``."""
    from gradfix.fixer import Edit

    with_flag, module = finding.data
    call = ctx.node_at(finding.span, cst.Call)
    if module:
        ctx.remove_import_if_unused(module, "Variable")
    return [Edit(call, detached(ctx, call, with_flag))]


def variable_calls(facts) -> Iterator[VariableCall]:
    """Calls that resolve to ``torch.autograd.Variable`` (any import spelling)."""
    own_definition = _defines_name(facts, "Variable")
    removable = None  # computed at the first plain `Variable(...)` call (it may read sibling files)
    for call in facts.calls:
        if facts.call_qualname(call) != VARIABLE:
            continue
        func = call.func
        if isinstance(func, ast.Name) and func.id in own_definition:
            continue  # a local ``class Variable``/``def Variable`` may win at run time
        args: dict[str, ast.expr] = {}
        blocker = None
        for index, arg in enumerate(call.args):
            if isinstance(arg, ast.Starred) or index >= len(_POSITIONAL):
                blocker = "it passes `*args` or more than three positional arguments"
                break
            args[_POSITIONAL[index]] = arg
        for kw in call.keywords:
            if kw.arg is None:
                blocker = "it passes `**kwargs`"
            elif kw.arg in _POSITIONAL and kw.arg not in args:
                args[kw.arg] = kw.value
            else:
                blocker = f"it passes `{kw.arg}=`, which has no modern equivalent"
        if blocker is None and (
            "data" not in args or isinstance(args["data"], (ast.Constant, ast.Lambda, ast.JoinedStr))
        ):
            blocker = "it wraps no tensor (it raises TypeError today)"
        if blocker is None:
            kept = [args["data"], args.get("requires_grad")]
            if _comments(facts, call) != sum(_comments(facts, n) for n in kept if n is not None):
                blocker = "a comment inside the call would be lost"
        module = None
        if isinstance(func, ast.Name) and func.id == "Variable" and removable is None:
            removable = (
                not _is_package_init(facts.path)
                and not _imported_in_try(facts, "Variable")
                and not _reexported(facts, "Variable")
            )
        if isinstance(func, ast.Name) and func.id == "Variable" and removable:
            target = facts.resolve_name("Variable", call) or ""
            module = target.rpartition(".")[0] or None
        yield VariableCall(call, args.get("data"), args.get("requires_grad"), args.get("volatile"), blocker, module)


def _comments(facts, node: ast.AST) -> int:
    """Comments inside ``node``'s source text."""
    text = facts.segment(node)
    if "#" not in text:
        return 0
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(f"({text})").readline))
    except (tokenize.TokenError, SyntaxError):
        return 1 << 20  # cannot tell: count as "would lose one"
    return sum(t.type == tokenize.COMMENT for t in tokens)


def _defines_name(facts, name: str) -> set[str]:
    nodes = [*facts.functions, *(n for n in facts.function_of if isinstance(n, ast.ClassDef))]
    return {name} if any(n.name == name for n in nodes) else set()


def _imported_in_try(facts, name: str) -> bool:
    """Whether a ``from ... import name`` sits in a ``try`` (a fallback import).

    LibCST's RemoveImportsVisitor would leave ``try: pass`` behind; keep such imports.
    """
    for node in facts.function_of:
        if isinstance(node, ast.ImportFrom) and any(a.name == name and not a.asname for a in node.names):
            parent = facts.parents.get(node)
            while parent is not None:
                if isinstance(parent, (ast.Try, getattr(ast, "TryStar", ast.Try))):
                    return True
                parent = facts.parents.get(parent)
    return False


def _reexported(facts, name: str) -> bool:
    """Whether another module may take ``name`` from this one.

    Without ``__all__``, ``from model import *`` copies every public global, imported
    ``Variable`` included, and 2017 scripts relied on that (``train.py`` calls ``Variable``
    after ``from model import *``). Files next to this one and one folder up are searched for
    ``from <this module> import *`` / ``import ... Variable``; with ``__all__`` only a listed
    name is exported.
    """
    for node in facts.tree.body:
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
                return name in facts.segment(node)
    path = facts.path
    if not path or not os.path.isfile(path):
        return False
    folder = os.path.dirname(os.path.abspath(path))
    stem = os.path.basename(path).split(".", 1)[0]
    for where in (folder, os.path.dirname(folder)):
        for module, names in _from_imports(where):
            if module.rpartition(".")[2] == stem and (names == "*" or re.search(rf"\b{name}\b", names)):
                return True
    return False


_FROM_IMPORT = re.compile(r'^[ \t]*"?[ \t]*from[ \t]+([.\w]+)[ \t]+import[ \t]+([^\n#"]*)', re.M)


@functools.lru_cache(maxsize=256)
def _from_imports(folder: str) -> tuple[tuple[str, str], ...]:
    """Every ``from X import names`` line of the Python files and notebooks in ``folder``."""
    found = []
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError:
        return ()
    for entry in entries:
        if not entry.name.endswith((".py", ".ipynb")) or not entry.is_file():
            continue
        try:
            with open(entry.path, encoding="utf-8", errors="replace") as f:
                text = f.read(2_000_000)
        except OSError:
            continue
        if "import" in text:
            found.extend((m.group(1), m.group(2).strip()) for m in _FROM_IMPORT.finditer(text))
    return tuple(found)


def _is_package_init(path: str) -> bool:
    # An ``__init__.py`` may re-export ``Variable`` to other modules: keep its import.
    return os.path.basename(path) == "__init__.py"


def truthiness(expr: ast.expr | None) -> bool | None:
    """True/False for a literal flag (``True``, ``1``, ``0``...), None for anything else."""
    if expr is None:
        return False
    if isinstance(expr, ast.Constant) and type(expr.value) in (bool, int):
        return bool(expr.value)
    return None


def receiver_text(facts, expr: ast.expr) -> str:
    """``expr`` as the receiver of a method call in a message (``(a + b)``)."""
    text = facts.segment(expr)
    atomic = (ast.Name, ast.Attribute, ast.Call, ast.Subscript, ast.List, ast.Dict, ast.Set, ast.ListComp)
    return text if isinstance(expr, atomic) else f"({text})"


def flag_text(facts, expr: ast.expr) -> str:
    """The flag as the fix writes it (``1`` -> ``True``)."""
    if isinstance(expr, ast.Constant) and type(expr.value) is int and expr.value in (0, 1):
        return str(bool(expr.value))
    return facts.segment(expr)


# -- the LibCST half ----------------------------------------------------------------------------


def cst_variable_args(call: cst.Call) -> dict[str, cst.BaseExpression]:
    """``data``/``requires_grad``/``volatile`` argument values of a ``Variable`` call."""
    out: dict[str, cst.BaseExpression] = {}
    position = 0
    for arg in call.args:
        if arg.keyword is not None:
            out[arg.keyword.value] = arg.value
        else:
            out[_POSITIONAL[position]] = arg.value
            position += 1
    return out


def detached(ctx, call: cst.Call, requires_grad: bool) -> cst.BaseExpression:
    """``data.detach()`` (``.requires_grad_(flag)`` appended when asked), keeping the
    call's own parentheses. ``check`` made sure no comment lives outside the kept arguments."""
    args = cst_variable_args(call)
    data = args["data"]
    flag = args.get("requires_grad") if requires_grad else None
    base = data if not _needs_parens(ctx, data) else data.with_changes(
        lpar=[cst.LeftParen()], rpar=[cst.RightParen()]
    )
    expr: cst.BaseExpression = cst.Call(func=cst.Attribute(value=base, attr=cst.Name("detach")))
    if flag is not None:
        if isinstance(flag, cst.Integer) and flag.value in ("0", "1"):
            flag = cst.Name("True" if flag.value == "1" else "False")
        expr = cst.Call(func=cst.Attribute(value=expr, attr=cst.Name("requires_grad_")), args=[cst.Arg(flag)])
    return expr.with_changes(lpar=call.lpar, rpar=call.rpar)


def _bracketed():
    return (cst.List, cst.Tuple, cst.Dict, cst.Set, cst.ListComp, cst.SetComp, cst.DictComp)


def _atomic():
    return (cst.Name, cst.Attribute, cst.Call, cst.Subscript, cst.SimpleString, cst.FormattedString, *_bracketed())


def _needs_parens(ctx, node: cst.BaseExpression) -> bool:
    """Whether ``node`` must be parenthesized to take ``.detach()`` outside the call's parens.

    Operators bind looser than attribute access (``Variable(a + b)`` -> ``(a + b).detach()``),
    numbers would read as floats (``1.detach``), and a line break that only the call's
    parentheses made legal must stay inside parentheses.
    """
    if node.lpar:
        return False
    if not isinstance(node, _atomic()):
        return True
    code = ctx.code(node)
    if "\n" not in code or isinstance(node, (*_bracketed(), cst.SimpleString, cst.FormattedString)):
        return False
    if isinstance(node, cst.Call):
        return "\n" in ctx.code(node.func) + ctx.code(node.whitespace_after_func)
    if isinstance(node, cst.Subscript):
        return "\n" in ctx.code(node.value) + ctx.code(node.whitespace_after_value)
    return True


class VariableWrapper(Rule):
    """
    ## What it does
    Finds `Variable(x)` and `Variable(x, requires_grad=flag)` (`torch.autograd.Variable`,
    however imported), the wrapper every tensor needed before PyTorch 0.4.

    ## Why is this bad?
    Since 0.4, tensors and variables are one type and `Variable` is kept only for old code.
    It is not a no-op: `Variable(x)` returns a **new** tensor that shares `x`'s storage but
    is cut from the graph (`requires_grad=False`, no `grad_fn`), i.e. `x.detach()`
    (pinned in `tests/facts/test_gf402_facts.py`). Code that reads as "wrap the tensor"
    silently stops gradients, and the wrapper hides that.

    ## Example
    ```python
    from torch.autograd import Variable

    inputs = Variable(batch).cuda()
    weights = Variable(torch.zeros(3), requires_grad=True)
    ```

    ## Use instead
    ```python
    inputs = batch.detach().cuda()
    weights = torch.zeros(3).detach().requires_grad_(True)
    ```
    When you did not mean to cut the graph (input batches usually have none), drop the
    `.detach()` by hand.

    ## Fix safety
    Safe: `x.detach()` is exactly what `Variable(x)` returns today, and
    `x.detach().requires_grad_(flag)` what `Variable(x, requires_grad=flag)` returns (a
    leaf that receives gradients). Non-atomic arguments are parenthesized. A literal `1`/`0`
    flag becomes `True`/`False` (`requires_grad_` takes only a bool; a flag variable that
    holds an int would now raise `TypeError` at that line). The import of `Variable` is
    removed once no use is left (not in an `__init__.py`, which may re-export it; not when
    it is imported under another name or inside a `try` fallback; not when a file next to this
    one or one folder up does `from <this module> import *` or imports `Variable` from it,
    unless `__all__` leaves `Variable` out: 2017 scripts took `Variable` that way). Calls
    with `**kwargs`, the old `_grad_fn=`/`name=` arguments or no tensor are reported without
    a fix; `volatile=` calls are GF401's.
    """

    code = "GF402"
    name = "variable-wrapper"
    summary = "Legacy `Variable(x)` wrapper: it returns `x.detach()`"
    fix_safety = FixSafety.SAFE
    triggers = ("Variable",)

    VALID = [
        Valid("import torch\ny = x.detach()\n"),
        Valid("from tensorflow import Variable\nv = Variable(x)\n"),
        Valid("class Variable:\n    def __init__(self, x):\n        self.x = x\n\nv = Variable(3)\n"),
        Valid(
            "from torch.autograd import Variable\n\nclass Variable:\n    pass\n\nv = Variable(x)\n"
        ),
        Valid("from torch.autograd import Variable\n\ndef f(Variable, x):\n    return Variable(x)\n"),
        Valid("from torch.autograd import Variable\nok = isinstance(x, Variable)\n"),
        # volatile= is GF401's
        Valid("from torch.autograd import Variable\nv = Variable(x, volatile=True)\n"),
    ]
    INVALID = [
        Invalid(
            "import torch\nfrom torch.autograd import Variable\n\nx = Variable(batch).cuda()  # to GPU\n",
            "import torch\n\nx = batch.detach().cuda()  # to GPU\n",
        ),
        Invalid(
            "import torch\nw = torch.autograd.Variable(torch.zeros(3), requires_grad=True)\n",
            "import torch\nw = torch.zeros(3).detach().requires_grad_(True)\n",
        ),
        Invalid(
            "import torch.autograd as ag\ns = ag.Variable(a + b, requires_grad = trainable)\n",
            "import torch.autograd as ag\ns = (a + b).detach().requires_grad_(trainable)\n",
        ),
        Invalid(
            "from torch.autograd.variable import Variable\nw = Variable(x, 1)\nok = isinstance(w, Variable)\n",
            "from torch.autograd.variable import Variable\nw = x.detach().requires_grad_(True)\nok = isinstance(w, Variable)\n",
        ),
        Invalid(
            "from torch.autograd import Variable, grad\n\ndef f(x):\n    g = grad(Variable(x).sum(), x)\n    return (Variable(x ** 2))\n",
            "from torch.autograd import grad\n\ndef f(x):\n    g = grad(x.detach().sum(), x)\n    return ((x ** 2).detach())\n",
            count=2,
        ),
        Invalid(
            "from torch.autograd import Variable as V\nh = V(torch.zeros(\n    2, 3\n))\n",
            "from torch.autograd import Variable as V\nh = torch.zeros(\n    2, 3\n).detach()\n",
        ),
        Invalid(
            "from torch.autograd import Variable\nh = Variable(x\n             .float())\n",
            "h = (x\n             .float()).detach()\n",
        ),
        Invalid("from torch.autograd import Variable\nv = Variable(x, **opts)\n", None),
        Invalid("from torch.autograd import Variable\nv = Variable(3)\n", None),
        Invalid(
            "from torch.autograd import Variable\nv = Variable(torch.cat([a,  # left\n                        b]))\n",
            "v = torch.cat([a,  # left\n                        b]).detach()\n",
        ),
        Invalid("from torch.autograd import Variable\nv = Variable(x,  # the input\n             requires_grad=True)\n", None),
    ]

    def check(self, facts):
        for found in variable_calls(facts):
            if found.volatile is not None:
                continue  # GF401
            text = facts.segment(found.call.func)
            if found.blocker is not None:
                yield self.report(
                    facts,
                    found.call,
                    f"`{text}(...)` is a legacy wrapper that returns a detached copy; "
                    f"not rewritten because {found.blocker}",
                    fix=False,
                )
                continue
            data = receiver_text(facts, found.data)
            if found.requires_grad is None:
                wanted = f"{data}.detach()"
            else:
                wanted = f"{data}.detach().requires_grad_({flag_text(facts, found.requires_grad)})"
            yield self.report(
                facts,
                found.call,
                f"legacy `{text}(...)`: since PyTorch 0.4 it returns a detached alias of its "
                f"argument (no graph); write `{wanted}`",
                data=(found.requires_grad is not None, found.import_module),
            )

    def fix(self, finding, ctx):
        return fix_variable_call(finding, ctx)
