"""``gradfix server``: a Language Server over stdio (pygls; the ``gradfix[lsp]`` extra).

What an editor gets:

- diagnostics on open, change (debounced) and save, computed from the unsaved buffer text with
  the settings of the nearest ``pyproject.toml``, by the same engine call as ``gradfix check``;
  a buffer that does not parse gets one diagnostic saying so (the old findings are cleared);
- notebook cells, where the client syncs notebooks (``notebookDocument/*``): the cells are
  checked together, as ``gradfix check nb.ipynb`` does, and each cell gets its own findings;
- a quick fix per fixable finding (safe ones preferred; unsafe ones say so in their title),
  and a ``source.fixAll.gradfix`` action that applies every safe fix, as ``--apply`` would;
- hover text on a finding: the rule's ``gradfix explain`` page.
"""

from __future__ import annotations

import asyncio
import io
import json
import tokenize
from dataclasses import dataclass, field, replace
from pathlib import Path

from lsprotocol import types
from pygls.lsp.server import LanguageServer
from pygls.uris import to_fs_path
from pygls.workspace.position_codec import PositionCodec, ServerTextPosition, ServerTextRange

from gradfix import __version__
from gradfix.config import CliOverrides, ConfigError, config_for_dir, config_for_file, load_pyproject, settings_for
from gradfix.engine import Job, SourceError, check, fix, fix_findings, process_source
from gradfix.model import Finding, FixSafety, Settings

#: Seconds a burst of edits is left to settle before the buffer is checked again.
DEBOUNCE_S = 0.2
SOURCE = "gradfix"
FIX_ALL_KIND = f"{types.CodeActionKind.SourceFixAll.value}.gradfix"


@dataclass
class Analysis:
    """One check of one buffer (a file, or a notebook cell), at one version."""

    uri: str
    version: int | None
    source: str
    settings: Settings | None
    path: str
    findings: list[Finding] = field(default_factory=list)
    error: SourceError | None = None
    notebook_uri: str | None = None  # set for a cell: fixes are the notebook's
    fixes: dict = field(default_factory=dict)  # cache: key -> new source, per version

    def lines(self) -> list[str]:
        return self.source.splitlines(keepends=True)


