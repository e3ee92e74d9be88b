"""Jupyter notebooks (``.ipynb``, nbformat 4): check and fix code cells.

The code cells that parse are joined, in cell order, into one virtual module with a marker
comment before each cell, so imports made in an earlier cell resolve in later ones and every
rule works unchanged. Findings are mapped back to (cell, line, column). Cells holding IPython
magics (``%timeit``, ``!pip``, ``%%time``) or code that does not parse are skipped with a note.

A fix rewrites only the ``source`` value of the changed cells, in place in the original JSON
text: outputs, execution counts, metadata, key order, indentation and the trailing newline stay
byte for byte. A notebook with no fixes is never rewritten.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, replace

from gradfix.diff import unified_diff
from gradfix.model import FileResult, FixOutcome, Span

MARKER = "# gradfix-notebook-cell {index}\n"
# The imports of a cell that is skipped (magics) still count for later cells: they go into the
# virtual module as a "context" section, which is never written back.
CONTEXT_MARKER = "# gradfix-notebook-context {index}\n"
_MARKER_RE = re.compile(r"^# gradfix-notebook-(cell|context) (\d+)\n", re.M)


class NotebookError(Exception):
    pass


@dataclass
class Cell:
    index: int  # 0-based position among all cells
    cell_type: str
    source: str
    span: tuple[int, int]  # where the "source" value lies in the raw JSON text
    as_list: bool


# -- a small JSON scanner that remembers where each value lies -----------------------------
_WS = re.compile(r"[ \t\n\r]*")
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)
_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?")


class _Scanner:
    def __init__(self, text: str):
        self.text = text

    def skip(self, pos: int) -> int:
        return _WS.match(self.text, pos).end()

    def value(self, pos: int):
        """Parse the value at ``pos``; returns (value, end, spans) — spans of an object's members."""
        pos = self.skip(pos)
        ch = self.text[pos : pos + 1]
        if ch == "{":
            result, members = {}, {}
            pos = self.skip(pos + 1)
            if self.text[pos] == "}":
                return (result, members), pos + 1
            while True:
                key_match = _STRING.match(self.text, self.skip(pos))
                if key_match is None:
                    raise NotebookError(f"invalid JSON at offset {pos}")
                key = json.loads(key_match.group())
                pos = self.skip(key_match.end())
                if self.text[pos] != ":":
                    raise NotebookError(f"invalid JSON at offset {pos}")
                start = self.skip(pos + 1)
                (value, inner), pos = self.value(start)
                result[key] = value
                members[key] = (start, pos, inner)
                pos = self.skip(pos)
                if self.text[pos] == ",":
                    pos += 1
                    continue
                if self.text[pos] == "}":
                    return (result, members), pos + 1
                raise NotebookError(f"invalid JSON at offset {pos}")
        if ch == "[":
            items, inner = [], []
            pos = self.skip(pos + 1)
            if self.text[pos] == "]":
                return (items, inner), pos + 1
            while True:
                start = self.skip(pos)
                (value, sub), pos = self.value(start)
                items.append(value)
                inner.append((start, pos, sub))
                pos = self.skip(pos)
                if self.text[pos] == ",":
                    pos += 1
                    continue
                if self.text[pos] == "]":
                    return (items, inner), pos + 1
                raise NotebookError(f"invalid JSON at offset {pos}")
        if ch == '"':
            m = _STRING.match(self.text, pos)
            if m is None:
                raise NotebookError(f"unterminated string at offset {pos}")
            return (json.loads(m.group()), None), m.end()
        for word, value in (("true", True), ("false", False), ("null", None)):
            if self.text.startswith(word, pos):
                return (value, None), pos + len(word)
        m = _NUMBER.match(self.text, pos)
        if m is None or not m.group():
            raise NotebookError(f"invalid JSON at offset {pos}")
        return (json.loads(m.group()), None), m.end()


def read_cells(text: str) -> list[Cell]:
    try:
        (document, members), end = _Scanner(text).value(0)
    except (IndexError, ValueError, NotebookError) as exc:
        raise NotebookError(f"not a notebook: invalid JSON ({exc})") from None
    if not isinstance(document, dict) or not isinstance(document.get("cells"), list):
        raise NotebookError("not a notebook: no 'cells' list (nbformat 4 expected)")
    cells = []
    for index, (cell, (_, _, cell_members)) in enumerate(zip(document["cells"], members["cells"][2])):
        source = cell.get("source", "")
        start, stop, _ = cell_members.get("source", (0, 0, None))
        as_list = isinstance(source, list)
        cells.append(Cell(index, cell.get("cell_type", ""), "".join(source) if as_list else source, (start, stop), as_list))
    return cells


def _skip_reason(source: str) -> str | None:
    try:
        ast.parse(source)
    except SyntaxError as exc:
        magic = any(line.lstrip().startswith(("%", "!")) or line.rstrip().endswith("?") for line in source.splitlines())
        return "IPython magic or shell command" if magic else f"does not parse ({exc.msg}, line {exc.lineno})"
    return None


@dataclass
class VirtualModule:
    text: str
    starts: dict[int, int]  # cell index -> first line of the cell's code in ``text`` (1-based)
    lengths: dict[int, int]
    notes: list[str]

    def locate(self, line: int) -> tuple[int, int] | None:
        for index, start in self.starts.items():
            if start <= line < start + self.lengths[index]:
                return index, line - start + 1
        return None


