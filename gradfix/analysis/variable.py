"""Legacy ``torch.autograd.Variable(...)`` calls: finding them, and rewriting them (GF401, GF402).

:func:`variable_calls` sorts out each call's arguments once; the rewrites (``x.detach()`` and
friends) and the removal of the unused import are built here so that every rule writes them
the same way.
"""

from __future__ import annotations

import ast
import functools
import io
import os
import re
import tokenize
import weakref
from dataclasses import dataclass
from typing import Iterator

from gradfix.lazy import cst

from gradfix.analysis.calls import callees
from gradfix.analysis.flow import innermost_statement
from gradfix.analysis.grad_use import uses_grads
from gradfix.analysis.insertion import plan_no_grad
from gradfix.analysis.regions import header_records_no_graph, records_no_graph
from gradfix.analysis.provenance import BATCH, COMPUTED, DATA, DETACHED, FRESH, INTEGER, PROVEN, VARIABLE, constructor, origin, sole_holder
from gradfix.analysis.statements import (
    can_wrap,
    crosses_notebook_cell,
    innermost_loop,
    is_cell_marker,
    is_within,
    statement_block,
    torch_reachable,
    wrap_in_no_grad,
)
from gradfix.analysis.toggles import toggles_grad_globally
from gradfix.analysis.vocabulary import in_torch_version_branch
from gradfix.facts import dotted_name, main_guard
from gradfix.model import FixSafety, Span
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

# -- what an expert writes instead ----------------------------------------------------------------
_EVIDENCE = {
    FRESH: "a fresh tensor",
    DATA: "a tensor's `.data`",
    DETACHED: "a detached tensor",
    COMPUTED: "a tensor computed from grad-free tensors",
    INTEGER: "an integer tensor, which cannot require grad",
}


@dataclass(frozen=True)
class Rewrite:
    """What one ``Variable(...)`` call becomes.

    ``kind``: ``drop`` (the argument alone), ``drop_data`` (``h`` for ``h.data``, where a
    ``.detach()`` follows at once), ``detach_data`` (``h.data`` -> ``h.detach()``),
    ``constructor_flag`` (``requires_grad=`` moves into the constructor call),
    ``requires_grad`` (``x.requires_grad_(flag)`` on a fresh tensor), ``detach``
    (``x.detach()``, the exact alias) or ``exact`` (``x.detach().requires_grad_(flag)`` with the
    flag as written, for ``style = "exact"``). ``assumption`` says why the rewrite is unsafe, if it is.
    """

    kind: str
    text: str
    safety: FixSafety
    data: ast.expr | None = None  # the wrapped argument
    evidence: str = ""  # why this form, for the message ("the argument is a fresh tensor")
    assumption: str = ""

    @property
    def title(self) -> str:
        shown = self.text if len(self.text) <= 48 and "\n" not in self.text else None
        if self.kind in ("drop", "drop_data"):
            title = f"Drop the wrapper: `{shown}`" if shown else "Drop the `Variable(...)` wrapper"
        elif self.kind == "constructor_flag":
            title = f"Write `{shown}`" if shown else "Pass `requires_grad=` to the constructor"
        else:
            title = f"Write `{shown}`" if shown else f"Write `.{'requires_grad_' if self.kind == 'requires_grad' else 'detach'}()`"
        return f"{title} ({self.assumption})" if self.assumption else title


