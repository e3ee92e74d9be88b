"""GF204 empty-grad-context.

Also home of the small predicates GF202/GF203 share with it: which expressions compute
nothing grad-mode dependent (:func:`is_inert`), which statements are grad-neutral
(:func:`is_neutral_statement`) and which ``with`` headers can be dropped
(:func:`droppable_grad_with`).
"""

from __future__ import annotations

import ast
import re

from gradfix.lazy import cst

from gradfix.model import FixSafety
from gradfix.rule import Invalid, Rule, Valid

# Attributes that compute a new tensor view (recorded by autograd outside no_grad).
_VIEW_ATTRS = frozenset({"T", "mT", "H", "mH", "real", "imag"})
# Builtins whose result does not depend on the grad mode (when not shadowed).
_INERT_BUILTINS = frozenset({"len", "str", "repr", "int", "float", "bool", "round", "format", "type"})
_INERT_QUALNAMES = frozenset(
    {
        "os.path.join",
        "os.fspath",
        "pathlib.Path",
        "torch.cuda.memory_allocated",
        "torch.cuda.max_memory_allocated",
        "torch.cuda.memory_reserved",
        "torch.cuda.max_memory_reserved",
    }
)
# Methods that read a value without recording autograd work.
_INERT_METHODS = frozenset({"item", "state_dict", "format"})
_LOG_LEVELS = frozenset({"debug", "info", "warning", "warn", "error", "critical", "exception", "log"})
_LOGGER_NAME = re.compile(r"^_*(log|logger)$", re.IGNORECASE)


def is_builtin(facts, name: str, at: ast.AST) -> bool:
    """``name`` at ``at`` means the builtin: no import, parameter or assignment binds it."""
    for scope in facts._scopes_for(at):
        if name in scope.imports or name in scope.locals:
            return False
    return True


def is_inert(facts, expr: ast.AST | None) -> bool:
    """Evaluating ``expr`` does no grad-mode dependent work (conservative: False if unsure).

    Names, constants, attribute chains, literals of those, f-strings, ``.item()``,
    ``.state_dict()``, ``len()``/``str()``…, ``os.path.join`` and string/path ``+``/``/``.
    """
    if expr is None:
        return True
    if isinstance(expr, (ast.Constant, ast.Name)):
        return True
    if isinstance(expr, ast.Attribute):
        return expr.attr not in _VIEW_ATTRS and is_inert(facts, expr.value)
    if isinstance(expr, ast.JoinedStr):
        return all(is_inert(facts, v) for v in expr.values)
    if isinstance(expr, ast.FormattedValue):
        return is_inert(facts, expr.value) and is_inert(facts, expr.format_spec)
    if isinstance(expr, (ast.Tuple, ast.List, ast.Set)):
        return all(is_inert(facts, e) for e in expr.elts)
    if isinstance(expr, ast.Starred):
        return is_inert(facts, expr.value)
    if isinstance(expr, ast.Dict):
        return all(is_inert(facts, k) for k in expr.keys) and all(is_inert(facts, v) for v in expr.values)
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, (ast.Add, ast.Div, ast.Mod)):
        # String formatting / path joining only: one side must be a string literal.
        stringy = [e for e in (expr.left, expr.right) if _is_string_literal(e)]
        return bool(stringy) and is_inert(facts, expr.left) and is_inert(facts, expr.right)
    if isinstance(expr, ast.Call):
        args_ok = all(is_inert(facts, a) for a in expr.args) and all(is_inert(facts, k.value) for k in expr.keywords)
        if not args_ok:
            return False
        func = expr.func
        if isinstance(func, ast.Name) and func.id in _INERT_BUILTINS and is_builtin(facts, func.id, func):
            return True
        if facts.qualname(func) in _INERT_QUALNAMES:
            return True
        if isinstance(func, ast.Attribute) and func.attr in _INERT_METHODS:
            if func.attr == "format":
                return _is_string_literal(func.value)
            if func.attr == "item":
                return not expr.args and not expr.keywords and is_inert(facts, func.value)
            return is_inert(facts, func.value)
    return False


def _is_string_literal(expr: ast.AST) -> bool:
    return isinstance(expr, ast.JoinedStr) or (isinstance(expr, ast.Constant) and isinstance(expr.value, str))


