"""Jupyter notebooks (``.ipynb``, nbformat 4): check and fix code cells.

The code cells that parse are joined, in cell order, into one virtual module with a marker
comment before each cell, so imports made in an earlier cell resolve in later ones and every
rule works unchanged. Findings are mapped back to (cell, line, column).

A marker carries a random nonce chosen so that it occurs in no cell of the notebook: a line a
user wrote (a string holding ``# gradfix-notebook-cell 0``) can never be taken for a cell
boundary. After a fix, every marker must still be there exactly once, in order, or the notebook
is left unchanged.

IPython syntax is masked, not skipped (as Ruff and nbqa do): in a cell that does not parse, each
line magic, shell escape or help line (``%timeit``, ``!pip``, ``x = !ls``, ``obj?``) is replaced
by a placeholder statement with the same indentation, and a cell magic that runs Python
(``%%time``) has its first line masked. The placeholders go back byte for byte on write; a fix
that would move, change or drop one leaves the notebook unchanged. A cell magic that is not
Python (``%%bash``) or a cell that still does not parse is skipped with a note.

A fix rewrites only the ``source`` value of the changed cells, in place in the original JSON
text: outputs, execution counts, metadata, key order, indentation and the trailing newline stay
byte for byte. Every rewritten cell is compiled before anything is written. A notebook with no
fixes is never rewritten.
"""

from __future__ import annotations

import ast
import json
import re
import secrets
import warnings
from dataclasses import dataclass, field, replace

from gradfix.diff import unified_diff
from gradfix.model import FileResult, FixOutcome, Span

# Cell magics whose body is Python (the rest, %%bash, %%html, %%writefile, ... are skipped).
PYTHON_CELL_MAGICS = frozenset({"time", "timeit", "capture", "prun", "debug"})
_FUTURE = re.compile(r"^from[ \t]+__future__[ \t]+import[ \t]+[\w \t,]+(?:#.*)?$")
_LINE_MAGIC = re.compile(r"^[ \t]*(?:[%!]|[A-Za-z_][\w.]*[ \t]*=[ \t]*[%!])|^[ \t]*[^#\s].*\?[ \t]*$")
# Line magics that run the Python statement after them once or more (`%time train()`,
# `%timeit -n 3 f(x)`): the rules see that statement after the placeholder, on its line.
_STATEMENT_MAGIC = re.compile(r"^[ \t]*%(?:time|timeit|prun)(?:[ \t]+-[A-Za-z](?:[ \t]*\d+)?)*[ \t]+(\S.*)$")
_PLACEHOLDER = re.compile(r"_gradfix_magic_[0-9A-Za-z]+_")


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
        raise NotebookError(f"not a valid notebook: invalid JSON ({exc})") from None
    except RecursionError:
        raise NotebookError("not a valid notebook: JSON nested too deeply") from None
    if not isinstance(document, dict) or not isinstance(document.get("cells"), list):
        raise NotebookError("not a valid notebook: no 'cells' list (nbformat 4 expected)")
    cells = []
    for index, (cell, (_, _, cell_members)) in enumerate(zip(document["cells"], members["cells"][2])):
        where = f"not a valid notebook: cell {index + 1}"
        if not isinstance(cell, dict):
            raise NotebookError(f"{where} is not a JSON object")
        cell_type = cell.get("cell_type", "")
        if not isinstance(cell_type, str):
            raise NotebookError(f"{where}: 'cell_type' is not a string")
        source = cell.get("source", "")
        as_list = isinstance(source, list)
        if as_list and not all(isinstance(item, str) for item in source):
            raise NotebookError(f"{where}: 'source' is a list holding something other than strings")
        if not as_list and not isinstance(source, str):
            raise NotebookError(f"{where}: 'source' is neither a string nor a list of strings")
        joined = "".join(source) if as_list else source
        try:
            joined.encode("utf-8")
        except UnicodeEncodeError:
            raise NotebookError(f"{where}: 'source' holds a lone surrogate (not valid Unicode text)") from None
        start, stop, _ = cell_members.get("source", (0, 0, None))
        cells.append(Cell(index, cell_type, joined, (start, stop), as_list))
    return cells


def _parses(code: str) -> SyntaxError | None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ast.parse(code)
    except SyntaxError as exc:
        return exc
    except (ValueError, RecursionError, MemoryError) as exc:
        return SyntaxError(str(exc))
    return None