def plan_rewrite(facts, found: VariableCall, exact: bool = False) -> Rewrite:
    """The rewrite of a fixable call: the idiomatic form, or always ``.detach()`` if ``exact``.
    What the argument is comes from :func:`~gradfix.analysis.provenance.origin` (a name is
    followed to the assignments that reach the call)."""
    data, flag = found.data, found.requires_grad
    literal = truthiness(flag)  # False when no flag is given
    receiver = receiver_text(facts, data)
    wanted_flag = "" if literal is True else flag_text(facts, flag) if flag is not None else ""
    if not exact and flag is None and _detached_at_once(facts, found.call):
        # `Variable(h).detach()`, `Variable(h.data).detach()`, `Variable(h).data`: what follows
        # already makes the alias
        of_data = isinstance(data, ast.Attribute) and data.attr == "data"
        text = receiver_text(facts, data.value if of_data else data)
        return Rewrite("drop_data" if of_data else "drop", text, FixSafety.SAFE, data, f"`{text}`, detached right after")
    where = None if exact else origin(facts, data)
    proven = where is not None and where.kind in PROVEN and (where.holder is None or sole_holder(facts, where.holder))
    if proven and where.kind == DATA and isinstance(data, ast.Attribute) and data.attr == "data":
        text = f"{receiver_text(facts, data.value)}.detach()"
        if literal is not False:
            text += f".requires_grad_({wanted_flag})"
        return Rewrite("detach_data", text, FixSafety.SAFE, data, _EVIDENCE[DATA])
    if proven:
        evidence = _EVIDENCE[where.kind]
        if where.holder is not None:
            evidence = f"`{facts.segment(where.holder)}`, {evidence} (line {where.line})"
        if literal is False:
            return Rewrite("drop", facts.segment(data), FixSafety.SAFE, data, evidence)
        if _takes_requires_grad(facts, data):
            text = facts.segment(data)[:-1].rstrip().rstrip(",")
            sep = "" if text.endswith("(") else ", "
            shown_flag = "True" if literal is True else flag_text(facts, flag)
            return Rewrite("constructor_flag", f"{text}{sep}requires_grad={shown_flag})", FixSafety.SAFE, data, evidence)
        return Rewrite("requires_grad", f"{receiver}.requires_grad_({wanted_flag})", FixSafety.SAFE, data, evidence)
    if where is not None and where.kind == BATCH and literal is False:
        return Rewrite(
            "drop",
            facts.segment(data),
            FixSafety.UNSAFE,
            data,
            f"the loader batch `{_root_name(data)}`",
            "assumes the batch needs no grad",
        )
    if where is not None and where.kind == BATCH and (where.holder is None or sole_holder(facts, where.holder)):
        # `Variable(data, flag)`: the batch itself is flagged, as nothing else holds it
        return Rewrite(
            "requires_grad",
            f"{receiver}.requires_grad_({wanted_flag})",
            FixSafety.UNSAFE,
            data,
            f"the loader batch `{_root_name(data)}`",
            "assumes the batch needs no grad",
        )
    text = f"{receiver}.detach()"
    if flag is not None and (exact or literal is not False):
        text += f".requires_grad_({flag_text(facts, flag) if exact else wanted_flag})"
    return Rewrite("exact" if exact else "detach", text, FixSafety.SAFE, data)


def _takes_requires_grad(facts, expr: ast.expr) -> bool:
    """``expr`` is a one-line constructor call that ``requires_grad=`` can be added to."""
    return (
        constructor(facts, expr) is True
        and expr.lineno == expr.end_lineno
        and all(k.arg is not None for k in expr.keywords)
    )


def _root_name(expr: ast.expr) -> str:
    """The name under ``batch[0].cuda()``, ``batch.text``, ``Variable(data).cuda()``."""
    while isinstance(expr, (ast.Call, ast.Subscript, ast.Attribute)):
        if isinstance(expr, ast.Call):
            expr = expr.args[0] if not isinstance(expr.func, ast.Attribute) and expr.args else getattr(expr.func, "value", expr.func)
        else:
            expr = expr.value
    return expr.id if isinstance(expr, ast.Name) else "batch"


def variable_calls(facts) -> Iterator[VariableCall]:
    """Calls that resolve to ``torch.autograd.Variable`` (any import spelling)."""
    own_definition = defines_name(facts, "Variable")
    for call in facts.calls:
        if facts.call_qualname(call) != VARIABLE:
            continue
        func = call.func
        if isinstance(func, ast.Name) and func.id in own_definition:
            continue  # a local ``class Variable``/``def Variable`` may win at run time
        if in_torch_version_branch(facts, call):
            continue  # `if torch.__version__ < '0.4': ... Variable(x, volatile=True)`: meant for that torch
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
        module = import_to_drop(facts, func)
        yield VariableCall(call, args.get("data"), args.get("requires_grad"), args.get("volatile"), blocker, module)


_REMOVABLE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # facts -> may the import go


def import_to_drop(facts, use: ast.expr) -> str | None:
    """The module to drop ``Variable`` from once the fix removes ``use`` and no use is left,
    or None: ``use`` is not a plain ``Variable`` from ``from M import Variable``, or another
    module may take ``Variable`` from this one (``__init__.py``, a ``try`` fallback import,
    ``from this import *`` next door)."""
    if not (isinstance(use, ast.Name) and use.id == "Variable"):
        return None
    removable = _REMOVABLE.get(facts)
    if removable is None:  # computed once per file (it may read sibling files)
        removable = (
            not _is_package_init(facts.path)
            and not _imported_in_try(facts, "Variable")
            and not _reexported(facts, "Variable")
        )
        _REMOVABLE[facts] = removable
    if not removable:
        return None
    target = facts.resolve_name("Variable", use) or ""
    return target.rpartition(".")[0] or None


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


def defines_name(facts, name: str) -> set[str]:
    nodes = [*facts.functions, *facts.nodes_of(ast.ClassDef)]
    return {name} if any(n.name == name for n in nodes) else set()