def _is_logging_call(facts, call: ast.Call) -> bool:
    func = call.func
    if not isinstance(func, ast.Attribute) or func.attr not in _LOG_LEVELS:
        return False
    qual = facts.qualname(func)
    if qual is not None and qual.startswith("logging."):
        return True
    receiver = func.value
    if isinstance(receiver, ast.Call):  # logging.getLogger(__name__).info(...)
        return facts.call_qualname(receiver) == "logging.getLogger" and all(is_inert(facts, a) for a in receiver.args)
    if isinstance(receiver, ast.Name):
        return bool(_LOGGER_NAME.match(receiver.id)) and facts.resolve_name(receiver.id, receiver) is None
    if isinstance(receiver, ast.Attribute) and isinstance(receiver.value, ast.Name) and receiver.value.id == "self":
        return bool(_LOGGER_NAME.match(receiver.attr))
    return False


def is_neutral_statement(facts, stmt: ast.stmt) -> bool:
    """``del``, ``pass``, ``gc.collect()``, ``torch.cuda.empty_cache()``, print/logging of inert values."""
    if isinstance(stmt, (ast.Pass, ast.Delete)):
        return True
    if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)):
        return False
    call = stmt.value
    args_inert = all(is_inert(facts, a) for a in call.args) and all(is_inert(facts, k.value) for k in call.keywords)
    if not args_inert:
        return False
    qual = facts.call_qualname(call)
    if qual in ("gc.collect", "torch.cuda.empty_cache"):
        return True
    if isinstance(call.func, ast.Name) and call.func.id == "print" and is_builtin(facts, "print", call.func):
        return True
    return _is_logging_call(facts, call)


def grad_with_regions(facts, node: ast.With | ast.AsyncWith) -> list:
    """The grad regions among ``node``'s items (with their own ``api``), in item order."""
    items = {id(i.context_expr): n for n, i in enumerate(node.items)}
    found = [r for r in facts.regions if r.owner is node and r.kind == "with"]
    return sorted(found, key=lambda r: items.get(id(r.expr), 0))


def droppable_grad_with(facts, node: ast.AST) -> bool:
    """A plain ``with <grad api>(<inert args>):`` (every item one, no ``as``) that can be removed."""
    if not isinstance(node, ast.With):
        return False
    regions = grad_with_regions(facts, node)
    if len(regions) != len(node.items) or not regions:
        return False
    for item, region in zip(node.items, regions):
        if item.optional_vars is not None or region.api is None or not region.called:
            return False
        call = region.expr
        if not (all(is_inert(facts, a) for a in call.args) and all(is_inert(facts, k.value) for k in call.keywords)):
            return False
    return True


def header_comment_lines(with_node: cst.With) -> list[cst.EmptyLine]:
    """The ``with …:  # comment`` trailing comment as an own-line comment (or nothing)."""
    body = with_node.body
    if isinstance(body, cst.IndentedBlock) and body.header.comment is not None:
        return [cst.EmptyLine(comment=body.header.comment)]
    return []


def unwrap_with(with_node: cst.With, statements: list[cst.BaseStatement]) -> list[cst.BaseStatement]:
    """``statements`` (from the ``with`` body) ready to stand in place of ``with_node``.

    The first one takes the ``with``'s leading lines and its header comment; a body footer
    holding comments has no place to go, so it stops the fix.
    """
    from gradfix.fixer import FixError

    body = with_node.body
    if isinstance(body, cst.IndentedBlock) and any(line.comment is not None for line in body.footer):
        raise FixError("comments after the last statement of the block have no place to go")
    if not statements:
        return []
    first = statements[0]
    lead = [*with_node.leading_lines, *header_comment_lines(with_node), *first.leading_lines]
    return [first.with_changes(leading_lines=lead), *statements[1:]]


