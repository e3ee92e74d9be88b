"""Interactive review: show each fix as a diff hunk and ask what to do with it.

Answers: ``y`` apply, ``n`` skip, ``a`` apply this one and every later fix of the same rule,
``d`` skip every later fix of the same rule, ``q`` quit (write nothing more). The chosen fixes
of a file are applied together in one pass (edits are keyed on original nodes) and written
atomically, file by file. Each hunk shown is the finding's own edit, recorded by the engine
(``run_jobs(want_edits=True)``): exactly what that fix alone changes, read off a few fix runs
per file, not one run per finding. Ctrl-C stops at once and says which files were already written.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from typing import Callable, Sequence

from rich.console import Console
from rich.text import Text

from gradfix.diff import unified_diff
from gradfix.engine import Job, decode_source, fix_findings
from gradfix.model import FileResult, apply_text_edits
from gradfix.report import print_diff
from gradfix.writer import WriteError, write_atomic

CHOICES = {"y": "apply", "n": "skip", "a": "apply all of this rule", "d": "skip all of this rule", "q": "quit"}


PROMPT = ", ".join(f"{k} = {v}" for k, v in CHOICES.items()) + "  [y/n/a/d/q]"


def ask(console: Console, read: Callable[[], str]) -> str:
    """One answer from the user; end of input counts as quit."""
    while True:
        console.print(Text(PROMPT, style="bold"))
        line = read()
        if not line:
            return "q"
        answer = line.strip()[:1].lower()
        if answer in CHOICES:
            return answer
        console.print(Text("please answer one of: " + ", ".join(CHOICES)))


def review(
    results: Sequence[FileResult],
    jobs: Sequence[Job],
    console: Console | None = None,
    read: Callable[[], str] | None = None,
) -> list[str]:
    """Ask about each fix, write the chosen ones; returns error messages. Marks applied fixes.

    On Ctrl-C, prints the files written so far (each complete; nothing else was changed) and
    raises KeyboardInterrupt again.
    """
    console = console or Console()
    read = read or (lambda: sys.stdin.readline())
    decided: dict[str, bool] = {}  # rule code -> apply all / skip all
    errors: list[str] = []
    written: list[str] = []
    try:
        for result, job in zip(results, jobs):
            if result.old_source is None or result.path.endswith(".ipynb"):
                continue
            chosen, quitting = _ask_file(result, console, read, decided)
            if any(chosen):
                _write_chosen(result, job, chosen, errors, written)
            if quitting:
                break
    except KeyboardInterrupt:
        where = ", ".join(written) if written else "none"
        console.print(Text(f"\ninterrupted: files already written (complete): {where}; no other file was changed"))
        raise
    return errors


def _ask_file(result: FileResult, console: Console, read: Callable[[], str], decided: dict[str, bool]):
    """The findings of one file whose fixes the user chose (None elsewhere), and whether to quit."""
    chosen = [None] * len(result.findings)
    text = None
    for index, outcome in enumerate(result.findings):
        finding = outcome.finding
        # Interactive review offers unsafe fixes too: each one is confirmed by a person.
        if finding.fix is None or not outcome.edit:
            continue
        if finding.code in decided:
            chosen[index] = finding if decided[finding.code] else None
            continue
        text = text if text is not None else decode_source(result.old_source)
        console.print(
            Text(f"\n{result.path}:{finding.span.line}:{finding.span.col + 1}: {finding.code} ({finding.fix.value} fix) {finding.message}")
        )
        print_diff(console, unified_diff(text.encode("utf-8"), apply_text_edits(text, outcome.edit).encode("utf-8"), result.path))
        answer = ask(console, read)
        if answer == "q":
            return chosen, True
        if answer in ("a", "d"):
            decided[finding.code] = answer == "a"
        if answer in ("y", "a"):
            chosen[index] = finding
    return chosen, False


def _write_chosen(result: FileResult, job: Job, chosen: list, errors: list[str], written: list[str]) -> None:
    settings = replace(job.settings, unsafe_fixes=True)
    run = fix_findings(result.old_source, chosen, settings, job.path)
    if run is None or run.source == result.old_source:
        return
    try:
        write_atomic(job.path, run.source, result.old_source, result.read_as)
    except WriteError as exc:
        errors.append(str(exc))
        return
    written.append(result.path)
    result.new_source = run.source
    for index in run.applied:
        result.findings[index].applied = True
