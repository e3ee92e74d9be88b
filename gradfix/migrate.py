"""Verified migration: apply fixes, run the user's own check, keep only what passes.

``gradfix --apply --verify-cmd "pytest -x" PATH``:

1. run the command on the untouched code; it must pass (else stop: nothing is changed);
2. apply every wanted fix and run the command again; if it passes, done;
3. otherwise restore the original files and apply the fixes rule by rule (in code order),
   running the command after each rule: a rule whose fixes make it fail is reverted, with the
   tail of the command's output as the reason, and the next rule starts from what was kept.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field, replace
from typing import Callable, Sequence

from gradfix.engine import Job
from gradfix.model import FileResult
from gradfix.writer import WriteError, write_atomic

Runner = Callable[[Sequence[Job], bool], list[FileResult]]


@dataclass
class CommandRun:
    ok: bool
    tail: str


@dataclass
class RuleOutcome:
    code: str
    fixes: int
    files: int
    kept: bool
    reason: str = ""


@dataclass
class MigrationReport:
    baseline_ok: bool
    baseline_tail: str = ""
    outcomes: list[RuleOutcome] = field(default_factory=list)
    all_at_once: bool = False  # every fix passed together, no bisection needed
    errors: list[str] = field(default_factory=list)


def run_command(command: str, timeout: float | None = None) -> CommandRun:
    proc = subprocess.run(command, shell=True, capture_output=True, text=True, errors="replace", timeout=timeout)
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    return CommandRun(proc.returncode == 0, "\n".join(lines[-5:]))


def _write(results: Sequence[FileResult], jobs: Sequence[Job], errors: list[str]) -> dict[str, bytes]:
    """Write changed files; returns path -> original bytes of what was written."""
    written = {}
    for result, job in zip(results, jobs):
        if result.changed:
            try:
                write_atomic(job.path, result.new_source, result.old_source, result.read_as)
                written[job.path] = result.old_source
            except WriteError as exc:
                errors.append(str(exc))
    return written


def _restore(written: dict[str, bytes], current: Callable[[str], bytes], errors: list[str]) -> None:
    for path, original in written.items():
        try:
            write_atomic(path, original, current(path))
        except WriteError as exc:
            errors.append(str(exc))


def _read(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def migrate(jobs: Sequence[Job], command: str, run_jobs: Runner, check_cmd: Callable[[str], CommandRun] = run_command) -> MigrationReport:
    baseline = check_cmd(command)
    report = MigrationReport(baseline.ok, baseline.tail)
    if not baseline.ok:
        return report
    results = run_jobs(jobs, True)
    codes = sorted({o.finding.code for r in results for o in r.findings if o.applied})
    if not codes:
        return report
    written = _write(results, jobs, report.errors)
    if check_cmd(command).ok:
        report.all_at_once = True
        for code in codes:
            applied = [(r, o) for r in results for o in r.findings if o.applied and o.finding.code == code]
            report.outcomes.append(RuleOutcome(code, len(applied), len({r.path for r, _ in applied}), True))
        return report
    _restore(written, _read, report.errors)
    for code in codes:
        rule_jobs = [replace(j, settings=replace(j.settings, select=(code,), extend_select=())) for j in jobs]
        rule_results = run_jobs(rule_jobs, True)
        applied = [(r, o) for r in rule_results for o in r.findings if o.applied]
        if not applied:
            continue
        written = _write(rule_results, rule_jobs, report.errors)
        outcome = check_cmd(command)
        files = len({r.path for r, _ in applied})
        if outcome.ok:
            report.outcomes.append(RuleOutcome(code, len(applied), files, True))
        else:
            _restore(written, _read, report.errors)
            report.outcomes.append(RuleOutcome(code, len(applied), files, False, outcome.tail))
    return report


def render(report: MigrationReport, command: str) -> list[str]:
    if not report.baseline_ok:
        return [
            f"gradfix: `{command}` fails before any fix; nothing was changed. Make it pass first.",
            *("  " + line for line in report.baseline_tail.splitlines()),
        ]
    if not report.outcomes:
        return ["No fixes to verify."]
    lines = [
        "All fixes applied together and `{}` passed.".format(command)
        if report.all_at_once
        else f"`{command}` failed with all fixes; applied rule by rule:"
    ]
    for o in report.outcomes:
        verdict = "kept" if o.kept else "REVERTED"
        lines.append(f"  {o.code}: {verdict} ({o.fixes} fix{'es' * (o.fixes != 1)} in {o.files} file{'s' * (o.files != 1)})")
        if o.reason:
            lines += ["      " + line for line in o.reason.splitlines()]
    return lines