def _compiles(code: str) -> str | None:
    """Why ``code`` does not compile as a cell (top-level ``await`` is fine in a notebook)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compile(code, "<cell>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


@dataclass
class Analysed:
    """A code cell as the rules see it: IPython lines masked by placeholders."""

    code: str  # ends with a newline
    masks: dict[str, str] = field(default_factory=dict)  # placeholder line -> original line
    # line of the cell (1-based) -> what to add to a column of the statement a magic runs
    shifts: dict[int, int] = field(default_factory=dict)


def mask_cell(source: str, nonce: str, index: int) -> Analysed | str:
    """The cell's code with IPython syntax masked, or the reason it is skipped."""
    code = source if source.endswith("\n") else source + "\n"
    lines = code.splitlines(keepends=True)
    # Each cell runs on its own, so `from __future__ import ...` may open any cell; joined
    # into one module it would not compile: mask it too (a no-op for the rules).
    futures = [n for n, line in enumerate(lines) if _FUTURE.match(line)]
    if not futures and _parses(code) is None:
        return Analysed(code)
    masks: dict[str, str] = {}
    shifts: dict[int, int] = {}

    def mask(number: int) -> None:
        body = lines[number].rstrip("\r\n")
        indent = body[: len(body) - len(body.lstrip(" \t"))]
        placeholder = f"{indent}_gradfix_magic_{nonce}_{index}_{number}"
        statement = _magic_statement(body)
        if statement is not None:  # `_gradfix_magic_..._7; train()`: the call is seen, the line kept
            shifts[number + 1] = statement.start(1) - len(placeholder) - 2
            placeholder += f"; {statement.group(1)}"
        masks[placeholder] = body
        lines[number] = placeholder + lines[number][len(body):]

    if lines[0].lstrip().startswith("%%"):
        magic = lines[0].lstrip()[2:].split(None, 1)
        name = magic[0] if magic else ""
        if name not in PYTHON_CELL_MAGICS:
            return f"cell magic %%{name} (not Python)"
        mask(0)
    for number in futures:
        mask(number)
    for number in range(len(lines)):
        if lines[number].rstrip("\r\n") not in masks and _LINE_MAGIC.match(lines[number].rstrip("\r\n")):
            mask(number)
    masked = "".join(lines)
    error = _parses(masked)
    if error is not None:
        how = " once its IPython lines are masked" if masks else ""
        return f"does not parse{how} ({error.msg}, line {error.lineno})"
    return Analysed(masked, masks, shifts)


def _magic_statement(line: str) -> re.Match | None:
    """The one simple Python statement a `%time`/`%timeit`/`%prun` line runs (group 1), or None."""
    found = _STATEMENT_MAGIC.match(line)
    if found is None:
        return None
    statement = found.group(1)
    try:
        ast.parse(f"pass; {statement}")  # a compound statement cannot follow `;`
    except (SyntaxError, ValueError):
        return None
    return found


@dataclass
class VirtualModule:
    text: str
    nonce: str
    starts: dict[int, int]  # cell index -> first line of the cell's code in ``text`` (1-based)
    lengths: dict[int, int]
    analysed: dict[int, Analysed]
    notes: list[str]

    def locate(self, line: int) -> tuple[int, int] | None:
        for index, start in self.starts.items():
            if start <= line < start + self.lengths[index]:
                return index, line - start + 1
        return None

    def marker(self, index: int) -> str:
        return f"# gradfix-notebook-cell {self.nonce} {index}\n"

    def tail_marker(self) -> str:
        return f"# gradfix-notebook-skipped-cells {self.nonce}\n"


def _nonce(cells: list[Cell]) -> str:
    while True:
        nonce = secrets.token_hex(8)
        if not any(nonce in cell.source for cell in cells):
            return nonce


def virtual_module(cells: list[Cell], nonce: str | None = None) -> VirtualModule:
    module = VirtualModule("", nonce or _nonce(cells), {}, {}, {}, [])
    parts, line, skipped = [], 1, []
    for cell in cells:
        if cell.cell_type != "code" or not cell.source.strip():
            continue
        analysed = mask_cell(cell.source, module.nonce, cell.index)
        if isinstance(analysed, str):
            module.notes.append(f"cell {cell.index + 1} skipped: {analysed}")
            skipped.append(cell.source)
            continue
        parts.append(module.marker(cell.index) + analysed.code)
        module.analysed[cell.index] = analysed
        module.starts[cell.index] = line + 1
        module.lengths[cell.index] = analysed.code.count("\n")
        line += 1 + module.lengths[cell.index]
    module.text = "".join(parts) + _skipped_uses(module, "".join(parts), skipped)
    return module


def _skipped_uses(module: VirtualModule, text: str, skipped: list[str]) -> str:
    """A tail that reads each imported name a skipped cell mentions (``(Variable, np)``), so that
    no fix drops an import that cell still uses (a Python 2 cell calling ``Variable``); it is
    analysed like the rest, and cut off again when the code goes back into the cells."""
    words = {w for source in skipped for w in _WORD.findall(source)}
    if not words:
        return ""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return ""
    imported = {
        (alias.asname or alias.name).split(".")[0]
        for stmt in tree.body
        if isinstance(stmt, (ast.Import, ast.ImportFrom))
        for alias in stmt.names
        if alias.name != "*"
    }
    used = sorted(imported & words)
    return f"{module.tail_marker()}({', '.join(used)},)\n" if used else ""


