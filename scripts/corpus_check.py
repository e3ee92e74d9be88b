#!/usr/bin/env python
"""Run every gradfix rule (unsafe fixes included) over a tree of real code and prove it is safe.

Usage::

    python scripts/corpus_check.py DIR [--jobs N] [--apply-copy] [--verbose]

For every ``*.py`` file under DIR (symlinks not followed; ``.git`` and virtualenvs skipped,
``.gitignore`` *not* honoured, so vendored code is exercised too) this checks:

1. **No crash.** ``check`` and the fixer run with ``Settings(select=<every code>,
   unsafe_fixes=True)``. Any exception other than "this file does not parse" (a syntax error, an
   undecodable file, nesting too deep for CPython's own parser) is a failure, reported with the
   file and the exception. An ``internal error`` note from the fixer (a rule whose fix did not
   compile) is a failure too, and so is a fix that raised ``FixError`` ("fix skipped").
2. **It compiles.** The rewritten bytes pass ``compile()``.
3. **Idempotent.** Like the engine (``gradfix.engine.FIX_PASSES``), fixes are applied in
   passes until a pass changes nothing (a fix can uncover another finding; of two overlapping
   fixes the outer one goes first). Every pass is checked on its own (items 2 and 4); the file
   must stop changing within the engine's pass limit, and ``gradfix.fix()`` must give exactly the
   final bytes. So running ``--apply`` a second time changes nothing.
4. **Nothing outside the edits changes.** While fixing, every edit the fixer accepts is
   recorded: the span of the original LibCST node it replaces (``FixContext.span_of``; for a
   statement, everything LibCST says the statement owns: the comment and blank lines above it,
   which move with it into a new block, and its trailing comment and newline, which go when it
   is removed) and, for an expression replaced by an expression, the exact replacement text. Old
   and new text are diffed line by line with :mod:`difflib`; each run of changed lines (grown
   until it holds every edited node it touches, plus one unchanged line each side) must match a
   pattern built from the *old* text: everything outside the edited nodes literally, each
   one-line expression edit as its exact new text, any other edit as "any text". So a changed
   comment, quote, space, newline or blank line anywhere outside a node fails, and an expression
   fix that added a character next to itself fails too. The one blind spot: text right at the
   edge of a statement (or multi-line) edit cannot be told apart from that edit's own output.
   The only other change allowed is the fixer's import bookkeeping (LibCST's
   Add/RemoveImportsVisitor): changed lines that are all ``import``/``from ... import`` lines
   (or blank). The comparison runs on decoded text; BOM and PEP 263 encoding are checked on the
   raw bytes.
5. With ``--apply-copy`` the tree is also copied to a temporary folder and the real CLI
   (``python -m gradfix --apply --unsafe-fixes --select <all>``) is run on the copy; every file
   it wrote must equal, byte for byte, what the library produced, and every file it did not
   write must be unchanged.

Prints a summary (files, parse failures, findings per rule, fixes applied, failures, time) and
exits 1 on any failure. Figures are per run; nothing is timed against a threshold.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import io
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
import tokenize
import traceback
import warnings
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import libcst as cst
from libcst.metadata import WhitespaceInclusivePositionProvider

from gradfix.engine import FIX_PASSES, SourceError, _builder, check, decode_source, wants_fix
from gradfix.engine import fix as engine_fix
from gradfix.fixer import apply_fixes
from gradfix.model import Settings, Span
from gradfix.rules import all_rules

SKIP_DIRS = {".git", ".hg", ".svn", "__pycache__", ".venv", "venv", ".tox", "site-packages", "node_modules"}
BOM = b"\xef\xbb\xbf"


def all_settings() -> Settings:
    return Settings(select=tuple(r.code for r in all_rules()), unsafe_fixes=True)


@dataclass
class FileReport:
    path: str
    status: str = "ok"  # ok | unparsable | failed
    detail: str = ""
    findings: Counter = field(default_factory=Counter)
    fixed: Counter = field(default_factory=Counter)
    new_source: bytes | None = None
    reruns: int = 0  # fix passes beyond the second (cascading or overlapping fixes)
    seconds: float = 0.0


class Failure(Exception):
    pass


# -- one run of check + fix, recording the spans of the edits that went in ---------------------


def fix_once(source: bytes, path: str, settings: Settings):
    """(findings, FixRun | None, {finding index: [Span of each edited original node]})."""
    findings = check(source, path, settings)
    wanted = [f if wants_fix(f, settings) else None for f in findings]
    if not any(wanted):
        return findings, None, {}
    build = _builder(settings)
    spans: dict[int, list] = {}

    def recording_build(finding, ctx):
        edits = build(finding, ctx)
        index = next(i for i, f in enumerate(wanted) if f is finding)
        spans[index] = [(_owned_span(ctx, e.node), _replacement_code(ctx, e)) for e in edits or ()]
        return edits

    run = apply_fixes(source, wanted, recording_build, path)
    return findings, run, spans


def _owned_span(ctx, node):
    """The node's span; for a statement, everything LibCST says it owns: the comment and blank
    lines above it (a statement moved into a new block carries them along, re-indented) and its
    trailing comment and newline (a removed statement takes its own line with it)."""
    if not isinstance(node, (cst.BaseStatement, cst.BaseSmallStatement)):
        return ctx.span_of(node)
    if not hasattr(ctx, "_owned_positions"):
        ctx._owned_positions = ctx.wrapper.resolve(WhitespaceInclusivePositionProvider)
    p = ctx._owned_positions[node]
    return Span(p.start.line, p.start.column, p.end.line, p.end.column)


def _replacement_code(ctx, edit) -> str | None:
    """The exact new text of an expression-for-expression edit; None for statements, whose
    text depends on where LibCST puts them (indentation, blank lines)."""
    if isinstance(edit.node, cst.BaseExpression) and isinstance(edit.replacement, cst.BaseExpression):
        code = ctx.module.code_for_node(edit.replacement)
        # A continuation line's indentation comes from the enclosing block: only one-line
        # replacements render the same out of context.
        return code if "\n" not in code and "\r" not in code else None
    return None


# -- the "nothing outside the edits changed" check ----------------------------------------------

_LINES = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+")


def _line_starts(text: str) -> list[int]:
    starts, offset = [], 0
    for line in _LINES.findall(text):
        starts.append(offset)
        offset += len(line)
    starts.append(offset)
    return starts


def _offset(starts: list[int], line: int, col: int) -> int:
    return starts[min(line - 1, len(starts) - 1)] + col


def _is_import_hunk(lines: list[str]) -> bool:
    """Lines that only the fixer's import bookkeeping may add or remove."""
    text = "".join(lines)
    if not text.strip():
        return True
    try:
        tree = ast.parse(textwrap.dedent(text.replace("\r\n", "\n")).strip("\n"))
    except SyntaxError:
        return False
    return all(isinstance(node, (ast.Import, ast.ImportFrom)) for node in tree.body)


