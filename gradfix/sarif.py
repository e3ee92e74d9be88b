"""SARIF 2.1.0 output (GitHub code scanning) and GitHub workflow annotations.

Each fixable finding carries a SARIF ``fix``: the replacements that its own fix makes in the
original source, recorded by the engine when it ran (``FixOutcome.edit``: exactly what that fix
alone changes, read off a few fix runs per file however many findings it has).
"""

from __future__ import annotations

import bisect
import json
import re
from typing import Sequence

from gradfix import __version__
from gradfix.engine import decode_source
from gradfix.model import FileResult, FixOutcome, FixSafety
from gradfix.rules import all_rules

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
INFO_URI = "https://github.com/gradfix/gradfix"


def _rule_descriptor(rule) -> dict:
    doc = rule.doc()
    return {
        "id": rule.code,
        "name": rule.name,
        "shortDescription": {"text": rule.summary},
        "fullDescription": {"text": rule.doc_sections().get("What it does", rule.summary)},
        "help": {"text": doc, "markdown": doc},
        "defaultConfiguration": {"level": "warning", "enabled": rule.default_enabled},
        "properties": {"fixSafety": rule.fix_safety.value if rule.fix_safety else "none"},
    }


class _Lines:
    """Line and column (1-based) of character offsets in one text."""

    def __init__(self, text: str):
        self.starts = [0] + [m.end() for m in re.finditer("\n", text)]

    def at(self, offset: int) -> tuple[int, int]:
        line = bisect.bisect_right(self.starts, offset)
        return line, offset - self.starts[line - 1] + 1

    def region(self, start: int, end: int) -> dict:
        (sl, sc), (el, ec) = self.at(start), self.at(end)
        return {"charOffset": start, "charLength": end - start, "startLine": sl, "startColumn": sc, "endLine": el, "endColumn": ec}


def _fix_for(result: FileResult, outcome: FixOutcome, lines: _Lines | None) -> dict | None:
    finding = outcome.finding
    if finding.fix is None or not outcome.edit or lines is None or finding.cell is not None:
        return None  # notebook fixes are not expressed as JSON text replacements
    return {
        "description": {"text": f"{finding.fix_title or finding.code} ({finding.fix.value} fix)"},
        "artifactChanges": [
            {
                "artifactLocation": {"uri": result.path},
                "replacements": [
                    {"deletedRegion": lines.region(e.start, e.end), "insertedContent": {"text": e.new}} for e in outcome.edit
                ],
            }
        ],
    }


def sarif_report(results: Sequence[FileResult]) -> str:
    """A SARIF 2.1.0 log; fixes come from each finding's recorded edit (``run_jobs(want_edits=True)``)."""
    rules = list(all_rules())
    index = {r.code: i for i, r in enumerate(rules)}
    sarif_results = []
    for result in sorted(results, key=lambda r: r.path):
        lines = None
        if result.old_source is not None and any(o.edit for o in result.findings):
            lines = _Lines(decode_source(result.old_source))
        for outcome in result.findings:
            f = outcome.finding
            entry = {
                "ruleId": f.code,
                "ruleIndex": index[f.code],
                "level": "warning",
                "message": {"text": f.message},
                "locations": [
                    {
                        "physicalLocation": {
                            "artifactLocation": {"uri": result.path},
                            "region": {
                                "startLine": f.span.line,
                                "startColumn": f.span.col + 1,
                                "endLine": f.span.end_line,
                                "endColumn": f.span.end_col + 1,
                            },
                        }
                    }
                ],
                "properties": {
                    "fixSafety": f.fix.value if f.fix else "none",
                    "fixApplied": outcome.applied,
                    **({"noFix": why} if (why := outcome.refused or f.no_fix) else {}),
                    **({"notebookCell": f.cell} if f.cell is not None else {}),
                },
            }
            fix = _fix_for(result, outcome, lines)
            if fix is not None:
                entry["fixes"] = [fix]
            sarif_results.append(entry)
    invocations = [
        {
            "executionSuccessful": not any(r.error for r in results),
            "toolExecutionNotifications": [
                {"level": "error", "message": {"text": f"{r.path}: {r.error}"}} for r in results if r.error
            ],
        }
    ]
    document = {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "gradfix",
                        "version": __version__,
                        "informationUri": INFO_URI,
                        "rules": [_rule_descriptor(r) for r in rules],
                    }
                },
                "columnKind": "unicodeCodePoints",
                "invocations": invocations,
                "results": sarif_results,
            }
        ],
    }
    return json.dumps(document, indent=2)


def _escape(value: str, prop: bool = False) -> str:
    value = value.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    if prop:
        value = value.replace(":", "%3A").replace(",", "%2C")
    return value


def github_report(results: Sequence[FileResult]) -> list[str]:
    """GitHub Actions workflow commands: one ``::warning``/``::error`` line per finding.

    Findings that ``--apply`` fixed are not annotated: the code they pointed at is gone.
    """
    lines = []
    for result in sorted(results, key=lambda r: r.path):
        if result.error:
            where = re.match(r"(\d+):(\d+): (.*)", result.error, re.S)
            props = f"file={_escape(result.path, True)}" + (f",line={where[1]},col={where[2]}" if where else "")
            message = where[3] if where else result.error
            lines.append(f"::error {props},title=gradfix::{_escape(message)}")
        for outcome in result.findings:
            if outcome.applied:
                continue
            f = outcome.finding
            fix = {FixSafety.SAFE: " (safe fix available)", FixSafety.UNSAFE: " (unsafe fix available)"}.get(f.fix, "")
            props = (
                f"file={_escape(result.path, True)},line={f.span.line},col={f.span.col + 1},"
                f"endLine={f.span.end_line},endColumn={f.span.end_col + 1},title={f.code} {_escape(f.name, True)}"
            )
            cell = "" if f.cell is None else f"cell {f.cell}, line {f.span.line}: "  # notebooks: lines are the cell's
            lines.append(f"::warning {props}::{_escape(cell + f.message + fix)}")
    return lines