class GradfixServer(LanguageServer):
    def __init__(self) -> None:
        cells = [types.NotebookCellLanguage(language="python")]
        super().__init__(
            "gradfix",
            __version__,
            text_document_sync_kind=types.TextDocumentSyncKind.Incremental,
            notebook_document_sync=types.NotebookDocumentSyncOptions(
                notebook_selector=[types.NotebookDocumentFilterWithCells(cells=cells)], save=True
            ),
        )
        self.analyses: dict[str, Analysis] = {}
        self._pending: dict[str, asyncio.Task] = {}
        self._config_errors: set[str] = set()
        self._notebook_fixes: dict[tuple, dict[str, str]] = {}

    # -- settings -----------------------------------------------------------------------------
    def settings_for(self, path: str | None) -> Settings | None:
        """The settings ``gradfix check`` would use for ``path``; None (and a message) when the
        nearest pyproject.toml is invalid."""
        try:
            if path:
                file = Path(path)
                return settings_for(file, config_for_file(file), CliOverrides())
            return settings_for(Path.cwd() / "untitled.py", config_for_dir(Path.cwd().resolve()), CliOverrides())
        except ConfigError as exc:
            if str(exc) not in self._config_errors:  # once, not on every keystroke
                self._config_errors.add(str(exc))
                self.window_show_message(types.ShowMessageParams(types.MessageType.Error, f"gradfix: {exc}"))
            return None

    def forget_config(self) -> None:
        """pyproject.toml may have changed since the last open/save: read it again."""
        config_for_dir.cache_clear()
        load_pyproject.cache_clear()
        self._notebook_fixes.clear()

    # -- checking ------------------------------------------------------------------------------
    def check_document(self, uri: str) -> None:
        """Check a text document (or, for a notebook cell, its whole notebook) and publish."""
        notebook = self.workspace.get_notebook_document(cell_uri=uri)
        if notebook is not None:
            self.check_notebook(notebook.uri)
            return
        doc = self.workspace.get_text_document(uri)
        path = to_fs_path(uri)
        analysis = Analysis(uri, doc.version, doc.source, self.settings_for(path), path or "untitled.py")
        if analysis.settings is not None:
            try:
                analysis.findings = check(analysis.source, analysis.path, analysis.settings)
            except SourceError as exc:
                analysis.error = exc
            except Exception as exc:  # a bug in gradfix: this buffer says so, the server goes on
                analysis.error = SourceError(f"internal error: {type(exc).__name__}: {exc}")
        self.analyses[uri] = analysis
        self.publish(analysis)

    def check_notebook(self, notebook_uri: str) -> None:
        notebook = self.workspace.get_notebook_document(notebook_uri=notebook_uri)
        if notebook is None:
            return
        path = to_fs_path(notebook_uri) or "untitled.ipynb"
        settings = self.settings_for(path)
        cells = [(cell, self.workspace.get_text_document(cell.document)) for cell in notebook.cells]
        per_cell: dict[int, list[Finding]] = {}
        if settings is not None:
            result = process_source(_notebook_json(cells), Job(_ipynb(path), settings, path), want_fixes=False)
            for outcome in result.findings:
                if outcome.finding.cell is not None:
                    per_cell.setdefault(outcome.finding.cell, []).append(outcome.finding)
        for number, (cell, doc) in enumerate(cells, start=1):
            if cell.kind != types.NotebookCellKind.Code:
                continue
            analysis = Analysis(doc.uri, doc.version, doc.source, settings, path, per_cell.get(number, []))
            analysis.notebook_uri = notebook_uri
            self.analyses[doc.uri] = analysis
            self.publish(analysis)

    def publish(self, analysis: Analysis) -> None:
        codec = self.workspace.position_codec
        lines = analysis.lines()
        diagnostics = [to_diagnostic(f, lines, codec) for f in analysis.findings]
        if analysis.error is not None:
            line = max(analysis.error.line - 1, 0)
            start = ServerTextPosition(line, max(analysis.error.col - 1, 0))
            where = codec.range_to_client_units(lines, ServerTextRange(start, start))
            diagnostics.append(
                types.Diagnostic(
                    range=where,
                    message=f"gradfix cannot check this file: {analysis.error.message}",
                    severity=types.DiagnosticSeverity.Information,
                    source=SOURCE,
                )
            )
        self.text_document_publish_diagnostics(
            types.PublishDiagnosticsParams(uri=analysis.uri, diagnostics=diagnostics, version=analysis.version)
        )

    def schedule(self, uri: str) -> None:
        """Check ``uri`` once edits pause: a burst of changes costs one check."""
        pending = self._pending.pop(uri, None)
        if pending is not None:
            pending.cancel()

        async def later() -> None:
            await asyncio.sleep(DEBOUNCE_S)
            self._pending.pop(uri, None)
            self.check_document(uri)

        self._pending[uri] = asyncio.ensure_future(later())

    def current(self, uri: str) -> Analysis | None:
        """The analysis of ``uri`` at the buffer's current version (checked now if stale)."""
        analysis = self.analyses.get(uri)
        doc = self.workspace.text_documents.get(uri)
        if doc is not None and (analysis is None or analysis.version != doc.version or analysis.source != doc.source):
            self.check_document(uri)
            analysis = self.analyses.get(uri)
        return analysis

    # -- fixes ---------------------------------------------------------------------------------
    def fixed_source(self, analysis: Analysis, finding: Finding) -> str | None:
        """The buffer with this one finding's fix (unsafe ones too: the user picks them)."""
        key = (finding.code, finding.span)
        if key not in analysis.fixes:
            settings = replace(analysis.settings, unsafe_fixes=True)
            source, encoding = _encoded(analysis.source)
            run = fix_findings(source, [finding], settings, analysis.path)
            analysis.fixes[key] = None if run is None else run.source.decode(encoding)
        return analysis.fixes[key]

    def fix_all_safe(self, analysis: Analysis) -> str:
        if "all" not in analysis.fixes:
            source, encoding = _encoded(analysis.source)
            new = fix(source, analysis.path, replace(analysis.settings, unsafe_fixes=False))
            analysis.fixes["all"] = new.decode(encoding)
        return analysis.fixes["all"]

    def notebook_fixed_cells(self, notebook_uri: str, target: Finding | None = None) -> dict[str, str]:
        """New text of each cell that the notebook's safe fixes change (``target`` None), or
        that the fix of the one finding ``target`` changes (unsafe too), by cell URI."""
        notebook = self.workspace.get_notebook_document(notebook_uri=notebook_uri)
        if notebook is None:
            return {}
        key = (notebook_uri, notebook.version, None if target is None else (target.code, target.cell, target.span))
        if key not in self._notebook_fixes:  # code actions are asked on every cursor move
            if len(self._notebook_fixes) > 64:
                self._notebook_fixes.clear()
            self._notebook_fixes[key] = self._notebook_fixed_cells(notebook, target)
        return self._notebook_fixes[key]

    def _notebook_fixed_cells(self, notebook: types.NotebookDocument, target: Finding | None) -> dict[str, str]:
        from gradfix.notebook import process_notebook, read_cells

        path = to_fs_path(notebook.uri) or "untitled.ipynb"
        settings = self.settings_for(path)
        if settings is None:
            return {}
        cells = [(cell, self.workspace.get_text_document(cell.document)) for cell in notebook.cells]
        raw = _notebook_json(cells)
        if target is None:
            result = process_source(raw, Job(_ipynb(path), replace(settings, unsafe_fixes=False), path), want_fixes=True)
        else:
            settings = replace(settings, unsafe_fixes=True)
            found = process_source(raw, Job(_ipynb(path), settings, path), want_fixes=False).findings
            chosen = next((i for i, o in enumerate(found) if o.finding == target), None)
            if chosen is None:
                return {}

            def fix_chosen(text: str, findings: list[Finding]):  # the same findings, in the same order
                only = [f if i == chosen else None for i, f in enumerate(findings)]
                return fix_findings(text.encode("utf-8"), only, settings, path)

            result = process_notebook(raw, path, lambda text: check(text, path, settings), fix_chosen, want_fixes=True)
        if not result.changed:
            return {}
        new_cells = read_cells(result.new_source.decode("utf-8"))
        return {
            doc.uri: new.source
            for (cell, doc), new in zip(cells, new_cells)
            if cell.kind == types.NotebookCellKind.Code and new.source != doc.source
        }