Region = tuple  # (start offset, end offset, exact new text or None) in the old text


def check_untouched(old_text: str, new_text: str, edited: list[Region]) -> str | None:
    """None if every difference lies inside an edited region; else a description of the first one.

    ``edited`` holds (start, end, code) offsets into ``old_text``; ``code`` is the exact text
    the region must become (expression edits), or None when any text is allowed there
    (statement edits). Runs of changed lines are compared as a pattern: the old text outside the
    regions, literally and in order, with each region replaced by its code (or a wildcard).
    """
    a = _LINES.findall(old_text)
    b = _LINES.findall(new_text)
    starts = _line_starts(old_text)
    regions = sorted(edited, key=lambda r: (r[0], r[1]))
    ops = difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()
    k = 0
    while k < len(ops):
        if ops[k][0] == "equal":
            k += 1
            continue
        first = last = k
        # Grow the window of opcodes until every region it touches lies wholly inside it.
        while True:
            lo, hi = starts[ops[first][1]], starts[ops[last][2]]
            touching = [r for r in regions if r[0] <= hi and r[1] >= lo]
            need_lo = min([lo, *(r[0] for r in touching)])
            need_hi = max([hi, *(r[1] for r in touching)])
            if need_lo < lo and first > 0:
                first -= 1
            elif need_hi > hi and last < len(ops) - 1:
                last += 1
            else:
                break
        i1, i2, j1, j2 = ops[first][1], ops[last][2], ops[first][3], ops[last][4]
        # One unchanged line of context each side: an insertion that difflib aligned on the
        # far side of an edited statement's indentation still lines up with the region.
        if i1 > 0 and j1 > 0 and a[i1 - 1] == b[j1 - 1]:
            i1, j1 = i1 - 1, j1 - 1
        if i2 < len(a) and j2 < len(b) and a[i2] == b[j2]:
            i2, j2 = i2 + 1, j2 + 1
        old_chunk, new_chunk = "".join(a[i1:i2]), "".join(b[j1:j2])
        if not _matches_around_edits(old_chunk, new_chunk, starts[i1], regions):
            changed = [op for op in ops[first : last + 1] if op[0] != "equal"]
            if not all(_is_import_hunk(a[o[1] : o[2]]) and _is_import_hunk(b[o[3] : o[4]]) for o in changed):
                where = f"old lines {ops[first][1] + 1}-{max(ops[first][1] + 1, ops[last][2])}"
                return f"bytes outside the edited nodes changed ({where}): {old_chunk[:160]!r} -> {new_chunk[:160]!r}"
        k = last + 1
    return None