def _imported_in_try(facts, name: str) -> bool:
    """Whether a ``from ... import name`` sits in a ``try`` (a fallback import).

    LibCST's RemoveImportsVisitor would leave ``try: pass`` behind; keep such imports.
    """
    for node in facts.nodes_of(ast.ImportFrom):
        if any(a.name == name and not a.asname for a in node.names):
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
    name is exported. An import under ``if __name__ == "__main__":`` runs only when the file is
    the script, so no importer sees it.
    """
    bindings = [n for n in facts.nodes_of(ast.ImportFrom) if any((a.asname or a.name) == name for a in n.names)]
    if bindings and all(_under_main_guard(facts, n) for n in bindings):
        return False
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


def _under_main_guard(facts, node: ast.AST) -> bool:
    child, parent = node, facts.parents.get(node)
    while parent is not None:
        if isinstance(parent, ast.If) and main_guard(parent.test) and any(child is s for s in parent.body):
            return True
        child, parent = parent, facts.parents.get(parent)
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


def fix_variable_call(finding, ctx):
    """The edit for a finding whose ``data`` is ``(Rewrite.kind, import module or None, span of
    a self-assignment (or `else:` branch) to remove or None, its heir or ELSE, spans of the
    statements to wrap in ``no_grad`` (the loop: :func:`volatile_loop`) or None)``; drops the ``Variable`` import once no use is left."""

    kind, module, statement, heir, run = finding.data
    edits = _own_edits(ctx, finding, kind, module, statement, heir)
    if run is None:
        return edits

    def inside(stmt):  # the call's own edits, made inside the loop that moves into the `with`
        for edit in edits:
            if isinstance(edit.replacement, cst.CSTNode):
                stmt = stmt.deep_replace(edit.node, edit.replacement)
            else:
                stmt = stmt.deep_remove(edit.node)
        return stmt

    return wrap_in_no_grad(ctx, run, inside)


def _own_edits(ctx, finding, kind, module, statement, heir):
    from gradfix.fixer import Edit, FixError

    if module:
        ctx.remove_import_if_unused(module, "Variable")
    if statement is not None and _is_else(heir):
        branch = ctx.node_at(statement, cst.Else)
        edits = [Edit(branch, cst.RemoveFromParent())]
        footer = getattr(branch.body, "footer", ())
        if footer and isinstance(heir, tuple):
            # whitespace-only lines after the branch belong to it in LibCST: the next statement
            # keeps them, byte for byte (their indentation was the branch's)
            _, span, indent = heir
            lines = [
                line.with_changes(indent=False, whitespace=cst.SimpleWhitespace(indent + line.whitespace.value)) if line.indent else line
                for line in footer
            ]
            inherits = _statement_at(ctx, span)
            edits.append(Edit(inherits, inherits.with_changes(leading_lines=[*lines, *inherits.leading_lines])))
        return edits
    if statement is not None:
        line = ctx.parent(ctx.node_at(statement, cst.Assign))
        if not isinstance(line, cst.SimpleStatementLine):
            raise FixError("the assignment moved")
        if heir is None:
            return [Edit(line, cst.RemoveFromParent())]
        # the blank lines and comments above the line stay, above the statement after it
        inherits = _statement_at(ctx, heir)
        moved = inherits.with_changes(leading_lines=[*line.leading_lines, *inherits.leading_lines])
        return [Edit(line, cst.RemoveFromParent()), Edit(inherits, moved)]
    call = ctx.node_at(finding.span, cst.Call)
    new = rewritten(ctx, call, kind)
    return [Edit(call, new.with_changes(lpar=call.lpar, rpar=call.rpar) if call.lpar else new)]


def _statement_at(ctx, span):
    """The LibCST statement (a simple statement line or a compound statement) at ``span``."""
    from gradfix.fixer import FixError

    for kind in (cst.SimpleStatementLine, cst.BaseCompoundStatement):
        try:
            return ctx.node_at(span, kind)
        except FixError:
            continue
    raise FixError("the statement after the removed line moved")


def raises_value_error(found: VariableCall) -> bool:
    """``volatile`` and ``requires_grad`` may both be true: the call raises ValueError today."""
    return found.volatile is not None and truthiness(found.volatile) is not False is not truthiness(found.requires_grad)


def run_plans(facts, rule, exact: bool) -> dict[ast.Call, Rewrite]:
    """The rewrite of every ``Variable`` call that GF401 or GF402 rewrites in this run:
    ``volatile=`` calls are GF401's while it is enabled, the others GF402's."""
    def on(code: str) -> bool:
        return code == rule.code or rule.defers_to(code)

    plans = {}
    for found in variable_calls(facts):
        owner = "GF401" if found.volatile is not None and on("GF401") else "GF402"
        if on(owner) and found.blocker is None and not raises_value_error(found):
            plans[found.call] = plan_rewrite(facts, found, exact)
    return plans


def report_rewrites(rule, facts, planned, exact: bool):
    """The findings of a rule for ``(call, Rewrite, message[, title suffix])`` entries; a
    statement that would assign batches to themselves once every wrapper in it goes (by
    whichever of GF401/GF402 runs) is removed instead."""
    plans = run_plans(facts, rule, exact)
    removed, kept = self_assignments(facts, plans)
    for found, plan, message, *extra in planned:
        suffix, loop = (extra + ["", None])[:2]
        statement, heir = removed.get(found.call, (None, None))
        if isinstance(heir, tuple):  # (ELSE, the statement taking the branch's trailing lines, indent)
            heir = (ELSE, facts.span(heir[1]), heir[2])
        if found.call in kept:
            # `x = x` cannot go without the comment above it: the exact alias, never `x = x`
            plan = plan_rewrite(facts, found, exact=True)
        title = plan.title
        if statement is not None:
            title = (
                "Remove the `else` branch: without the wrappers it assigns values to themselves" if _is_else(heir)
                else "Remove the line: without the wrappers it assigns the value to itself"
            )
            if plan.assumption:
                title += f" ({plan.assumption})"
        safety = plan.safety
        if loop is not None:  # what `volatile=True` meant: no graph for the whole loop
            title, suffix, safety = f"Wrap the loop in `with torch.no_grad():`; {title[0].lower()}{title[1:]}", "", FixSafety.UNSAFE
        yield rule.report(
            facts,
            found.call,
            message,
            fix=safety,
            fix_title=title + suffix,
            data=(
                plan.kind,
                found.import_module,
                statement if _is_else(heir) else facts.span(statement) if statement is not None else None,
                heir if _is_else(heir) else facts.span(heir) if heir is not None else None,
                tuple(facts.span(s) for s in loop) if loop is not None else None,
            ),
        )


def volatile_loop(facts, call: ast.Call) -> tuple[ast.stmt, ...] | None:
    """The loop that a ``Variable(x, volatile=True)`` call meant to run without a graph, when
    ``with torch.no_grad():`` around it changes nothing else: the innermost ``for``/``while``
    around the call (in its function, or at module level), in no grad-mode region, in a file
    with no bare ``set_grad_enabled`` toggle, where nothing computes or asks for gradients (no
    `.backward()`, optimizer step, `torch.autograd.grad`, `.grad`, `requires_grad`, neither in
    the loop nor in a file function it calls) and which can move into a ``with`` block. None
    otherwise (a validation loop inside a training loop's body: the loop around it trains).
    The ``with`` goes where :func:`~gradfix.analysis.insertion.plan_no_grad` puts it: around
    the loops around that one whose other statements record no graph (`for i: start = k * i;
    for j: ..` is entered once, not once per `i`), and around the grad-free statements between
    such loops; the statements it holds are returned."""
    if facts.regions_around(call) or toggles_grad_globally(facts):
        return None
    stmt = innermost_statement(facts.parents, call)
    func = facts.function_of.get(call)
    loop = innermost_loop(facts, func, [stmt]) if stmt is not None else None
    if loop is None or not _needs_no_graph(facts, loop) or not torch_reachable(facts, loop, "no_grad"):
        return None
    plan = plan_no_grad(
        facts,
        func,
        [[loop]],
        joins=lambda s: records_no_graph(facts, s),
        header_ok=lambda s: header_records_no_graph(facts, s),
        outside_ok=lambda before, after: False,
        private=True,
    )
    run = next((r for r in plan.runs if any(s is loop or is_within(facts, loop, s) for s in r)), None)
    if run is None or not can_wrap(facts, list(run)) or not all(_needs_no_graph(facts, s) for s in run):
        return (loop,) if can_wrap(facts, [loop]) else None
    return run


def _needs_no_graph(facts, stmt: ast.stmt) -> bool:
    """Nothing in ``stmt``, nor in a file function it calls, computes or asks for gradients."""
    if uses_grads(facts, stmt):
        return False
    return not any(isinstance(node, ast.Call) and any(uses_grads(facts, f) for f in callees(facts, node).defs) for node in ast.walk(stmt))


def _alone_on_its_lines(facts, stmt: ast.stmt) -> bool:
    """No comment and no other statement on ``stmt``'s lines (a `;` may end it), but a
    trailing comment that speaks of the wrapper (`x = Variable(x)  # wrap in a Variable`),
    which goes with the line."""
    lines = [facts.line_text(n) for n in range(stmt.lineno, stmt.end_lineno + 1)]
    text, segment = "\n".join(lines).strip(), facts.segment(stmt)
    if text.startswith(segment) and "#" not in segment:
        comment = text[len(segment):].strip()
        if comment.startswith("#") and "\n" not in comment and _WRAPPER_COMMENT.search(comment):
            return True
    return not any("#" in line for line in lines) and text.removesuffix(";").rstrip() == segment


def _copies_itself(comp: ast.ListComp, call: ast.Call, plan: Rewrite) -> bool:
    """``[Variable(t) for t in xs]`` once the wrapper goes is ``[t for t in xs]``: a copy of
    the list ``xs`` (one plain generator, no condition, the element its own target)."""
    if comp.elt is not call or plan.kind != "drop" or len(comp.generators) != 1:
        return False
    gen = comp.generators[0]
    return not gen.ifs and not gen.is_async and isinstance(gen.target, ast.Name) and dotted_name(plan.data) == gen.target.id


_READING_BUILTINS = frozenset({"len", "zip", "enumerate", "list", "tuple", "sorted", "reversed", "iter", "print", "sum", "max", "min", "any", "all"})
_READING_TORCH = frozenset({"torch.cat", "torch.stack", "torch.hstack", "torch.vstack"})


def _copy_unobserved(facts, stmt: ast.Assign, name: str) -> bool:
    """Nothing else in ``stmt``'s function can tell the copy ``name = [t for t in name]`` from
    the list it copies: every other read of ``name`` iterates it, indexes it or hands it to a
    builtin or torch function that only reads it. A call that may append to it (``pad(inpts)``
    doing ``inpts.append(..)``) would grow the caller's list instead of the copy."""
    func = facts.function_of.get(stmt)
    scope = func if func is not None else facts.tree
    inside = {id(n) for n in ast.walk(stmt)}
    for node in ast.walk(scope):
        if not (isinstance(node, ast.Name) and node.id == name) or id(node) in inside or facts.function_of.get(node) is not func:
            continue
        if not isinstance(node.ctx, ast.Load):
            continue  # rebound: a new object from then on
        parent = facts.parents.get(node)
        if isinstance(parent, ast.Subscript) and parent.value is node and isinstance(parent.ctx, ast.Load):
            continue
        if isinstance(parent, (ast.For, ast.comprehension)) and parent.iter is node:
            continue
        if isinstance(parent, ast.Call) and node in parent.args:
            callee = parent.func
            if isinstance(callee, ast.Name) and callee.id in _READING_BUILTINS and facts.resolve_name(callee.id, parent) is None:
                continue
            if facts.call_qualname(parent) in _READING_TORCH:
                continue
        return False
    return True


def self_assignments(facts, plans: dict[ast.Call, Rewrite]) -> tuple[dict[ast.Call, tuple[ast.Assign, ast.stmt | None]], set[ast.Call]]:
    """The calls whose statement would read ``data = data`` (``data, target = data, target``)
    once every wrapper in it is dropped: that statement goes instead, ``call -> (statement,
    heir)``, where ``heir`` is the statement after it that keeps the blank lines above it
    (None: there are none). Only for a statement alone on its lines, with no comment (but one
    that speaks of the wrapper), and not for every statement of a block (it needs one). Second:
    the calls of such statements that must stay (a comment above or beside them, another
    statement on their lines, blank lines and no statement after them to carry those, or a
    block they would leave empty): they become the exact alias, never ``x = x``."""
    found: dict[ast.Call, ast.Assign] = {}
    held: set[ast.Call] = set()  # self-assignments a comment or another statement holds in place
    for call, plan in plans.items():
        stmt = facts.parents.get(call)
        if isinstance(stmt, ast.ListComp):  # `targets = [Variable(t) for t in targets]`
            comp, stmt = stmt, facts.parents.get(stmt)
            if _copies_itself(comp, call, plan) and isinstance(stmt, ast.Assign) and stmt.value is comp and len(stmt.targets) == 1:
                target = stmt.targets[0]
                if isinstance(target, ast.Name) and dotted_name(comp.generators[0].iter) == target.id:
                    if _alone_on_its_lines(facts, stmt) and _copy_unobserved(facts, stmt, target.id):
                        found[call] = stmt
            continue
        if isinstance(stmt, ast.Tuple):
            stmt = facts.parents.get(stmt)
        if not isinstance(stmt, ast.Assign) or len(stmt.targets) != 1 or stmt in found.values():
            continue
        target, value = stmt.targets[0], stmt.value
        pairs = list(zip(target.elts, value.elts)) if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple) else [(target, value)]
        if len(pairs) != len(getattr(target, "elts", [target])) or not all(
            isinstance(t, (ast.Name, ast.Attribute)) and isinstance(v, ast.Call) and v in plans and plans[v].kind == "drop"
            and dotted_name(t) is not None and dotted_name(plans[v].data) == dotted_name(t)
            for t, v in pairs
        ):
            continue
        if not _alone_on_its_lines(facts, stmt):
            held.update(v for _, v in pairs)  # a comment, or another statement on its lines
            continue
        for _, v in pairs:
            found[v] = stmt
    candidates = set(found) | held
    # A block must keep a statement: where every statement of it would go, none goes; but an
    # `else:` whose every statement would go goes with them (`if cuda: x = Variable(x.cuda())
    # else: x = Variable(x)` becomes `if cuda: x = x.cuda()`), when its fixes are alike in safety
    # and no comment lives in it.
    whole_else: dict[ast.Call, tuple] = {}
    for stmt in set(found.values()):
        where = statement_block(facts, stmt)
        block = getattr(*where) if where else []
        if all(s in found.values() for s in block):
            calls = [c for c, s in found.items() if s in block]
            if where[1] == "orelse" and isinstance(where[0], ast.If) and len({plans[c].safety for c in calls}) == 1:
                keyword = _else_keyword(facts, where[0])
                marker = _else_marker(facts, where[0], plans) if keyword is not None else None
                if marker is not None:
                    whole_else.update((c, (keyword, marker)) for c in calls)
            found = {c: s for c, s in found.items() if s not in block}
    # Blank lines and comments above a removed statement move to the first statement after it
    # that stays (one run of removed lines at a time): a comment there is as often the section's
    # heading (`# build the model`) as the line's own. One that speaks of the wrapper (`# wrap
    # the batch in Variables`) is the line's own and keeps it, as the exact alias; so does a
    # line with no statement after it in its block (or its notebook cell) to take them, and one
    # whose heir holds another wrapper to fix.
    going = set(found.values())
    heirs: dict[ast.stmt, ast.stmt | None] = {}
    for stmt in going:
        above = _lines_above(facts, stmt)
        if above is None:
            heirs[stmt] = None
            continue
        if above == "comment" and _WRAPPER_COMMENT.search(_comment_above(facts, stmt)):
            continue  # `# wrap them in Variable`: the line's own comment, it would mislead below
        where = statement_block(facts, stmt)
        block = getattr(*where) if where else []
        i = block.index(stmt) + 1
        while i < len(block) and block[i] in going and _lines_above(facts, block[i]) is None:
            i += 1
        heir = block[i] if i < len(block) else None
        # the heir's edit (its new leading lines) must not overlap the fix of a call inside it
        if (heir is not None and heir not in going and not getattr(heir, "decorator_list", None)
                and not crosses_notebook_cell(facts, stmt, heir)
                and not any(n in plans for n in ast.walk(heir))):
            heirs[stmt] = heir
    removed = {c: (s, heirs[s]) for c, s in found.items() if s in heirs}
    removed.update(whole_else)
    return removed, candidates - set(removed)


