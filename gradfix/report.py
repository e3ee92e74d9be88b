"""Render results: text lines, the stable JSON schema, and diffs (rich on a terminal)."""

from __future__ import annotations

import json
import os
import re
import sys
from typing import IO, TYPE_CHECKING, Sequence

from gradfix.diff import unified_diff
from gradfix.model import FileResult, FixOutcome, FixSafety

if TYPE_CHECKING:  # rich is imported only when something is drawn on a terminal
    from rich.console import Console


#: ``--color``: ``auto`` (a terminal, unless NO_COLOR is set; FORCE_COLOR forces it),
#: ``always`` or ``never``.
COLOR_CHOICE = "auto"


def use_color(stream: IO) -> bool:
    if COLOR_CHOICE != "auto":
        return COLOR_CHOICE == "always"
    if os.environ.get("NO_COLOR"):  # https://no-color.org: set and not empty
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    return stream.isatty()


def console_for(stream: IO, **kwargs) -> Console:
    """A rich console on ``stream`` that colours exactly when :func:`use_color` says so."""
    from rich.console import Console  # only terminal output pays for rich

    color = use_color(stream)
    return Console(file=stream, force_terminal=color, no_color=not color, **kwargs)


def _marker(outcome: FixOutcome, unsafe_fixes: bool) -> str:
    fix = None if outcome.refused else outcome.finding.fix
    if fix is FixSafety.SAFE or (fix is FixSafety.UNSAFE and unsafe_fixes):
        return " [*]"
    if fix is FixSafety.UNSAFE:
        return " [unsafe]"
    return ""


def finding_line(path: str, outcome: FixOutcome, unsafe_fixes: bool, prefix: str = "", show_fix: bool = False) -> str:
    f = outcome.finding
    if f.cell is not None:
        path = f"{path}:cell {f.cell}"
    title = ""
    if show_fix:
        title = f" (fix: {f.fix_title})" if f.fix_title and not outcome.refused else ""
        why = outcome.refused or f.no_fix
        title = title or (f" (no fix: {why})" if why else "")
    return f"{prefix}{path}:{f.span.line}:{f.span.col + 1}: {f.code}{_marker(outcome, unsafe_fixes)} {f.message}{title}"


def text_report(results: Sequence[FileResult], unsafe_fixes: bool, mode: str, show_fixes: bool = False) -> list[str]:
    """One line per finding left (and per syntax error), sorted by file then line.

    ``mode`` is ``check``, ``diff`` or ``apply``. The findings that ``--diff`` would fix or
    ``--apply`` fixed get a line only with ``show_fixes`` (``--show-fixes``), which also names
    each finding's fix.
    """
    prefix = {"diff": "would fix: ", "apply": "fixed: "}.get(mode, "")
    lines = []
    for result in sorted(results, key=lambda r: r.path):
        if result.error_kind == "syntax":
            lines.append(f"{result.path}:{result.error}")
        for outcome in result.findings:
            if outcome.applied and not show_fixes:
                continue
            lines.append(finding_line(result.path, outcome, unsafe_fixes, prefix if outcome.applied else "", show_fixes))
    return lines