def _matches_around_edits(old_chunk: str, new_chunk: str, base: int, regions: list[Region]) -> bool:
    """The old text between the edited regions reappears, in order and unchanged, in the new
    text; each region became its exact code, or anything when its code is unknown."""
    end = base + len(old_chunk)
    inside = [r for r in regions if r[0] < end and r[1] > base or base <= r[0] == r[1] <= end]
    pattern, position = [], 0
    for start, stop, code in inside:
        whole = base <= start and stop <= end  # else clipped at the file's edge: wildcard
        start, stop = max(start, base) - base, min(stop, end) - base
        if start < position:  # nested or overlapping spans: treat as one unknown region
            pattern.append("(?:.*?)")
            position = max(position, stop)
            continue
        pattern.append(re.escape(old_chunk[position:start]))
        pattern.append(re.escape(code) if code is not None and whole else "(?:.*?)")
        position = stop
    pattern.append(re.escape(old_chunk[position:]))
    return re.fullmatch("".join(pattern), new_chunk, re.DOTALL) is not None


def _encoding(source: bytes) -> str:
    try:
        return tokenize.detect_encoding(io.BytesIO(source).readline)[0]
    except SyntaxError:
        return "?"


# -- one file --------------------------------------------------------------------------------


def check_file(path: str) -> FileReport:
    return check_source(Path(path).read_bytes(), path)


def check_source(source: bytes, path: str = "<string>") -> FileReport:
    """Every check of the module docstring on one file's bytes (tests call this directly)."""
    report = FileReport(path)
    started = time.perf_counter()
    try:
        _check_source(source, path, report)
    except Failure as exc:
        report.status, report.detail = "failed", str(exc)
    except Exception as exc:  # a crash anywhere in gradfix
        tb = traceback.extract_tb(exc.__traceback__)[-1]
        report.status = "failed"
        report.detail = f"crash: {type(exc).__name__}: {exc} (at {Path(tb.filename).name}:{tb.lineno})"
    report.seconds = time.perf_counter() - started
    return report


def _check_source(source: bytes, path: str, report: FileReport) -> None:
    settings = all_settings()
    try:
        findings, run, spans = fix_once(source, path, settings)
    except (SourceError, RecursionError, MemoryError) as exc:
        # The file does not parse for CPython itself (or is nested beyond what it can analyse):
        # gradfix must report it and leave it alone, which the CLI does; nothing to prove here.
        if isinstance(exc, SourceError) or _cpython_cannot_parse(source):
            report.status, report.detail = "unparsable", getattr(exc, "message", type(exc).__name__)
            return
        raise
    report.findings.update(f.code for f in findings)
    current = source
    # Like the engine, fix in passes until nothing changes (a fix may uncover a finding, an
    # overlapped fix waits for the next pass); check every pass on its own edits.
    for number in range(1, FIX_PASSES + 2):
        for note in run.notes if run is not None else ():
            if "internal error" in note or "fix skipped" in note or "cannot fix" in note:
                raise Failure(f"fixer note (pass {number}): {note}")
        if run is None or run.source == current:
            break
        if number > FIX_PASSES:
            raise Failure(f"not idempotent: still changing after {FIX_PASSES} passes")
        _check_pass(current, run, findings, spans, path, number)
        report.fixed.update(findings[i].code for i in run.applied)
        current = run.source
        findings, run, spans = fix_once(current, path, settings)
    report.reruns = max(0, number - 2)
    if current != source:
        report.new_source = current
    if engine_fix(source, path, settings) != current:
        raise Failure("gradfix.fix() does not give the same result as fixing pass by pass")


def _check_pass(old: bytes, run, findings, spans, path: str, number: int) -> None:
    where = f" (pass {number})" if number > 1 else ""
    new = run.source
    error = _compile_error(new, path)
    if error:
        raise Failure(f"rewrite does not compile{where}: {error}")
    if old.startswith(BOM) != new.startswith(BOM):
        raise Failure(f"the BOM was not preserved{where}")
    if _encoding(old) != _encoding(new):
        raise Failure(f"encoding changed{where}: {_encoding(old)} -> {_encoding(new)}")
    old_text, new_text = decode_source(old), decode_source(new)
    starts = _line_starts(old_text)
    regions = [
        (_offset(starts, s.line, s.col), _offset(starts, s.end_line, s.end_col), code)
        for i in sorted(run.applied)
        for s, code in spans.get(i, ())
    ]
    problem = check_untouched(old_text, new_text, regions)
    if problem:
        raise Failure(problem + where)


