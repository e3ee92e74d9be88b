"""Interactive review: show each fix as a diff hunk and ask what to do with it.

Answers: ``y`` apply, ``n`` skip, ``a`` apply this one and every later fix of the same rule,
``d`` skip every later fix of the same rule, ``q`` quit (write nothing more). The chosen fixes
of a file are applied together in one pass (edits are keyed on original nodes) and written
atomically, file by file.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from typing import Callable, Sequence

from rich.console import Console
from rich.text import Text

from gradfix.diff import unified_diff
from gradfix.engine import Job, fix_findings
from gradfix.model import FileResult
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
    """Ask about each fix, write the chosen ones; returns error messages. Marks applied fixes."""
    console = console or Console()
    read = read or (lambda: sys.stdin.readline())
    decided: dict[str, bool] = {}  # rule code -> apply all / skip all
    errors: list[str] = []
    quitting = False
    for result, job in zip(results, jobs):
        if quitting or result.old_source is None or result.path.endswith(".ipynb"):
            continue
        chosen = [None] * len(result.findings)
        settings = replace(job.settings, unsafe_fixes=True)
        for index, outcome in enumerate(result.findings):
            finding = outcome.finding
            # Interactive review offers unsafe fixes too: each one is confirmed by a person.
            if finding.fix is None:
                continue
            if finding.code in decided:
                chosen[index] = finding if decided[finding.code] else None
                continue
            alone = fix_findings(result.old_source, [finding], settings, job.path)
            if alone is None or alone.source == result.old_source:
                continue
            safety = finding.fix.value if finding.fix else ""
            console.print(
                Text(f"\n{result.path}:{finding.span.line}:{finding.span.col + 1}: {finding.code} ({safety} fix) {finding.message}")
            )
            print_diff(console, unified_diff(result.old_source, alone.source, result.path))
            answer = ask(console, read)
            if answer == "q":
                quitting = True
                break
            if answer in ("a", "d"):
                decided[finding.code] = answer == "a"
            if answer in ("y", "a"):
                chosen[index] = finding
        if not any(chosen):
            continue
        run = fix_findings(result.old_source, chosen, settings, job.path)
        if run is None or run.source == result.old_source:
            continue
        try:
            write_atomic(job.path, run.source, result.old_source, result.read_as)
        except WriteError as exc:
            errors.append(str(exc))
            continue
        result.new_source = run.source
        for index in run.applied:
            result.findings[index].applied = True
    return errors
