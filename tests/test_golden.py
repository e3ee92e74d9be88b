"""Golden before/after files: ``tests/golden/<CODE>/<case>.in.py`` -> ``<case>.out.py``.

A first line ``# golden: GF202.style=block GF104.style=restore`` sets rule options. All fixes of
the rule named by the folder are applied, unsafe ones included; the result must equal the
``.out.py`` file byte for byte, compile, and stay unchanged on a second run.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gradfix import Settings, check, fix

GOLDEN = Path(__file__).parent / "golden"
CASES = sorted(GOLDEN.glob("*/*.in.py"))


def _settings(path: Path) -> Settings:
    code = path.parent.name
    options: dict[str, dict[str, str]] = {}
    first = path.read_text(encoding="utf-8").split("\n", 1)[0]
    match = re.match(r"#\s*golden:\s*(.*)", first)
    for item in (match.group(1).split() if match else []):
        key, value = item.split("=", 1)
        rule, name = key.split(".", 1)
        options.setdefault(rule, {})[name] = value
    return Settings(select=(code,), unsafe_fixes=True, rule_options=options)


def test_golden_cases_exist():
    assert CASES, "no golden files found"


@pytest.mark.parametrize("case", CASES, ids=lambda p: f"{p.parent.name}/{p.name[:-6]}")
def test_golden(case: Path):
    expected_path = case.with_name(case.name[: -len(".in.py")] + ".out.py")
    settings = _settings(case)
    source = case.read_bytes()
    assert check(source, str(case), settings), f"{case.name}: the rule found nothing"
    fixed = fix(source, str(case), settings)
    assert fixed == expected_path.read_bytes()
    compile(fixed, str(expected_path), "exec")
    assert fix(fixed, str(expected_path), settings) == fixed, "not idempotent"
