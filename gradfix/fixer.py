"""Apply rule fixes with LibCST: one parse, one transformer pass, one compile check.

Every edit is keyed on an original CST node, so two fixes in one file never see each
other's output. When two fixes touch overlapping code, the outer one wins this run and the
inner finding stays reported (the next run picks it up). Bytes outside the edited nodes come
from LibCST's lossless round trip: comments, blank lines, quotes, CRLF, BOM and the encoding
declaration survive.
"""

from __future__ import annotations

import bisect
import warnings
from dataclasses import dataclass, field
from typing import Callable, Sequence, TypeVar

import libcst as cst
from libcst.codemod import CodemodContext
from libcst.codemod.visitors import AddImportsVisitor, RemoveImportsVisitor
from libcst.helpers import get_full_name_for_node
from libcst.metadata import MetadataWrapper, ParentNodeProvider, PositionProvider

from gradfix.model import Finding, Span

N = TypeVar("N", bound=cst.CSTNode)
Replacement = cst.CSTNode | cst.FlattenSentinel | cst.RemovalSentinel


@dataclass(frozen=True)
class Edit:
    """Replace ``node`` (an original node of the parsed module) with ``replacement``."""

    node: cst.CSTNode
    replacement: Replacement


class FixError(Exception):
    """A rule could not build its fix (the finding stays reported, unfixed)."""


@dataclass
class _ImportRequest:
    add: list[tuple[str, str | None]] = field(default_factory=list)  # (module, name)
    remove_if_unused: list[tuple[str, str | None]] = field(default_factory=list)


class FixContext:
    """What a rule's ``fix`` can ask about the LibCST module it edits."""

    def __init__(self, module: cst.Module):
        self.wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
        self.module = self.wrapper.module
        self.positions = self.wrapper.resolve(PositionProvider)
        self.parents = self.wrapper.resolve(ParentNodeProvider)
        self._by_start: dict[tuple[int, int], list[cst.CSTNode]] = {}
        for node, pos in self.positions.items():
            self._by_start.setdefault((pos.start.line, pos.start.column), []).append(node)
        self.imports = _ImportRequest()

    # -- finding nodes --------------------------------------------------------------------
    def node_at(self, span: Span, kind: type[N] = cst.CSTNode) -> N:
        """The node of type ``kind`` that starts at ``span`` (and ends there, if several)."""
        candidates = [n for n in self._by_start.get((span.line, span.col), []) if isinstance(n, kind)]
        if len(candidates) > 1:
            exact = [
                n
                for n in candidates
                if (self.positions[n].end.line, self.positions[n].end.column) == (span.end_line, span.end_col)
            ]
            candidates = exact or candidates
        if not candidates:
            raise FixError(f"no {kind.__name__} at {span.line}:{span.col + 1}")
        return candidates[0]

    def span_of(self, node: cst.CSTNode) -> Span:
        p = self.positions[node]
        return Span(p.start.line, p.start.column, p.end.line, p.end.column)

    def parent(self, node: cst.CSTNode) -> cst.CSTNode | None:
        return self.parents.get(node)

    def code(self, node: cst.CSTNode) -> str:
        return self.module.code_for_node(node)

    # -- building code ------------------------------------------------------------------------
    def expr(self, code: str) -> cst.BaseExpression:
        return cst.parse_expression(code, config=self.module.config_for_parsing)

    def statement(self, code: str) -> cst.BaseStatement:
        return cst.parse_statement(code, config=self.module.config_for_parsing)

    def torch_name(self) -> str:
        """The name this module uses for ``torch`` (``T`` after ``import torch as T``), also
        where the import is conditional (``if is_torch_available(): import torch``: the code
        that uses torch runs only where it is, and an added top-level import would break the
        module without torch).

        If the module never imports torch as a module, ``import torch`` is added.
        """
        for small in self._module_level_imports():
            if isinstance(small, cst.Import):
                for alias in small.names:
                    if self.code(alias.name) == "torch":
                        return alias.evaluated_alias or "torch"
        self.add_import("torch")
        return "torch"

    def grad_api(self, api: str) -> str:
        """How to write torch's ``api`` (``no_grad``) here: the name a top-level ``from torch
        import no_grad [as ng]`` binds (see ``FileFacts.grad_api_alias``, which the rules ask
        before they offer a fix), else ``torch.no_grad`` through :meth:`torch_name`."""
        from gradfix.facts import GRAD_API_MODULES

        for small in self._module_level_imports():
            if (
                isinstance(small, cst.ImportFrom)
                and not small.relative
                and small.module is not None
                and self.code(small.module) in GRAD_API_MODULES
                and not isinstance(small.names, cst.ImportStar)
            ):
                for alias in small.names:
                    if self.code(alias.name) == api:
                        return alias.evaluated_alias or api
        return f"{self.torch_name()}.{api}"

    def _module_level_imports(self):
        """The ``import`` / ``from .. import`` statements that run at module level."""
        for stmt in _module_level(self.module.body):
            if isinstance(stmt, cst.SimpleStatementLine):
                yield from (small for small in stmt.body if isinstance(small, (cst.Import, cst.ImportFrom)))

    def add_import(self, module: str, name: str | None = None) -> None:
        self.imports.add.append((module, name))

    def remove_import_if_unused(self, module: str, name: str | None = None) -> None:
        self.imports.remove_if_unused.append((module, name))