ELSE = "else"  # the heir of a self-assignment that goes with its whole `else:` branch


def _is_else(heir) -> bool:
    """``heir`` marks a whole `else:` branch that goes: ``ELSE``, or ``(ELSE, heir, indent)``."""
    return heir == ELSE or isinstance(heir, tuple)


def _else_marker(facts, node: ast.If, plans) -> str | tuple | None:
    """How ``node``'s `else:` branch goes: ``ELSE``, or ``(ELSE, the statement after the `if`,
    the branch's indentation)`` when whitespace-only lines follow the branch (LibCST keeps
    those indented as deep as it in the branch): the next statement takes them, so no line is
    lost; None when no statement can (none follows, or it holds a fix of its own)."""
    first, last = node.orelse[0], node.orelse[-1]
    trailing = False
    for line in range(last.end_lineno + 1, len(facts.lines) + 1):
        text = facts.line_text(line)
        if text.strip():
            break
        trailing = trailing or bool(text.strip("\r\n"))
    if not trailing:
        return ELSE
    where = statement_block(facts, node)
    block = getattr(*where) if where else []
    i = block.index(node) + 1 if node in block else len(block)
    heir = block[i] if i < len(block) else None
    if (heir is None or getattr(heir, "decorator_list", None) or crosses_notebook_cell(facts, node, heir)
            or any(n in plans for n in ast.walk(heir))):
        return None
    return ELSE, heir, facts.line_text(first.lineno)[: first.col_offset]