def _encoded(text: str) -> tuple[bytes, str]:
    """The buffer as the bytes of its file: in the encoding its coding line declares (PEP 263),
    which is how the fixer reads a file."""
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(text.encode("utf-8", "surrogatepass")).readline)
        return text.encode(encoding), encoding
    except (SyntaxError, LookupError, UnicodeError):
        return text.encode("utf-8", "surrogatepass"), "utf-8"


def _ipynb(path: str) -> str:
    return path if path.endswith(".ipynb") else path + ".ipynb"


def _notebook_json(cells) -> bytes:
    """The notebook as nbformat 4 JSON, from the client's cell texts (unsaved edits included)."""
    document = {
        "cells": [
            {
                "cell_type": "code" if cell.kind == types.NotebookCellKind.Code else "markdown",
                "metadata": {},
                "source": doc.source,
                **({"outputs": [], "execution_count": None} if cell.kind == types.NotebookCellKind.Code else {}),
            }
            for cell, doc in cells
        ],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    return json.dumps(document).encode("utf-8")


def to_diagnostic(finding: Finding, lines: list[str], codec: PositionCodec) -> types.Diagnostic:
    span = finding.span
    where = ServerTextRange(ServerTextPosition(span.line - 1, span.col), ServerTextPosition(span.end_line - 1, span.end_col))
    fix = {FixSafety.SAFE: "safe fix", FixSafety.UNSAFE: "unsafe fix"}.get(finding.fix, "no fix")
    return types.Diagnostic(
        range=codec.range_to_client_units(lines, where),
        message=finding.message,
        severity=types.DiagnosticSeverity.Warning,
        code=finding.code,
        source=SOURCE,
        data={"name": finding.name, "fix": fix, "fix_title": finding.fix_title, "no_fix": finding.no_fix},
    )


def text_edit(old: str, new: str, codec: PositionCodec) -> types.TextEdit:
    """One edit that turns ``old`` into ``new``: the span between their common prefix and suffix."""
    start = 0
    limit = min(len(old), len(new))
    while start < limit and old[start] == new[start]:
        start += 1
    end_old, end_new = len(old), len(new)
    while end_old > start and end_new > start and old[end_old - 1] == new[end_new - 1]:
        end_old, end_new = end_old - 1, end_new - 1
    lines = old.splitlines(keepends=True)

    def position(offset: int) -> ServerTextPosition:
        before = old[:offset]
        line = before.count("\n")
        return ServerTextPosition(line, offset - (before.rfind("\n") + 1))

    where = ServerTextRange(position(start), position(end_old))
    return types.TextEdit(range=codec.range_to_client_units(lines, where), new_text=new[start:end_new])


def _overlaps(finding: Finding, where: types.Range, lines: list[str], codec: PositionCodec) -> bool:
    span = finding.span
    first, last = ServerTextPosition(span.line - 1, span.col), ServerTextPosition(span.end_line - 1, span.end_col)
    asked = codec.range_from_client_units(lines, where)
    return not (last < asked.start or asked.end < first)


def _wanted(only: list[str] | None, kind: str) -> bool:
    return not only or any(kind == k or kind.startswith(f"{k}.") for k in only)


server = GradfixServer()


@server.feature(types.TEXT_DOCUMENT_DID_OPEN)
def did_open(ls: GradfixServer, params: types.DidOpenTextDocumentParams) -> None:
    ls.forget_config()
    ls.check_document(params.text_document.uri)


@server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
def did_change(ls: GradfixServer, params: types.DidChangeTextDocumentParams) -> None:
    ls.schedule(params.text_document.uri)


@server.feature(types.TEXT_DOCUMENT_DID_SAVE)
def did_save(ls: GradfixServer, params: types.DidSaveTextDocumentParams) -> None:
    ls.forget_config()
    ls.check_document(params.text_document.uri)


@server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
def did_close(ls: GradfixServer, params: types.DidCloseTextDocumentParams) -> None:
    uri = params.text_document.uri
    ls.analyses.pop(uri, None)
    pending = ls._pending.pop(uri, None)
    if pending is not None:
        pending.cancel()
    ls.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, diagnostics=[]))