def _main_guard(test: cst.BaseExpression) -> bool:
    """The test of a ``__main__`` guard, as ``gradfix.facts.main_guard`` reads it."""
    code = cst.Module([]).code_for_node(test)
    return "__name__" in code and "__main__" in code


def _module_level(body):
    """The statements that run at module level: ``body`` and, in order, the blocks of its
    ``if``/``try``/``with`` statements (as ``FileFacts``' module scope sees them), not the
    bodies of functions and classes, nor the ``__main__`` guard's block: an ``import torch``
    there binds nothing for a decorator evaluated above it or for a module that is imported."""
    for stmt in body:
        yield stmt
        if isinstance(stmt, cst.If) and _main_guard(stmt.test):
            continue  # runs after the definitions above it, and never when the module is imported
        if isinstance(stmt, (cst.If, cst.Try, cst.TryStar, cst.With)):
            blocks = [stmt.body]
            if isinstance(stmt, cst.If) and stmt.orelse is not None:
                blocks.append(stmt.orelse if isinstance(stmt.orelse, cst.If) else stmt.orelse.body)
            if isinstance(stmt, (cst.Try, cst.TryStar)):
                blocks += [h.body for h in stmt.handlers]
                blocks += [part.body for part in (stmt.orelse, stmt.finalbody) if part is not None]
            for block in blocks:
                if isinstance(block, cst.If):
                    yield from _module_level([block])
                elif isinstance(block, cst.IndentedBlock):
                    yield from _module_level(block.body)


class _ApplyEdits(cst.CSTTransformer):
    def __init__(self, edits: dict[cst.CSTNode, Replacement]):
        super().__init__()
        self.edits = edits

    def on_leave(self, original_node, updated_node):
        return self.edits.get(original_node, updated_node)


def _overlaps(a: Span, b: Span) -> bool:
    return (a.line, a.col) < (b.end_line, b.end_col) and (b.line, b.col) < (a.end_line, a.end_col)


@dataclass
class FixRun:
    source: bytes
    applied: set[int] = field(default_factory=set)  # indexes into the findings given
    notes: list[str] = field(default_factory=list)
    #: What gradfix.edits needs to cut the run into each finding's own edit: the edits of each
    #: applied finding and the imports it asked for, the original module's context, the module
    #: with the node edits made (before imports), and the findings dropped because their rule's
    #: fixes did not compile.
    edits: dict[int, list[Edit]] = field(default_factory=dict)
    requests: dict[int, _ImportRequest] = field(default_factory=dict)
    context: FixContext | None = None
    edited: cst.Module | None = None
    dropped: set[int] = field(default_factory=set)
    waiting: set[int] = field(default_factory=set)  # built a fix that lost to an overlapping one