class EmptyGradContext(Rule):
    """
    ## What it does
    Finds a grad-mode `with` block (`torch.no_grad()`, `torch.enable_grad()`,
    `torch.set_grad_enabled(...)`, `torch.inference_mode()`) whose body runs no tensor
    computation: only `del`, `pass`, `gc.collect()`, `torch.cuda.empty_cache()`, and
    `print(...)`/logging calls whose arguments compute nothing (names, constants, `.item()`,
    f-strings of those).

    ## Why is this bad?
    The grad mode only matters while autograd could record operations. Deleting references,
    collecting garbage, emptying the CUDA cache or printing already computed values do the
    same in every grad mode (pinned in `tests/facts/test_gf204_facts.py`), so the block
    suggests an effect it does not have (the article's §5.3 "release memory" block).

    ## Example
    ```python
    with torch.set_grad_enabled(False):
        del outputs, loss
        torch.cuda.empty_cache()
    ```

    ## Use instead
    ```python
    del outputs, loss
    torch.cuda.empty_cache()
    ```

    ## Fix safety
    Safe: the statements run unchanged, outside the block; comments are kept. Any other call
    (or an argument that computes a tensor, whose printed `grad_fn` would differ), a `with`
    that also holds another context manager or binds a name with `as`, or a mode argument
    that is not a plain name or constant keeps the rule silent. A block that ends with
    `torch.save(...)` is GF203's.
    """

    code = "GF204"
    name = "empty-grad-context"
    summary = "Grad-mode `with` block whose body does no tensor computation"
    fix_safety = FixSafety.SAFE
    triggers = ("grad", "inference_mode")

    VALID = [
        Valid("import torch\nwith torch.no_grad():\n    y = model(x)\n    del x\n"),
        Valid("import torch\nwith torch.no_grad():\n    print(model(x))\n"),
        Valid("import torch\nwith torch.no_grad():\n    torch.save(model.state_dict(), 'm.pth')\n"),
        Valid("import torch\nwith torch.no_grad(), open(p) as fh:\n    pass\n"),
        Valid("import torch\nwith torch.no_grad() as ctx:\n    pass\n"),
        Valid("import torch\nwith torch.no_grad():\n    cleanup(x)\n"),
        Valid("def f(torch, x):\n    with torch.no_grad():\n        del x\n"),
        Valid("import torch\nprint = log_to_tensorboard\nwith torch.no_grad():\n    print(x)\n"),
        Valid("import torch\nwith torch.no_grad():\n    if x:\n        del x\n"),
        Valid("import torch\nwith torch.no_grad:\n    pass\n"),  # GF101
        Valid("import torch\nwith torch.no_grad():  # gradfix: ignore\n    del x\n"),
        Valid("import torch\nwith torch.set_grad_enabled(next(modes)):\n    del x\n"),
    ]
    INVALID = [
        Invalid(
            "import torch\n\n"
            "# free memory\n"
            "with torch.set_grad_enabled(False):  # no graph\n"
            "    del outputs, loss  # drop refs\n"
            "    torch.cuda.empty_cache()\n"
            "x = 1\n",
            "import torch\n\n"
            "# free memory\n"
            "# no graph\n"
            "del outputs, loss  # drop refs\n"
            "torch.cuda.empty_cache()\n"
            "x = 1\n",
        ),
        Invalid(
            "import gc\nimport logging\nimport torch as T\nlogger = logging.getLogger(__name__)\n"
            "def step(x, loss):\n"
            "    with T.no_grad():\n"
            "        logger.info('loss %.3f', loss.item())\n"
            "        print(f'step {x.shape}')\n"
            "        gc.collect()\n"
            "    return x\n",
            "import gc\nimport logging\nimport torch as T\nlogger = logging.getLogger(__name__)\n"
            "def step(x, loss):\n"
            "    logger.info('loss %.3f', loss.item())\n"
            "    print(f'step {x.shape}')\n"
            "    gc.collect()\n"
            "    return x\n",
        ),
        Invalid(
            "from torch.autograd.grad_mode import inference_mode\n"
            "for b in batches:\n"
            "    with inference_mode(): del b\n",
            "from torch.autograd.grad_mode import inference_mode\n"
            "for b in batches:\n"
            "    del b\n",
        ),
        Invalid(
            "import torch\ndef f(training):\n    with torch.set_grad_enabled(training):\n        pass\n",
            "import torch\ndef f(training):\n    pass\n",
        ),
    ]

    def check(self, facts):
        for node in facts.withs:
            if not droppable_grad_with(facts, node) or not node.body:
                continue
            if all(is_neutral_statement(facts, stmt) for stmt in node.body):
                what = facts.segment(node.items[0].context_expr)
                yield self.report(
                    facts,
                    node,
                    f"`with {what}:` wraps no tensor computation (only del/pass/cleanup/logging); "
                    "the grad mode has no effect here: remove the block",
                    anchors=[node],
                )

    def fix(self, finding, ctx):
        from gradfix.fixer import Edit

        node = ctx.node_at(finding.span, cst.With)
        body = node.body
        if isinstance(body, cst.SimpleStatementSuite):
            line = cst.SimpleStatementLine(
                body=body.body, leading_lines=node.leading_lines, trailing_whitespace=body.trailing_whitespace
            )
            return [Edit(node, line)]
        return [Edit(node, cst.FlattenSentinel(unwrap_with(node, list(body.body))))]