def summary(results: Sequence[FileResult], unsafe_fixes: bool, mode: str, missing_paths: int = 0) -> str:
    """The closing line; ``missing_paths`` counts command-line paths that were not found."""
    outcomes = [o for r in results for o in r.findings]
    fixed = sum(o.applied for o in outcomes)
    left = [o for o in outcomes if not o.applied]
    applied_mode = mode != "check"
    # Checked, fixed, but the new file could not be written (its fixes are not "fixable with
    # --apply": --apply was just tried).
    unwritten = [r for r in results if r.error_kind == "io" and r.findings]
    retry = {id(o) for r in unwritten for o in r.findings} if mode == "apply" else set()
    left_fixable = [o for o in left if not o.refused]  # a fix tried that changes nothing is no fix
    safe = sum(
        1
        for o in left_fixable
        if id(o) not in retry and (o.finding.fix is FixSafety.SAFE or (o.finding.fix is FixSafety.UNSAFE and unsafe_fixes))
    )
    hidden = sum(1 for o in left_fixable if o.finding.fix is FixSafety.UNSAFE and not unsafe_fixes)
    errors = sum(1 for r in results if r.error) - len(unwritten)
    failed = errors or unwritten or missing_paths
    parts = []
    if applied_mode:
        files = sum(1 for r in results if any(o.applied for o in r.findings))
        verb = "Fixed" if mode == "apply" else "Would fix"
        parts.append(f"{verb} {fixed} finding{'s' * (fixed != 1)} in {files} file{'s' * (files != 1)}; {len(left)} remaining.")
    elif not left:
        parts.append("No findings." if failed else "All checks passed!")
    else:
        parts.append(f"Found {len(left)} finding{'s' * (len(left) != 1)}.")
    if safe and left:
        parts.append(f"[*] {safe} fixable with --apply (review with --diff).")
    if hidden:
        parts.append(f"{hidden} more fixable with --unsafe-fixes (they change behaviour on purpose; see `gradfix explain CODE`).")
    if unwritten:
        parts.append(f"{len(unwritten)} file{'s' * (len(unwritten) != 1)} could not be written (see above).")
    if errors:
        parts.append(f"{errors} file{'s' * (errors != 1)} could not be checked.")
    if missing_paths:
        parts.append(f"{missing_paths} path{'s' * (missing_paths != 1)} not found.")
    return " ".join(parts)


def _error_row(result: FileResult) -> dict:
    """A file that could not be checked, as a row of the JSON report (``code`` is null)."""
    where = re.match(r"(\d+):(\d+): (.*)", result.error or "", re.S)
    line, column, message = (int(where[1]), int(where[2]), where[3]) if where else (1, 1, result.error)
    return {
        "path": result.path,
        "line": line,
        "column": column,
        "end_line": line,
        "end_column": column,
        "code": None,
        "name": f"{result.error_kind or 'io'}-error",
        "message": message,
        "fix": None,
    }


def json_report(results: Sequence[FileResult], applied_mode: bool) -> str:
    """The stable schema: one array of finding objects; ``applied`` only under --apply.

    A file that could not be checked (syntax error, unreadable) is a row with ``code`` null
    and ``name`` ``syntax-error`` / ``io-error`` / ``internal-error``.
    """
    rows = []
    for result in sorted(results, key=lambda r: r.path):
        if result.error:
            rows.append(_error_row(result))
        for outcome in result.findings:
            f = outcome.finding
            cell = {} if f.cell is None else {"cell": f.cell}  # notebooks only: 1-based cell
            rows.append(
                {
                    "path": result.path,
                    **cell,
                    "line": f.span.line,
                    "column": f.span.col + 1,
                    "end_line": f.span.end_line,
                    "end_column": f.span.end_col + 1,
                    "code": f.code,
                    "name": f.name,
                    "message": f.message,
                    **({"no_fix": f.no_fix} if f.no_fix else {}),  # why the rule builds no fix here
                    "fix": None
                    if f.fix is None
                    else {
                        "safety": f.fix.value,
                        "applied": bool(applied_mode and outcome.applied),
                        "title": f.fix_title,
                        **({"refused": outcome.refused} if outcome.refused else {}),  # why it cannot be made here
                    },
                }
            )
    return json.dumps(rows, indent=2)


def file_diff(result: FileResult) -> bytes:
    if not result.changed:
        return b""
    if result.path.endswith(".ipynb"):
        from gradfix.notebook import cell_diffs

        return cell_diffs(result.old_source, result.new_source, result.path)
    return unified_diff(result.old_source, result.new_source, result.path)