def _else_keyword(facts, node: ast.If) -> Span | None:
    """Where the `else` keyword of ``node`` starts (the span LibCST's ``Else`` starts at), when
    no comment would go with the branch: none between the `if` body and the keyword, none on
    its line, none inside the branch or indented as its statements after it."""
    first, last = node.orelse[0], node.orelse[-1]
    keyword = None
    for line in range(node.body[-1].end_lineno + 1, first.lineno):
        text = facts.line_text(line)
        if re.fullmatch(r"[ \t]*else[ \t]*:[ \t]*", text):
            keyword = Span(line, len(text) - len(text.lstrip()), last.end_lineno, last.end_col_offset)
        elif text.strip():
            return None  # a comment, `elif`, a line continuation
    # LibCST keeps the comments after the branch that are indented less than its statements;
    # the others belong to the branch and would go with it
    indent = first.col_offset
    for line in range(last.end_lineno + 1, len(facts.lines) + 1):
        text = facts.line_text(line)
        stripped = text.lstrip()
        if stripped and not stripped.startswith("#"):
            break
        if stripped and len(text) - len(stripped) >= indent:
            return None
    return keyword


_WRAPPER_COMMENT = re.compile(r"variable|wrap", re.IGNORECASE)


def _comment_above(facts, stmt: ast.stmt) -> str:
    """The comments right above ``stmt`` (blank lines between them skipped, cell markers left
    out), joined."""
    return "\n".join(t for t in _leading_lines(facts, stmt) if t and not is_cell_marker(t))


