"""Where each finding is and what it says: snapshots of every rule example and golden file.

``tests/rules/snapshots/<CODE>.txt`` holds, for each INVALID/VALID example of the rule and each
``tests/golden/<CODE>/*.in.py``, every finding as ``line:col-end_line:end_col CODE [fix] message``
(columns 1-based, as the CLI prints them), with its fix title (or why it has no fix) on the next line. Every run of the
suite has its own hash seed, so a message or title that depends on set order fails here. The test compares strictly; after a deliberate change
to a rule's positions or messages, regenerate with::

    GRADFIX_UPDATE_SNAPSHOTS=1 python -m pytest tests/rules/test_snapshots.py

and review the diff of the snapshot files like any other change. A rule added without a
snapshot file fails until one is generated.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gradfix import Settings, check
from gradfix.rules import all_rules

SNAPSHOTS = Path(__file__).parent / "snapshots"
GOLDEN = Path(__file__).parents[1] / "golden"
UPDATE = os.environ.get("GRADFIX_UPDATE_SNAPSHOTS") == "1"


def _golden_settings(path: Path, code: str) -> Settings:
    options: dict[str, dict[str, str]] = {}
    first = path.read_text(encoding="utf-8").split("\n", 1)[0]
    if first.startswith("# golden:"):
        for item in first[len("# golden:"):].split():
            key, value = item.split("=", 1)
            rule, name = key.split(".", 1)
            options.setdefault(rule, {})[name] = value
    return Settings(select=(code,), unsafe_fixes=True, rule_options=options)


def _lines(findings) -> list[str]:
    out = []
    for f in findings:
        s = f.span
        fix = f" [{f.fix.value}]" if f.fix is not None else ""
        out.append(f"{s.line}:{s.col + 1}-{s.end_line}:{s.end_col + 1} {f.code}{fix} {f.message}")
        if f.fix_title:
            out.append(f"    fix: {f.fix_title}")
        if f.no_fix:
            out.append(f"    no fix: {f.no_fix}")
    return out or ["(no findings)"]


def snapshot(rule) -> str:
    sections = []
    for kind in ("INVALID", "VALID"):
        for index, example in enumerate(getattr(rule, kind)):
            settings = Settings(select=(rule.code,), unsafe_fixes=True, rule_options={rule.code: dict(example.options)})
            findings = [f for f in check(example.code, settings=settings) if f.code == rule.code]
            sections.append([f"## {kind} {index}", *_lines(findings)])
    for case in sorted((GOLDEN / rule.code).glob("*.in.py")):
        findings = check(case.read_bytes(), str(case), _golden_settings(case, rule.code))
        sections.append([f"## golden {case.name[: -len('.in.py')]}", *_lines(findings)])
    return "".join("\n".join(section) + "\n\n" for section in sections)


def _params():
    for rule in all_rules():
        yield pytest.param(rule, id=rule.code)


@pytest.mark.parametrize("rule", list(_params()))
def test_findings_match_the_snapshot(rule):
    path = SNAPSHOTS / f"{rule.code}.txt"
    actual = snapshot(rule)
    if UPDATE:
        SNAPSHOTS.mkdir(exist_ok=True)
        path.write_text(actual, encoding="utf-8")
        return
    assert path.exists(), f"no snapshot for {rule.code}: run with GRADFIX_UPDATE_SNAPSHOTS=1 and review it"
    _compare(path, actual)


def test_every_snapshot_belongs_to_a_rule():
    codes = {r.code for r in all_rules()}
    stale = sorted(p.name for p in SNAPSHOTS.glob("*.txt") if p.stem not in codes)
    assert not stale, f"snapshots of rules that no longer exist: {stale}"


def _compare(path: Path, actual: str) -> None:
    expected = path.read_text(encoding="utf-8")
    assert actual == expected, f"findings differ from {path.name} (GRADFIX_UPDATE_SNAPSHOTS=1 regenerates)"


def test_a_moved_column_or_a_changed_message_is_caught(tmp_path):
    # The harness itself: a finding one column off, or reworded, must fail the comparison.
    rule = all_rules()[0]
    text = snapshot(rule)
    first = next(line for line in text.splitlines() if line[:1].isdigit())
    position, rest = first.split(" ", 1)
    line, col_and_end = position.split(":", 1)
    col, end = col_and_end.split("-", 1)
    for changed in (f"{line}:{int(col) + 1}-{end} {rest}", f"{position} {rest}!"):
        (tmp_path / "s.txt").write_text(text.replace(first, changed, 1))
        with pytest.raises(AssertionError, match="findings differ"):
            _compare(tmp_path / "s.txt", text)
    (tmp_path / "s.txt").write_text(text)
    _compare(tmp_path / "s.txt", text)
