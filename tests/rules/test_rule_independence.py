"""Rules never import each other: what two rules share lives in gradfix/analysis/."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

RULES_DIR = Path(__file__).resolve().parents[2] / "gradfix" / "rules"
RULE_FILES = sorted(RULES_DIR.glob("gf*.py"))


def test_rule_files_found():
    assert len(RULE_FILES) >= 17


@pytest.mark.parametrize("path", RULE_FILES, ids=lambda p: getattr(p, "stem", None))
def test_rule_imports_no_other_rule(path):
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            modules = [node.module or ""]
        elif isinstance(node, ast.Import):
            modules = [a.name for a in node.names]
        else:
            continue
        for module in modules:
            assert not module.startswith("gradfix.rules"), f"{path.name}:{node.lineno} imports {module}"