def _lines_above(facts, stmt: ast.stmt) -> str | None:
    """What stands between ``stmt`` and the line before it: ``"blank"`` lines only,
    ``"comment"`` (with or without blank lines), or None (nothing, or its block's header)."""
    if _opens_block(facts, stmt):
        return None
    lines = _leading_lines(facts, stmt)
    return "comment" if any(lines) else "blank" if lines else None


def _leading_lines(facts, stmt: ast.stmt) -> list[str]:
    """The blank (``""``) and comment lines right above ``stmt``, stripped, nearest first."""
    found, line = [], stmt.lineno - 1
    while line >= 1 and (not (text := facts.line_text(line).strip()) or text.startswith("#")):
        found.append(text)
        line -= 1
    return found


def _opens_block(facts, stmt: ast.stmt) -> bool:
    """``stmt`` is the first statement of a block, right under its header line."""
    where = statement_block(facts, stmt)
    body = getattr(*where) if where else []
    return bool(body) and body[0] is stmt and where[0] is not facts.tree and getattr(where[0], "lineno", 0) == stmt.lineno - 1


def rewritten(ctx, call: cst.Call, kind: str) -> cst.BaseExpression:
    """What ``call`` (a ``Variable(...)``) becomes for a :class:`Rewrite` of ``kind``.
    ``check`` made sure no comment lives outside the kept arguments."""
    args = cst_variable_args(call)
    data = args["data"]
    flag = args.get("requires_grad")
    if isinstance(flag, cst.Integer) and flag.value in ("0", "1"):
        flag = cst.Name("True" if flag.value == "1" else "False")
    literal_true = isinstance(flag, cst.Name) and flag.value == "True"
    flag_args = [] if literal_true else [cst.Arg(flag)] if flag is not None else []
    if kind in ("drop", "drop_data"):
        return _in_place_of(ctx, call, data if kind == "drop" else data.value)
    if kind == "constructor_flag":
        new = cst.Arg(
            flag,
            keyword=cst.Name("requires_grad"),
            equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")),
        )
        old = list(data.args)
        if old:
            new = new.with_changes(whitespace_after_arg=old[-1].whitespace_after_arg)
            old[-1] = old[-1].with_changes(
                comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")), whitespace_after_arg=cst.SimpleWhitespace("")
            )
        return data.with_changes(args=[*old, new])
    if kind == "requires_grad":
        return _method(_as_receiver(ctx, data), "requires_grad_", flag_args)
    if kind == "detach_data":
        expr = _method(data.value, "detach")
    else:
        expr = _method(_as_receiver(ctx, data), "detach")
        if kind == "exact" and flag is not None:  # the mechanical form, flag as written
            return _method(expr, "requires_grad_", [cst.Arg(flag)])
    return _method(expr, "requires_grad_", flag_args) if flag is not None and not _is_false(flag) else expr


