"""GF404 variable-type-check."""

from __future__ import annotations

import ast

from gradfix.lazy import cst

from gradfix.analysis.regions import is_builtin
from gradfix.analysis.statements import torch_reachable
from gradfix.analysis.variable import VARIABLE, defines_name, import_to_drop
from gradfix.analysis.vocabulary import in_torch_version_branch
from gradfix.model import FixSafety
from gradfix.rule import Invalid, Rule, Valid

_EQUAL = (ast.Eq, ast.Is)
_NOT_EQUAL = (ast.NotEq, ast.IsNot)


class VariableTypeCheck(Rule):
    """
    ## What it does
    Finds type checks against the legacy `torch.autograd.Variable` class (however imported):
    `type(x) == Variable`, `type(x) is Variable`, their negations `!=` / `is not`, and
    `isinstance(x, Variable)`, also with `Variable` in a tuple of classes.

    ## Why is this bad?
    Since PyTorch 0.4 every tensor is what a `Variable` used to be, and `Variable` is only
    kept as a legacy name: `type(t)` of a tensor or a parameter is `torch.Tensor` (or
    `Parameter`), never `Variable`, so `type(x) == Variable` is always False and the branch it
    guards is dead code; `!=` is always True. `isinstance(x, Variable)` still works, because
    `Variable`'s metaclass answers `isinstance(x, torch.Tensor)`, but it reads as a check of
    a type that no longer exists (pinned in `tests/facts/test_gf404_facts.py`).

    ## Example
    ```python
    if type(h) == Variable:
        return Variable(h.data)
    if isinstance(x, (Variable, np.ndarray)):
        x = to_numpy(x)
    ```

    ## Use instead
    ```python
    if isinstance(h, torch.Tensor):
        return h.detach()
    if isinstance(x, (torch.Tensor, np.ndarray)):
        x = to_numpy(x)
    ```

    ## Fix safety
    `isinstance(x, Variable)` -> `isinstance(x, torch.Tensor)` is safe: it is the same check
    (where `torch.Tensor` is already in the tuple, `Variable` is just dropped).
    `type(x) == Variable` / `is` -> `isinstance(x, torch.Tensor)` and `!=` / `is not` ->
    `not isinstance(x, torch.Tensor)` are **unsafe**: the dead branch runs again for tensors,
    as the pre-0.4 code meant (`type(x) == Variable` then asked "is this a tensor with
    autograd?"). Review the branch: it was written for PyTorch 0.3 and has not run since. The
    import of `Variable` is removed once no use is left (as GF402 does). Comparisons that
    chain more than two operands, that carry a comment inside, or where `torch` does not
    name the module are reported without a fix.
    """

    code = "GF404"
    name = "variable-type-check"
    summary = "Type check against legacy `Variable`: `type(x) == Variable` is always False"
    fix_safety = FixSafety.SAFE
    triggers = ("Variable",)
    uses_project = True  # `Variable` from `from utils import *`: what the project module imports

    VALID = [
        Valid(
            """
            import torch
            ok = isinstance(x, torch.Tensor)
            """
        ),
        Valid(
            """
            from tensorflow import Variable
            ok = type(x) == Variable
            """
        ),
        Valid(
            """
            from torch.autograd import Variable

            def type(x):
                return x

            ok = type(x) == Variable
            """
        ),
        Valid(
            """
            from torch.autograd import Variable
            class Variable:
                pass
            ok = isinstance(x, Variable)
            """
        ),
        Valid(
            """
            from torch.autograd import Variable
            ok = type(x) == type(y)
            """
        ),
        Valid(
            """
            import torch
            ok = type(x) is torch.Tensor
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            from torch.autograd import Variable

            def repackage(h):
                if type(h) == Variable:  # 0.3
                    return h.detach()
                return tuple(repackage(v) for v in h)
            """,
            """
            import torch

            def repackage(h):
                if isinstance(h, torch.Tensor):  # 0.3
                    return h.detach()
                return tuple(repackage(v) for v in h)
            """,
        ),
        Invalid(
            """
            import torch as T
            ok = T.autograd.Variable is not type(x)
            """,
            """
            import torch as T
            ok = not isinstance(x, T.Tensor)
            """,
        ),
        Invalid(
            """
            import torch
            from torch.autograd.variable import Variable
            ok = isinstance(x, Variable)
            v = Variable(x)
            """,
            """
            import torch
            from torch.autograd.variable import Variable
            ok = isinstance(x, torch.Tensor)
            v = Variable(x)
            """,
        ),
        Invalid(
            """
            import numpy as np
            from torch.autograd import Variable

            def to_numpy(x):
                if isinstance(x, (Variable, np.ndarray)):
                    return x
            """,
            """
            import numpy as np
            import torch

            def to_numpy(x):
                if isinstance(x, (torch.Tensor, np.ndarray)):
                    return x
            """,
        ),
        Invalid(
            """
            import torch
            from torch.autograd import Variable
            ok = isinstance(x, (Variable, torch.Tensor))
            """,
            """
            import torch
            ok = isinstance(x, torch.Tensor)
            """,
        ),
        Invalid(
            """
            import torch
            from torch.autograd import Variable
            ok = a and type(x) != Variable
            """,
            """
            import torch
            ok = a and not isinstance(x, torch.Tensor)
            """,
        ),
        # `torch` is a parameter here: reported, not fixed.
        Invalid(
            """
            from torch.autograd import Variable
            def f(x, torch):
                return isinstance(x, Variable)
            """,
            None,
        ),
    ]

    def check(self, facts):
        own = defines_name(facts, "Variable")
        for node in facts.nodes_of(ast.Compare):
            found = self._compare(facts, node, own)
            if found is not None and not in_torch_version_branch(facts, node):
                yield found
        for node in facts.calls:
            found = self._isinstance(facts, node, own)
            if found is not None and not in_torch_version_branch(facts, node):
                yield found

    def _is_variable(self, facts, expr: ast.expr, own: set[str]) -> bool:
        if isinstance(expr, ast.Name) and expr.id in own:
            return False  # a local `class Variable` may win at run time
        return isinstance(expr, (ast.Name, ast.Attribute)) and facts.qualname(expr) == VARIABLE

    def _compare(self, facts, node: ast.Compare, own: set[str]):
        if len(node.ops) != 1 or not isinstance(node.ops[0], _EQUAL + _NOT_EQUAL):
            return None
        sides = (node.left, node.comparators[0])
        for index in (0, 1):
            typed, other = sides[index], sides[1 - index]
            if _type_call(facts, typed) and self._is_variable(facts, other, own):
                break
        else:
            return None
        negated = isinstance(node.ops[0], _NOT_EQUAL)
        text = facts.segment(node)
        subject = facts.segment(typed.args[0])
        fixable = torch_reachable(facts, node) and "#" not in text
        wanted = f"{'not ' if negated else ''}isinstance({subject}, torch.Tensor)"
        return self.report(
            facts,
            node,
            f"`{text}` is always {negated} since PyTorch 0.4 (a tensor's type is `torch.Tensor`)"
            + ("" if negated else ": the branch is dead"),
            fix=FixSafety.UNSAFE if fixable else False,
            fix_title=f"Write `{wanted}` (the branch runs again for tensors)",
            data=("compare", index, negated, import_to_drop(facts, other)),
        )

    def _isinstance(self, facts, call: ast.Call, own: set[str]):
        func = call.func
        if not (isinstance(func, ast.Name) and func.id == "isinstance" and is_builtin(facts, "isinstance", func)):
            return None
        if len(call.args) != 2 or call.keywords:
            return None
        classes = call.args[1]
        elements = classes.elts if isinstance(classes, ast.Tuple) else [classes]
        hits = [e for e in elements if self._is_variable(facts, e, own)]
        if not hits:
            return None
        variable = hits[0]
        fixable = torch_reachable(facts, call) and "#" not in facts.segment(classes)
        return self.report(
            facts,
            variable,
            f"`{facts.segment(variable)}` in `isinstance` is the legacy name of `torch.Tensor` since PyTorch 0.4",
            fix=fixable,
            fix_title="Check for `torch.Tensor`",
            data=("isinstance", import_to_drop(facts, variable)),
        )

    def fix(self, finding, ctx):
        from gradfix.fixer import Edit

        kind = finding.data[0]
        module = finding.data[-1]
        tensor = ctx.expr(f"{ctx.torch_name()}.Tensor")
        if kind == "compare":
            _, index, negated, _ = finding.data
            node = ctx.node_at(finding.span, cst.Comparison)
            typed = node.left if index == 0 else node.comparisons[0].comparator
            subject = typed.args[0].value
            new: cst.BaseExpression = cst.Call(
                func=cst.Name("isinstance"),
                args=[cst.Arg(subject, comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))), cst.Arg(tensor)],
            )
            if negated:
                new = cst.UnaryOperation(operator=cst.Not(), expression=new)
            edit = Edit(node, new.with_changes(lpar=node.lpar, rpar=node.rpar))
        else:
            variable = ctx.node_at(finding.span, cst.BaseExpression)
            element = ctx.parent(variable)
            classes = ctx.parent(element) if isinstance(element, cst.Element) else None
            if not isinstance(classes, cst.Tuple):
                edit = Edit(variable, tensor.with_changes(lpar=variable.lpar, rpar=variable.rpar))
            else:
                torch_tensor = f"{ctx.torch_name()}.Tensor"
                others = [e for e in classes.elements if e.value is not variable]
                if not any(ctx.code(e.value) == torch_tensor for e in others):
                    edit = Edit(variable, tensor)
                elif len(others) == 1:
                    edit = Edit(classes, others[0].value)
                else:
                    last = others[-1].with_changes(comma=classes.elements[-1].comma)
                    edit = Edit(classes, classes.with_changes(elements=[*others[:-1], last]))
        if module:
            ctx.remove_import_if_unused(module, "Variable")
        return [edit]


def _type_call(facts, expr: ast.expr) -> bool:
    """``type(x)`` with the builtin ``type``."""
    return (
        isinstance(expr, ast.Call)
        and isinstance(expr.func, ast.Name)
        and expr.func.id == "type"
        and len(expr.args) == 1
        and not expr.keywords
        and not isinstance(expr.args[0], ast.Starred)
        and is_builtin(facts, "type", expr.func)
    )
