"""SARIF 2.1.0 output (GitHub code scanning) and GitHub workflow annotations.

Each fixable finding carries a SARIF ``fix``: the one replacement that its own fix makes,
computed by applying that finding's fix alone to the original source.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from typing import Sequence

from gradfix import __version__
from gradfix.engine import decode_source, fix_findings
from gradfix.model import FileResult, Finding, FixSafety, Settings
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


def _replacement(old: str, new: str) -> tuple[dict, str] | None:
    """The smallest region of ``old`` that differs from ``new``, and its new text."""
    if old == new:
        return None
    start = 0
    limit = min(len(old), len(new))
    while start < limit and old[start] == new[start]:
        start += 1
    end_old, end_new = len(old), len(new)
    while end_old > start and end_new > start and old[end_old - 1] == new[end_new - 1]:
        end_old, end_new = end_old - 1, end_new - 1
    return {"charOffset": start, "charLength": end_old - start, **_line_col(old, start, end_old)}, new[start:end_new]


def _line_col(text: str, start: int, end: int) -> dict:
    def at(offset: int) -> tuple[int, int]:
        line = text.count("\n", 0, offset) + 1
        return line, offset - (text.rfind("\n", 0, offset) + 1) + 1

    (sl, sc), (el, ec) = at(start), at(end)
    return {"startLine": sl, "startColumn": sc, "endLine": el, "endColumn": ec}


def _fix_for(result: FileResult, finding: Finding, settings: Settings) -> dict | None:
    if finding.fix is None or result.old_source is None or finding.cell is not None:
        return None  # notebook fixes are not expressed as JSON text replacements
    run = fix_findings(result.old_source, [finding], replace(settings, unsafe_fixes=True), result.path)
    if run is None or 0 not in run.applied:
        return None
    old, new = decode_source(result.old_source), decode_source(run.source)
    change = _replacement(old, new)
    if change is None:
        return None
    region, text = change
    return {
        "description": {"text": f"{finding.fix_title or finding.code} ({finding.fix.value} fix)"},
        "artifactChanges": [
            {
                "artifactLocation": {"uri": result.path},
                "replacements": [{"deletedRegion": region, "insertedContent": {"text": text}}],
            }
        ],
    }


def sarif_report(results: Sequence[FileResult], settings: dict[str, Settings]) -> str:
    """A SARIF 2.1.0 log; ``settings`` maps each result's path to the settings it ran with."""
    rules = list(all_rules())
    index = {r.code: i for i, r in enumerate(rules)}
    sarif_results = []
    for result in sorted(results, key=lambda r: r.path):
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
                    **({"notebookCell": f.cell} if f.cell is not None else {}),
                },
            }
            fix = _fix_for(result, f, settings.get(result.path, Settings()))
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