BuildFix = Callable[[Finding, FixContext], "list[Edit] | None"]


def _parsed(source: bytes):
    """``(module, None)``, or ``(None, why)`` when LibCST cannot rewrite ``source`` losslessly."""
    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError as exc:
        return None, f"LibCST could not parse the file ({exc.message})"
    if module.bytes != source:  # e.g. LibCST drops the last "\r" of a file with old Mac line ends
        return None, "LibCST does not reproduce this file byte for byte; left unchanged"
    return module, None


def unfixable(source: bytes) -> str | None:
    """Why no fix can be applied to ``source`` (LibCST cannot rewrite it), or None."""
    return _parsed(source)[1]


def apply_fixes(
    source: bytes, findings: Sequence[Finding | None], build: BuildFix, path: str = "<string>", separate_siblings: bool = False
) -> FixRun:
    """Apply the fixes of ``findings`` (all of them wanted; None entries skipped) to ``source``.

    ``build(finding, ctx)`` returns the edits of one finding (the rule's ``fix``). A rule whose
    edits make the file fail to compile is dropped with an internal-error note naming it; the
    others are kept. With ``separate_siblings`` (for gradfix.edits), two findings whose edits
    replace children of one node wait for separate runs when either drops or adds a child
    there: how a child renders can depend on how many siblings it has (a default comma, the
    ``pass`` of a block left empty), and each finding's edit must render as it does alone.
    """
    module, why = _parsed(source)
    if module is None:
        return FixRun(source, notes=[f"cannot fix: {why}"])
    run = _apply_once(module, findings, build, separate_siblings)
    new = run.source
    if new == source:
        return run
    error = compile_error(new, path)
    if error is None:
        return run
    # Find the culprits: try each rule's fixes alone, drop those that break compilation.
    bad_codes = set()
    for code in sorted({findings[i].code for i in run.applied}):
        alone = _apply_once(module, [f if f is not None and f.code == code else None for f in findings], build)
        err = compile_error(alone.source, path)
        if err is not None:
            bad_codes.add(code)
            run.notes.append(f"internal error: {code} produced code that does not compile ({err}); its fixes were dropped")
    kept = [None if f is None or f.code in bad_codes else f for f in findings]
    retry = _apply_once(module, kept, build, separate_siblings)
    retry.notes = run.notes + retry.notes
    retry.dropped = {i for i, f in enumerate(findings) if f is not None and f.code in bad_codes}
    if compile_error(retry.source, path) is not None:
        retry = FixRun(source, notes=run.notes + ["internal error: combined fixes do not compile; file left unchanged"])
        retry.dropped = {i for i, f in enumerate(findings) if f is not None}
    return retry