def _cpython_cannot_parse(source: bytes) -> bool:
    try:
        ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return True
    return False


def _compile_error(source: bytes, path: str) -> str | None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # SyntaxWarnings of the code under test are not ours
            compile(source, path, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


# -- the tree ------------------------------------------------------------------------------


def python_files(root: Path) -> list[Path]:
    found = []
    for directory, dirs, files in os.walk(root):  # os.walk does not follow symlinked folders
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not (Path(directory, d) / "pyvenv.cfg").exists())
        for name in sorted(files):
            path = Path(directory, name)
            if name.endswith(".py") and not path.is_symlink() and path.is_file():
                found.append(path)
    return found


def apply_copy_check(root: Path, files: list[Path], reports: dict[str, FileReport]) -> list[str]:
    """Run the real CLI with --apply on a copy; compare with the library's rewrites."""
    problems = []
    codes = ",".join(r.code for r in all_rules())
    with tempfile.TemporaryDirectory(prefix="gradfix-corpus-") as tmp:
        copy = Path(tmp) / "tree"
        for path in files:
            target = copy / path.relative_to(root)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
        proc = subprocess.run(
            [sys.executable, "-m", "gradfix", "--apply", "--unsafe-fixes", "--select", codes, "."],
            cwd=copy,
            capture_output=True,
        )
        if proc.returncode not in (0, 1, 2):
            problems.append(f"CLI exited {proc.returncode}: {proc.stderr.decode(errors='replace')[-500:]}")
        if b"Traceback" in proc.stderr:
            problems.append(f"CLI printed a traceback: {proc.stderr.decode(errors='replace')[-1500:]}")
        for path in files:
            report = reports[str(path)]
            got = (copy / path.relative_to(root)).read_bytes()
            expected = report.new_source if report.new_source is not None else path.read_bytes()
            if report.status == "failed":
                continue
            if got != expected:
                problems.append(f"{path}: --apply wrote different bytes than the library produced")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", type=Path)
    parser.add_argument("--jobs", "-j", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--apply-copy", action="store_true", help="also run the CLI's --apply on a copy")
    parser.add_argument("--verbose", "-v", action="store_true", help="list every file that was rewritten")
    args = parser.parse_args(argv)
    if not args.root.is_dir():
        print(f"corpus_check: {args.root}: not a folder", file=sys.stderr)
        return 2
    started = time.perf_counter()
    files = python_files(args.root)
    names = [str(p) for p in files]
    if args.jobs > 1 and len(files) > 8:
        with ProcessPoolExecutor(args.jobs) as pool:
            results = list(pool.map(check_file, names, chunksize=4))
    else:
        results = [check_file(n) for n in names]
    reports = {r.path: r for r in results}
    extra = apply_copy_check(args.root, files, reports) if args.apply_copy else []
    elapsed = time.perf_counter() - started

    findings, fixed = Counter(), Counter()
    for r in results:
        findings.update(r.findings)
        fixed.update(r.fixed)
    failed = [r for r in results if r.status == "failed"]
    unparsable = [r for r in results if r.status == "unparsable"]
    rewritten = [r for r in results if r.new_source is not None]
    size = sum(p.stat().st_size for p in files)
    print(f"corpus: {args.root}")
    print(f"files: {len(files)} ({size / 1e6:.1f} MB); unparsable (reported, left alone): {len(unparsable)}")
    print(f"rules: {', '.join(r.code for r in all_rules())}")
    print(f"findings: {sum(findings.values())}  " + "  ".join(f"{c}={n}" for c, n in sorted(findings.items())))
    print(f"fixes applied: {sum(fixed.values())} in {len(rewritten)} files  " + "  ".join(f"{c}={n}" for c, n in sorted(fixed.items())))
    print(f"extra fix passes (cascades/overlaps): {sum(r.reruns for r in results)}")
    if args.apply_copy:
        print(f"--apply on a copy: {'identical to the library' if not extra else f'{len(extra)} problems'}")
    print(f"failures: {len(failed) + len(extra)}")
    print(f"time: {elapsed:.1f} s with {args.jobs} jobs; slowest file {max((r.seconds for r in results), default=0):.2f} s")
    if args.verbose:
        for r in rewritten:
            print(f"  rewritten: {r.path}  " + " ".join(f"{c}x{n}" for c, n in sorted(r.fixed.items())))
        for r in unparsable:
            print(f"  unparsable: {r.path}: {r.detail}")
    for r in failed:
        print(f"FAIL {r.path}: {r.detail}")
    for problem in extra:
        print(f"FAIL {problem}")
    return 1 if failed or extra else 0


if __name__ == "__main__":
    sys.exit(main())
