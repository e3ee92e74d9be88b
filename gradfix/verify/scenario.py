"""Finding scenarios and reading their declaration without running them (no torch here).

A scenario is a Python file that defines, at module level::

    GRADFIX_VERIFY = {
        "rule": "GF103",                      # the rule whose fix is verified
        "expect": "intended",                 # "equivalent" | "intended" | "diagnosis"
        "roles": {"frozen": "model.encoder"}, # names the rule's contract refers to (optional)
        "styles": ["detach", "narrow"],       # option values to verify (optional: all)
        "bench": "train_step",                # call measured by bench/memory_time.py (optional)
    }

    def gradfix_scenario(probe):
        ...                                   # build models, then probe.watch(...), probe.call(...)

See ``fixtures/README.md`` for the whole convention.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

EXPECT = {
    "equivalent": "equivalent",
    "intended": "intended change confirmed",
    "diagnosis": "diagnosis confirmed",
}


class ScenarioError(Exception):
    pass


@dataclass(frozen=True)
class Scenario:
    path: Path
    rule: str
    expect: str  # a verdict string
    roles: dict[str, Any] = field(default_factory=dict)
    styles: tuple[str, ...] | None = None
    doc: str = ""
    bench: str | None = None  # the call whose memory/time bench/memory_time.py reports

    @property
    def name(self) -> str:
        return self.path.stem


def read_scenario(path: Path) -> Scenario | None:
    """The scenario declared in ``path``, None if the file declares none."""
    source = path.read_text(encoding="utf-8")
    if "GRADFIX_VERIFY" not in source:
        return None
    tree = ast.parse(source, filename=str(path))
    declared = None
    has_entry = False
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "GRADFIX_VERIFY" for t in node.targets):
            try:
                declared = ast.literal_eval(node.value)
            except ValueError as exc:
                raise ScenarioError(f"{path}: GRADFIX_VERIFY must be a literal dict ({exc})") from None
        if isinstance(node, ast.FunctionDef) and node.name == "gradfix_scenario":
            has_entry = True
    if declared is None:
        return None
    if not isinstance(declared, dict) or "rule" not in declared:
        raise ScenarioError(f"{path}: GRADFIX_VERIFY needs at least a 'rule' key")
    if not has_entry:
        raise ScenarioError(f"{path}: no `def gradfix_scenario(probe):` entry point")
    expect = declared.get("expect", "equivalent")
    if expect not in EXPECT:
        raise ScenarioError(f"{path}: expect must be one of {', '.join(EXPECT)}, not {expect!r}")
    styles = declared.get("styles")
    return Scenario(
        path=path,
        rule=str(declared["rule"]).upper(),
        expect=EXPECT[expect],
        roles=dict(declared.get("roles", {})),
        styles=tuple(styles) if styles else None,
        doc=(ast.get_docstring(tree) or "").split("\n")[0],
        bench=declared.get("bench"),
    )


def shipped_fixtures() -> Path | None:
    """The verification scenarios: the package data ``gradfix/fixtures`` of an installed
    gradfix (setup.py ships the repository's ``fixtures/`` there), else ``fixtures/`` beside
    the ``gradfix`` package (a checkout or an editable install). Never the current folder:
    ``gradfix verify`` means the same scenarios wherever it is run."""
    package = Path(__file__).resolve().parent.parent
    for candidate in (package / "fixtures", package.parent / "fixtures"):
        if candidate.is_dir():
            return candidate
    return None


def discover(paths: list[Path]) -> list[Scenario]:
    found: list[Scenario] = []
    for path in paths:
        if not path.exists():
            raise ScenarioError(f"{path}: no such file or folder")
        files = [path] if path.is_file() else sorted(p for p in path.rglob("*.py") if "__pycache__" not in p.parts)
        for file in files:
            scenario = read_scenario(file)
            if scenario is not None:
                found.append(scenario)
    return found