_WORD = re.compile(r"[A-Za-z_][A-Za-z_0-9]*")


class CellMappingError(Exception):
    """Fixed code that cannot go back into the cells; ``reason`` says it of one finding's fix."""

    def __init__(self, message: str, reason: str):
        super().__init__(message)
        self.reason = reason


def split_virtual(module: VirtualModule, text: str) -> tuple[str, dict[int, str]]:
    """Out of a (fixed) virtual module: the text before the first cell (an import a fix added)
    and the (still masked) code of each cell by cell index.

    Raises CellMappingError unless every marker is there exactly once, in cell order.
    """
    text = text.split(module.tail_marker(), 1)[0]
    marker = re.compile(rf"^# gradfix-notebook-cell {module.nonce} (\d+)\n", re.M)
    pieces = marker.split(text)
    found = [int(pieces[i]) for i in range(1, len(pieces), 2)]
    if found != list(module.starts):
        raise CellMappingError("internal error: a fix moved code across notebook cells", "its fix spans two notebook cells")
    return pieces[0], {int(pieces[i]): pieces[i + 1] for i in range(1, len(pieces), 2)}


IPYTHON_LINE = "fixes not applied: one would change a line holding IPython syntax"


def unmask(analysed: Analysed, code: str) -> str:
    """``code`` (a fixed cell) with each placeholder back to its IPython line, byte for byte.

    Raises CellMappingError if a fix moved, changed, duplicated or dropped a masked line.
    """
    if not analysed.masks:
        return code
    lines = code.splitlines(keepends=True)
    bodies = [line.rstrip("\r\n") for line in lines]
    for placeholder, original in analysed.masks.items():
        if bodies.count(placeholder) != 1:
            raise CellMappingError(IPYTHON_LINE, "its fix would change a line holding IPython syntax")
        number = bodies.index(placeholder)
        lines[number] = original + lines[number][len(placeholder):]
    restored = "".join(lines)
    name = _PLACEHOLDER.search(placeholder).group()
    if name in restored:  # a placeholder copied into another line
        raise CellMappingError(IPYTHON_LINE, "its fix would change a line holding IPython syntax")
    return restored


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


_LINE_REF = re.compile(r"\b(lines?) (\d+)(?:-(\d+))?\b")


def _cell_lines(message: str, module: VirtualModule, cell: int) -> str:
    """A message's "line N" (a line of the virtual module) as the line of the cell it is in."""

    def where(number: int) -> tuple[int, int] | None:
        return module.locate(number)

    def swap(match: re.Match) -> str:
        word, first, last = match.group(1), int(match.group(2)), match.group(3)
        start = where(first)
        end = where(int(last)) if last else start
        if start is None or end is None or end[0] != start[0]:
            return match.group(0)
        place = f"{word} {start[1]}" + (f"-{end[1]}" if last else "")
        return place if start[0] == cell else f"cell {start[0] + 1} {place}"

    return _LINE_REF.sub(swap, message)