def _method(receiver: cst.BaseExpression, name: str, args=()) -> cst.Call:
    return cst.Call(func=cst.Attribute(value=receiver, attr=cst.Name(name)), args=list(args))


def _is_false(flag: cst.BaseExpression) -> bool:
    return isinstance(flag, cst.Name) and flag.value == "False"


def _in_place_of(ctx, call: cst.Call, node: cst.BaseExpression) -> cst.BaseExpression:
    """``node`` written where ``call`` stood: in parentheses only where something there would
    bind tighter (``Variable(i - 1).cuda()`` -> ``(i - 1).cuda()``, ``2 * Variable(a + b)`` ->
    ``2 * (a + b)``), a line break needs them or a walrus does; bare elsewhere (``x =
    Variable(i - 1)`` -> ``x = i - 1``, ``Variable(a - b) + c`` -> ``a - b + c``)."""
    if node.lpar:
        return node
    if isinstance(node, (cst.NamedExpr, cst.Yield, cst.Lambda)) or _line_breaks_bare(ctx, node) or _binds_looser(ctx.parent(call), call, node):
        return _in_parens(node)
    return node


def _as_receiver(ctx, node: cst.BaseExpression) -> cst.BaseExpression:
    """``node`` written to take a method call (``Variable(a + b)`` -> ``(a + b).detach()``): in
    parentheses where it would not be the receiver as a whole, or a line break that only the
    call's parentheses made legal must stay inside parentheses."""
    if node.lpar or not (_loose_receiver(node) or _line_breaks_bare(ctx, node)):
        return node
    return _in_parens(node)