def _apply_once(module: cst.Module, findings: Sequence[Finding | None], build: BuildFix, separate_siblings: bool = False) -> FixRun:
    ctx = FixContext(module)
    accepted: list[tuple[int, list[Edit], list[Span]]] = []
    notes: list[str] = []
    candidates = []
    for index, finding in enumerate(findings):
        if finding is None:
            continue
        ctx.imports = _ImportRequest()
        try:
            edits = build(finding, ctx)
        except FixError as exc:
            notes.append(f"{finding.code} at line {finding.line}: fix skipped ({exc})")
            continue
        if not edits:
            continue
        spans = [ctx.span_of(e.node) for e in edits]
        outer = max(spans, key=lambda s: (s.end_line - s.line, s.end_col - s.col))
        candidates.append((index, edits, spans, outer, ctx.imports))
    # Outer edits first, so an edit nested in another one loses this run.
    candidates.sort(key=lambda c: (c[3].line, c[3].col, -c[3].end_line, -c[3].end_col))
    imports = _ImportRequest()
    taken = _Taken()
    asked: dict[int, _ImportRequest] = {}
    parents: dict[int, tuple[int, bool]] = {}  # id(parent) -> (finding, whether it adds/drops a child)
    waiting = set()
    shared: dict[tuple, list] = {}  # the spans of each accepted finding's edits -> its edits
    for index, edits, spans, _, wanted in candidates:
        same = shared.get(tuple(spans))
        if same is not None and all(_same_edit(a, b) for a, b in zip(same, edits)):
            accepted.append((index, edits, spans))  # one edit fixes both findings (a whole `else:` goes)
            imports.add += wanted.add
            imports.remove_if_unused += wanted.remove_if_unused
            asked[index] = wanted
            continue
        if any(taken.overlaps(s) for s in spans):
            waiting.add(index)
            continue
        if separate_siblings:
            mine = [(id(ctx.parent(e.node)), not isinstance(e.replacement, cst.CSTNode)) for e in edits]
            if any(p in parents and parents[p][0] != index and (resized or parents[p][1]) for p, resized in mine):
                waiting.add(index)
                continue
            for p, resized in mine:
                parents[p] = (index, resized or parents.get(p, (index, False))[1])
        taken.add(spans)
        accepted.append((index, edits, spans))
        shared[tuple(spans)] = edits
        imports.add += wanted.add
        imports.remove_if_unused += wanted.remove_if_unused
        asked[index] = wanted
    replacements = {e.node: e.replacement for _, edits, _ in accepted for e in edits}
    edited = ctx.module.visit(_ApplyEdits(replacements)) if replacements else ctx.module
    new_module = edited
    if replacements and (imports.add or imports.remove_if_unused):
        new_module = _fix_imports(new_module, imports)
    run = FixRun(new_module.bytes, {i for i, _, _ in accepted}, notes, {i: e for i, e, _ in accepted}, asked, ctx, edited)
    run.waiting = waiting
    return run


def _same_edit(a: Edit, b: Edit) -> bool:
    """Two findings' edits of one node that write the same thing."""
    if a.node is not b.node:
        return False
    if isinstance(a.replacement, cst.CSTNode) and isinstance(b.replacement, cst.CSTNode):
        return a.replacement.deep_equals(b.replacement)
    return a.replacement is b.replacement


class _Taken:
    """The spans of the edits accepted so far, for overlap tests in O(log n) each.

    Accepted spans never overlap one another, so sorted by (start, end) their ends never
    decrease: of the spans starting before a new span ends, only the last can reach into it,
    and an equal empty span starts where the new one does. (If one finding's own edits
    overlap each other, that order is lost and every span is compared.)
    """

    def __init__(self):
        self.keys: list[tuple[int, int, int, int]] = []
        self.spans: list[Span] = []
        self.compare_all = False

    def overlaps(self, span: Span) -> bool:
        if self.compare_all:
            near = self.spans
        else:
            at = bisect.bisect_left(self.keys, (span.line, span.col))
            end = bisect.bisect_left(self.keys, (span.end_line, span.end_col))
            near = self.spans[at : at + 1] + self.spans[max(end - 1, 0) : end]
        return any(_overlaps(span, t) or span == t for t in near)

    def add(self, spans: list[Span]) -> None:
        if any(_overlaps(s, t) or s == t for i, s in enumerate(spans) for t in spans[i + 1 :]):
            self.compare_all = True
        for span in spans:
            key = (span.line, span.col, span.end_line, span.end_col)
            at = bisect.bisect_left(self.keys, key)
            self.keys.insert(at, key)
            self.spans.insert(at, span)