def process_notebook(raw: bytes, path: str, check, fix_virtual, want_fixes: bool, problems=None, edits_of=None) -> FileResult:
    """Check (and fix) one notebook.

    ``check(source) -> findings``, ``fix_virtual(source, findings[, admit]) -> FixRun | None``,
    ``problems(source) -> [(line, message)]`` (notes about the code, e.g. suppression comments
    that suppress nothing) and ``edits_of(source, findings) -> {index: own edit}`` are the
    engine's, passed in so this module stays a pure adapter.

    When the fixes together cannot go back into the cells, each finding's own edit says which
    fix cannot (one that spans two cells, or changes an IPython line): those are refused, with
    the reason, and the others are made. Without ``edits_of`` the notebook is left unchanged.
    """
    result = FileResult(path, old_source=raw)
    try:
        text = raw.decode("utf-8")
        cells = read_cells(text)
    except UnicodeDecodeError as exc:
        result.error, result.error_kind = f"1:1: not a valid notebook: not UTF-8 ({exc.reason})", "syntax"
        return result
    except NotebookError as exc:
        result.error, result.error_kind = f"1:1: {exc}", "syntax"
        return result
    module = virtual_module(cells)
    result.notes.extend(module.notes)
    if not module.text:
        return result
    findings = check(module.text)
    for number, message in problems(module.text) if problems else ():
        where = module.locate(number)
        if where is not None:
            result.notes.append(f"cell {where[0] + 1}, line {where[1]}: {message}")
    mapped = []  # aligned with ``findings``: the fixer reports applied fixes by index
    for finding in findings:
        start = module.locate(finding.span.line)
        end = module.locate(finding.span.end_line)
        if start is None:  # cannot happen for code inside cells; keep the virtual position
            mapped.append(finding)
            continue
        cell, line = start
        end_line = end[1] if end and end[0] == cell else line
        shifts = module.analysed[cell].shifts if cell in module.analysed else {}
        span = Span(line, finding.span.col + shifts.get(line, 0), end_line, finding.span.end_col + shifts.get(end_line, 0))
        message = _cell_lines(finding.message, module, cell)
        mapped.append(replace(finding, span=span, cell=cell + 1, anchors=(), message=message))
    result.findings = [FixOutcome(f) for f in mapped]
    if not want_fixes or not findings:
        return result
    run = fix_virtual(module.text, findings)
    if run is None:
        return result
    try:
        new_sources = _fixed_sources(module, cells, run.source.decode("utf-8"))
    except CellMappingError as exc:
        if edits_of is None:
            result.notes.extend(run.notes)
            result.notes.append(f"{exc}; notebook left unchanged")
            return result
        refusals: list[dict[int, str]] = []  # per pass: finding index -> why its fix is refused

        def admit(source: bytes, found: list) -> list:
            refused = _refusals(module, cells, source.decode("utf-8"), found, edits_of)
            refusals.append(refused)
            return [None if i in refused else f for i, f in enumerate(found)]

        run = fix_virtual(module.text, findings, admit)
        for index, reason in sorted((refusals[0] if refusals else {}).items()):
            outcome = result.findings[index]
            outcome.refused = reason
            where = f"cell {outcome.finding.cell}, line {outcome.finding.line}" if outcome.finding.cell else f"line {outcome.finding.line}"
            result.notes.append(f"{where}: {outcome.finding.code} not fixed: {reason}")
        try:
            new_sources = _fixed_sources(module, cells, run.source.decode("utf-8"))
        except CellMappingError as again:  # cannot happen: each fix left maps on its own
            result.notes.extend(run.notes)
            result.notes.append(f"{again}; notebook left unchanged")
            return result
    result.notes.extend(run.notes)
    new_text = text
    by_index = {c.index: c for c in cells}
    for index in sorted(new_sources, key=lambda i: -by_index[i].span[0]):  # back to front: spans stay valid
        cell = by_index[index]
        start, stop = cell.span
        new_text = new_text[:start] + _encode_source(cell, new_sources[index], text) + new_text[stop:]
    if new_text != text:
        result.new_source = new_text.encode("utf-8")
        for index in run.applied:
            result.findings[index].applied = True
    return result


def _refusals(module: VirtualModule, cells: list[Cell], text: str, findings: list, edits_of) -> dict[int, str]:
    """The findings whose own fix cannot go back into the cells, and why."""
    from gradfix.model import apply_text_edits

    edits = edits_of(text, findings)
    refused = {}
    for index, finding in enumerate(findings):
        if finding is None or finding.fix is None:
            continue
        if index not in edits:
            refused[index] = "its fix changes nothing here"
            continue
        try:
            _fixed_sources(module, cells, apply_text_edits(text, edits[index]))
        except CellMappingError as exc:
            refused[index] = exc.reason
    return refused


def _fixed_sources(module: VirtualModule, cells: list[Cell], fixed: str) -> dict[int, str]:
    """The new source of each changed cell, IPython lines restored; every one compiles."""
    head, codes = split_virtual(module, fixed)
    if head.strip():  # an import a fix needs: it goes to the top of the first code cell
        first = min(codes, key=lambda i: module.starts[i])
        codes[first] = head.lstrip("\n") + codes[first]
    by_index = {c.index: c for c in cells}
    changed = {}
    for index, code in codes.items():
        analysed = module.analysed[index]
        if code == analysed.code:
            continue
        error = _compiles(code)
        if error is not None and _compiles(analysed.code) is None:
            raise CellMappingError(
                f"internal error: the fixed cell {index + 1} does not compile ({error})", f"its fix leaves cell {index + 1} not compiling"
            )
        new = unmask(analysed, code)
        if not by_index[index].source.endswith("\n") and new.endswith("\n"):
            new = new[:-1]
        if new != by_index[index].source:
            changed[index] = new
    return changed


def cell_diffs(old: bytes, new: bytes, path: str) -> bytes:
    """A readable unified diff per changed cell (``--- a/nb.ipynb:cell 3``), not raw JSON."""
    old_cells = {c.index: c.source for c in read_cells(old.decode("utf-8"))}
    new_cells = {c.index: c.source for c in read_cells(new.decode("utf-8"))}
    out = []
    for index in sorted(old_cells):
        if old_cells[index] != new_cells.get(index, old_cells[index]):
            out.append(unified_diff(old_cells[index].encode(), new_cells[index].encode(), f"{path}:cell {index + 1}"))
    return b"".join(out)