def _in_parens(node: cst.BaseExpression) -> cst.BaseExpression:
    return node.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])


def _loose_receiver(node: cst.BaseExpression) -> bool:
    """``node`` followed by ``.name``, ``(..)`` or ``[..]`` would not be their receiver as a
    whole: an operator binds looser, a number would read as a float (``1.cuda()``), implicitly
    joined strings give only their last part."""
    return _precedence(node) < _ATOM or isinstance(node, (cst.Integer, cst.Float, cst.Imaginary, cst.ConcatenatedString))


def _binds_looser(parent, child: cst.BaseExpression, node: cst.BaseExpression) -> bool:
    """Whether ``node``, put in ``child``'s place in ``parent``, would bind looser than
    ``parent`` needs (Python's operator precedence; ``**`` groups right, the others left)."""
    if isinstance(parent, (cst.Attribute, cst.Subscript, cst.Await)) or (isinstance(parent, cst.Call) and parent.func is child):
        return _loose_receiver(node)
    inner = _precedence(node)
    if isinstance(parent, cst.BinaryOperation):
        outer = _precedence(parent)
        power = isinstance(parent.operator, cst.Power)
        if parent.left is child:
            return inner < outer or (inner == outer and power)
        return inner < outer or (inner == outer and not power)
    if isinstance(parent, (cst.UnaryOperation, cst.Comparison, cst.ComparisonTarget, cst.BooleanOperation)):
        return inner <= _precedence(parent)
    return False


_ATOM = 10
_BINARY = {
    "BitOr": 4, "BitXor": 5, "BitAnd": 6, "LeftShift": 7, "RightShift": 7, "Add": 8, "Subtract": 8,
    "Multiply": 9, "MatrixMultiply": 9, "Divide": 9, "FloorDivide": 9, "Modulo": 9, "Power": 9.5,
}


def _precedence(node) -> float:
    """Python's binding strength of an expression (higher binds tighter; an atom is _ATOM; a
    kind not known here is 0, so that it is parenthesised wherever that could matter)."""
    if isinstance(node, cst.BinaryOperation):
        return _BINARY.get(type(node.operator).__name__, 0)
    if isinstance(node, cst.UnaryOperation):
        return 3 if isinstance(node.operator, cst.Not) else 9.2
    if isinstance(node, (cst.Comparison, cst.ComparisonTarget)):
        return 3.5
    if isinstance(node, cst.BooleanOperation):
        return 2 if isinstance(node.operator, cst.And) else 1
    if isinstance(node, cst.Await):
        return 9.8
    return _ATOM if isinstance(node, _atoms()) else 0


@functools.lru_cache(maxsize=None)
def _atoms() -> tuple[type, ...]:
    """LibCST's atom kinds: names, calls, subscripts, literals, displays (built on first use:
    libcst loads lazily)."""
    return (
        cst.Name, cst.Attribute, cst.Call, cst.Subscript, cst.SimpleString, cst.FormattedString,
        cst.ConcatenatedString, cst.Integer, cst.Float, cst.Imaginary,
        cst.List, cst.Tuple, cst.Dict, cst.Set, cst.ListComp, cst.SetComp, cst.DictComp,
    )


def _line_breaks_bare(ctx, node: cst.BaseExpression) -> bool:
    """Whether ``node``'s code breaks a line outside brackets of its own: legal only inside the
    call's parentheses (an expression that parses on its own breaks lines only inside them)."""
    code = ctx.code(node)
    if "\n" not in code:
        return False
    try:
        ast.parse(code, mode="eval")
    except SyntaxError:
        return True
    return False


def _detached_at_once(facts, call: ast.Call) -> bool:
    """``call`` is the receiver of a ``.detach()`` call or a ``.data`` read:
    ``Variable(x).detach()``, ``Variable(x).data`` (both a detached alias of ``x`` already)."""
    attribute = facts.parents.get(call)
    if not (isinstance(attribute, ast.Attribute) and attribute.value is call):
        return False
    if attribute.attr == "data":
        return isinstance(attribute.ctx, ast.Load)
    if attribute.attr != "detach":
        return False
    outer = facts.parents.get(attribute)
    return isinstance(outer, ast.Call) and outer.func is attribute and not outer.args and not outer.keywords