def virtual_module(cells: list[Cell]) -> VirtualModule:
    parts, starts, lengths, notes = [], {}, {}, []
    line = 1
    for cell in cells:
        if cell.cell_type != "code" or not cell.source.strip():
            continue
        reason = _skip_reason(cell.source)
        if reason is not None:
            notes.append(f"cell {cell.index + 1} skipped: {reason}")
            imports = _imports_around_magics(cell.source)
            if imports:
                parts.append(CONTEXT_MARKER.format(index=cell.index) + imports)
                line += 1 + imports.count("\n")
            continue
        code = cell.source if cell.source.endswith("\n") else cell.source + "\n"
        parts.append(MARKER.format(index=cell.index) + code)
        starts[cell.index] = line + 1
        lengths[cell.index] = code.count("\n")
        line += 1 + lengths[cell.index]
    return VirtualModule("".join(parts), starts, lengths, notes)


def _imports_around_magics(source: str) -> str:
    """The top-level imports of a cell that parses once its magic lines are blanked."""
    masked = "\n".join(
        "" if line.lstrip().startswith(("%", "!")) or line.rstrip().endswith("?") else line
        for line in source.splitlines()
    )
    try:
        tree = ast.parse(masked)
    except SyntaxError:
        return ""
    imports = [ast.get_source_segment(masked, n) for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    return "".join(f"{text}\n" for text in imports if text)


def split_virtual(text: str) -> tuple[str, dict[int, str]]:
    """Out of a (fixed) virtual module: the text before the first cell (an import a fix added)
    and the cell sources by cell index. Context sections are dropped."""
    pieces = _MARKER_RE.split(text)
    cells = {int(pieces[i + 1]): pieces[i + 2] for i in range(1, len(pieces) - 2, 3) if pieces[i] == "cell"}
    return pieces[0], cells


def _encode_source(cell: Cell, new: str, raw: str) -> str:
    """The new ``source`` JSON value, in the style the original used (list layout, escapes)."""
    old_value = raw[cell.span[0] : cell.span[1]]
    # Keep the notebook's escaping: \uXXXX only if it already escaped non-ASCII text.
    ascii_only = raw.isascii() and "\\u" in raw
    if not cell.as_list:
        return json.dumps(new, ensure_ascii=ascii_only)
    lines = new.splitlines(keepends=True)
    items = [json.dumps(line, ensure_ascii=ascii_only) for line in lines]
    if not items:
        return "[]"
    layout = re.match(r"\[(\s*)", old_value)
    opening = layout.group(1) if layout and "\n" in layout.group(1) else ""
    if not opening:
        return "[" + ", ".join(items) + "]"
    closing = re.search(r"(\s*)\]$", old_value).group(1)
    return "[" + opening + ("," + opening).join(items) + closing + "]"


def process_notebook(raw: bytes, path: str, check, fix_virtual, want_fixes: bool) -> FileResult:
    """Check (and fix) one notebook.

    ``check(source) -> findings`` and ``fix_virtual(source, findings) -> FixRun | None`` are the
    engine's, passed in so this module stays a pure adapter.
    """
    result = FileResult(path, old_source=raw)
    try:
        text = raw.decode("utf-8")
        cells = read_cells(text)
    except (UnicodeDecodeError, NotebookError) as exc:
        result.error, result.error_kind = f"1:1: {exc}", "syntax"
        return result
    module = virtual_module(cells)
    result.notes.extend(module.notes)
    if not module.text:
        return result
    findings = check(module.text)
    mapped = []  # aligned with ``findings``: the fixer reports applied fixes by index
    for finding in findings:
        start = module.locate(finding.span.line)
        end = module.locate(finding.span.end_line)
        if start is None:  # cannot happen for code inside cells; keep the virtual position
            mapped.append(finding)
            continue
        cell, line = start
        end_line = end[1] if end and end[0] == cell else line
        span = Span(line, finding.span.col, end_line, finding.span.end_col)
        mapped.append(replace(finding, span=span, cell=cell + 1, anchors=()))
    result.findings = [FixOutcome(f) for f in mapped]
    if not want_fixes or not findings:
        return result
    run = fix_virtual(module.text, findings)
    if run is None:
        return result
    result.notes.extend(run.notes)
    head, new_sources = split_virtual(run.source.decode("utf-8"))
    if set(new_sources) != set(module.starts):
        result.notes.append("internal error: a fix moved code across notebook cells; notebook left unchanged")
        return result
    if head.strip():  # an import a fix needs: it goes to the top of the first code cell
        first = min(new_sources, key=lambda i: module.starts[i])
        new_sources[first] = head.lstrip("\n") + new_sources[first]
    new_text = text
    by_index = {c.index: c for c in cells}
    for index in sorted(new_sources, key=lambda i: -by_index[i].span[0]):  # back to front: spans stay valid
        cell = by_index[index]
        new = new_sources[index]
        if not cell.source.endswith("\n"):
            new = new[:-1] if new.endswith("\n") else new
        if new == cell.source:
            continue
        start, stop = cell.span
        new_text = new_text[:start] + _encode_source(cell, new, text) + new_text[stop:]
    if new_text != text:
        result.new_source = new_text.encode("utf-8")
        for index in run.applied:
            result.findings[index].applied = True
    return result


def cell_diffs(old: bytes, new: bytes, path: str) -> bytes:
    """A readable unified diff per changed cell (``--- a/nb.ipynb:cell 3``), not raw JSON."""
    old_cells = {c.index: c.source for c in read_cells(old.decode("utf-8"))}
    new_cells = {c.index: c.source for c in read_cells(new.decode("utf-8"))}
    out = []
    for index in sorted(old_cells):
        if old_cells[index] != new_cells.get(index, old_cells[index]):
            out.append(unified_diff(old_cells[index].encode(), new_cells[index].encode(), f"{path}:cell {index + 1}"))
    return b"".join(out)