class _RemoveImportsKeepComments(RemoveImportsVisitor):
    """LibCST's RemoveImportsVisitor drops a removed import's leading comments, blank lines and
    trailing comment with it; hand them to the next statement (or the block's footer) so no
    comment is lost."""

    def __init__(self, context: CodemodContext):
        super().__init__(context)
        self._removed: dict[cst.SimpleStatementLine, Sequence[cst.EmptyLine]] = {}

    def leave_SimpleStatementLine(self, original_node, updated_node):
        if not updated_node.body:
            kept = list(original_node.leading_lines)
            comment = original_node.trailing_whitespace.comment
            if comment is not None:  # `import x  # why`: the comment stays, on a line of its own
                kept.append(cst.EmptyLine(comment=comment))
            self._removed[original_node] = kept
        return updated_node

    def _rehome(self, original_node, updated_node):
        if not any(stmt in self._removed for stmt in original_node.body):
            return updated_node
        kept, pending, survivors = [], [], iter(updated_node.body)
        for stmt in original_node.body:
            if stmt in self._removed:
                pending += self._removed.pop(stmt)
                continue
            new = next(survivors)
            if pending:
                new = new.with_changes(leading_lines=[*pending, *new.leading_lines])
                pending = []
            kept.append(new)
        return updated_node.with_changes(body=kept, footer=[*pending, *updated_node.footer])

    def leave_IndentedBlock(self, original_node, updated_node):
        return self._rehome(original_node, updated_node)

    def leave_Module(self, original_node, updated_node):
        first_removed = bool(original_node.body) and original_node.body[0] in self._removed
        module = self._rehome(original_node, super().leave_Module(original_node, updated_node))
        if first_removed and module.body and not module.header:
            # The file now starts where the removed import was: no blank lines before its code.
            lines = list(module.body[0].leading_lines)
            while lines and lines[0].comment is None:
                lines.pop(0)
            module = module.with_changes(body=[module.body[0].with_changes(leading_lines=lines), *module.body[1:]])
        return module


def _fix_imports(module: cst.Module, req: _ImportRequest) -> cst.Module:
    context = CodemodContext()
    # Each fix asks on its own: a thousand fixes ask a thousand times for the same import.
    for mod, name in dict.fromkeys(req.remove_if_unused):
        RemoveImportsVisitor.remove_unused_import(context, mod, name)
    if req.remove_if_unused:
        module = _RemoveImportsKeepComments(context).transform_module(module)
    beside = _import_torch_beside(module) if ("torch", None) in req.add else None
    if beside is not None:
        module = beside
    added = [a for a in dict.fromkeys(req.add) if not (a == ("torch", None) and beside is not None)]
    for mod, name in added:
        AddImportsVisitor.add_needed_import(context, mod, name)
    if added:
        module = AddImportsVisitor(context).transform_module(module)
    return module


def _import_torch_beside(module: cst.Module) -> cst.Module | None:
    """``module`` with ``import torch`` right above its first top-level ``import torch.nn as nn``
    or ``from torch... import ...`` (where a person adds it, not below the project's own
    imports), that statement's leading blank lines and comments moving up with it; ``module``
    itself when ``import torch.jit`` already binds the name; None when there is no such
    statement, or when torch is already imported as a module."""
    first = None
    for i, stmt in enumerate(module.body):
        if not isinstance(stmt, cst.SimpleStatementLine):
            continue
        for small in stmt.body:
            if isinstance(small, cst.Import):
                for alias in small.names:
                    name = get_full_name_for_node(alias.name) or ""
                    if name == "torch" and alias.asname is None:
                        return None  # already there
                    if name.startswith("torch.") and alias.asname is None:
                        return module  # `import torch.jit` binds `torch` already
                    if name.startswith("torch.") and first is None:
                        first = i
            elif isinstance(small, cst.ImportFrom) and not small.relative and first is None:
                name = get_full_name_for_node(small.module) if small.module is not None else ""
                if name == "torch" or (name or "").startswith("torch."):
                    first = i
    if first is None:
        return None
    anchor = module.body[first]
    new = cst.SimpleStatementLine(body=[cst.Import(names=[cst.ImportAlias(name=cst.Name("torch"))])], leading_lines=anchor.leading_lines)
    body = [*module.body[:first], new, anchor.with_changes(leading_lines=()), *module.body[first + 1 :]]
    return module.with_changes(body=body)


def compile_error(source: bytes, path: str) -> str | None:
    """Why Python would not compile ``source`` (None when it does)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the user's own SyntaxWarnings are not gradfix's to print
            compile(source, path, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None