@server.feature(types.NOTEBOOK_DOCUMENT_DID_OPEN)
def notebook_did_open(ls: GradfixServer, params: types.DidOpenNotebookDocumentParams) -> None:
    ls.forget_config()
    ls.check_notebook(params.notebook_document.uri)


@server.feature(types.NOTEBOOK_DOCUMENT_DID_CHANGE)
def notebook_did_change(ls: GradfixServer, params: types.DidChangeNotebookDocumentParams) -> None:
    ls.check_notebook(params.notebook_document.uri)


@server.feature(types.NOTEBOOK_DOCUMENT_DID_SAVE)
def notebook_did_save(ls: GradfixServer, params: types.DidSaveNotebookDocumentParams) -> None:
    ls.forget_config()
    ls.check_notebook(params.notebook_document.uri)


@server.feature(
    types.TEXT_DOCUMENT_CODE_ACTION,
    types.CodeActionOptions(code_action_kinds=[types.CodeActionKind.QuickFix, FIX_ALL_KIND]),
)
def code_action(ls: GradfixServer, params: types.CodeActionParams) -> list[types.CodeAction]:
    uri = params.text_document.uri
    analysis = ls.current(uri)
    if analysis is None or analysis.settings is None or analysis.error is not None:
        return []
    codec = ls.workspace.position_codec
    lines = analysis.lines()
    only = params.context.only
    actions: list[types.CodeAction] = []
    fixable = [f for f in analysis.findings if f.fix is not None]
    notebook_uri = analysis.notebook_uri  # a cell: a fix is an edit of the notebook's cells

    def edit_of(new_cells: dict[str, str]) -> types.WorkspaceEdit:
        return types.WorkspaceEdit(
            changes={
                cell_uri: [text_edit(ls.workspace.get_text_document(cell_uri).source, text, codec)]
                for cell_uri, text in new_cells.items()
            }
        )

    if _wanted(only, types.CodeActionKind.QuickFix):
        for finding in fixable:
            if not _overlaps(finding, params.range, lines, codec):
                continue
            if notebook_uri is not None:
                changed = ls.notebook_fixed_cells(notebook_uri, finding)
            else:
                new = ls.fixed_source(analysis, finding)
                changed = {uri: new} if new is not None and new != analysis.source else {}
            if not changed:
                continue
            title = f"{finding.code}: {finding.fix_title or 'apply the fix'}"
            if finding.fix is FixSafety.UNSAFE:
                title += " (unsafe: changes behaviour on purpose; see gradfix explain)"
            actions.append(
                types.CodeAction(
                    title,
                    kind=types.CodeActionKind.QuickFix,
                    diagnostics=[to_diagnostic(finding, lines, codec)],
                    is_preferred=finding.fix is FixSafety.SAFE,
                    edit=edit_of(changed),
                )
            )
    if any(f.fix is FixSafety.SAFE for f in fixable) and _wanted(only, FIX_ALL_KIND):
        if notebook_uri is not None:
            changed = ls.notebook_fixed_cells(notebook_uri)
        else:
            new = ls.fix_all_safe(analysis)
            changed = {uri: new} if new != analysis.source else {}
        if changed:
            actions.append(types.CodeAction("gradfix: fix all safe", kind=FIX_ALL_KIND, edit=edit_of(changed)))
    return actions


@server.feature(types.TEXT_DOCUMENT_HOVER)
def hover(ls: GradfixServer, params: types.HoverParams) -> types.Hover | None:
    from gradfix.explain import explain_text, find_rule

    analysis = ls.current(params.text_document.uri)
    if analysis is None:
        return None
    codec = ls.workspace.position_codec
    lines = analysis.lines()
    where = types.Range(params.position, params.position)
    for finding in analysis.findings:
        if _overlaps(finding, where, lines, codec):
            rule = find_rule(finding.code)
            if rule is not None:
                content = types.MarkupContent(kind=types.MarkupKind.Markdown, value=explain_text(rule))
                return types.Hover(contents=content, range=to_diagnostic(finding, lines, codec).range)
    return None


def serve() -> None:
    server.start_io()