def write_diff(patch: bytes, stream=None) -> None:
    """Plain bytes when piped (or NO_COLOR): a patch ``git apply`` accepts; rich colours otherwise."""
    stream = stream or sys.stdout
    if not use_color(stream):
        stream.flush()
        getattr(stream, "buffer", stream).write(patch)
        stream.flush()
        return
    print_diff(console_for(stream, highlight=False, soft_wrap=True), patch)


def print_diff(console: Console, patch: bytes) -> None:
    """A unified diff in colour: headers bold, hunk lines cyan, additions green, removals red."""
    from rich.text import Text

    for raw in patch.decode("utf-8", errors="replace").splitlines():
        line = raw.rstrip("\r")
        style = ""
        if line.startswith(("--- ", "+++ ")):
            style = "bold"
        elif line.startswith("@@"):
            style = "cyan"
        elif line.startswith("+"):
            style = "green"
        elif line.startswith("-"):
            style = "red"
        console.print(Text(line, style=style))


def rule_counts(results: Sequence[FileResult]) -> list[tuple[str, str, int, int, int]]:
    """(code, name, findings, fixed, left) per rule that fired, by code."""
    counts: dict[str, list] = {}
    for result in results:
        for outcome in result.findings:
            f = outcome.finding
            row = counts.setdefault(f.code, [f.name, 0, 0])
            row[1] += 1
            row[2] += outcome.applied
    return [(code, name, n, fixed, n - fixed) for code, (name, n, fixed) in sorted(counts.items())]


def statistics_report(results: Sequence[FileResult], unsafe_fixes: bool, as_json: bool = False) -> list[str]:
    """``--statistics``: the findings left, counted per rule (``[*]``: some have a fix to apply)."""
    rows = []
    for result in results:
        for outcome in result.findings:
            if not outcome.applied:
                rows.append(outcome)
    counts: dict[str, list] = {}
    for outcome in rows:
        f = outcome.finding
        entry = counts.setdefault(f.code, [f.name, 0, 0])
        entry[1] += 1
        entry[2] += bool(_marker(outcome, unsafe_fixes) == " [*]")
    ordered = sorted(counts.items(), key=lambda item: (-item[1][1], item[0]))
    if as_json:
        table = [{"code": c, "name": n, "count": k, "fixable": fixable} for c, (n, k, fixable) in ordered]
        return [json.dumps(table, indent=2)]
    width = max((len(str(k)) for _, (_, k, _) in ordered), default=1)
    return [f"{k:>{width}}\t{c}\t{'[*] ' if fixable else ''}{n}" for c, (n, k, fixable) in ordered]


def print_summary_table(results: Sequence[FileResult], stream, mode: str = "apply") -> None:
    """The closing table (rule, findings, fixed or would fix, left), for terminals only."""
    rows = rule_counts(results)
    if not rows:
        return
    from rich.console import Console
    from rich.table import Table

    fixed_header = "would fix" if mode == "diff" else "fixed"
    table = Table("rule", "name", "findings", fixed_header, "left")
    for code, name, n, fixed, left in rows:
        table.add_row(code, name, str(n), str(fixed), str(left))
    console_for(stream).print(table)


def as_on_disk(results: Sequence[FileResult]) -> list[FileResult]:
    """For a preview (``--diff``): findings left after the fixes, at their lines in the file on
    disk (the engine reports them in the fixed source, which was not written)."""
    from dataclasses import replace

    from gradfix.diff import old_line_of

    out = []
    for result in results:
        if not result.changed or result.path.endswith(".ipynb"):
            out.append(result)
            continue
        to_old = old_line_of(result.old_source, result.new_source)
        findings = []
        for outcome in result.findings:
            if not outcome.applied:
                f = outcome.finding
                line, end_line = to_old(f.span.line), to_old(f.span.end_line)
                span = replace(f.span, line=line, end_line=max(line, end_line))
                outcome = FixOutcome(replace(f, span=span, anchors=()), applied=False)
            findings.append(outcome)
        findings.sort(key=lambda o: (o.finding.span, o.finding.code))
        out.append(replace(result, findings=findings))
    return out
