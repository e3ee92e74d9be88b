"""The README and docs/ say what the code does: generated rule pages are current, links resolve,
every flag they name exists, and the quick start's first line behaves as the README says."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gradfix.cli import app

ROOT = Path(__file__).parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# Flags of other tools that the docs show next to gradfix's.
OTHER_TOOLS = {"--index-url", "--extra-index-url", "--upgrade"}


def test_generated_rule_pages_are_up_to_date():
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_docs.py"), "--check"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_rule_page_is_what_explain_prints():
    page = (ROOT / "docs" / "rules" / "GF203.md").read_text(encoding="utf-8")
    explained = CliRunner().invoke(app, ["explain", "GF203"], env={"NO_COLOR": "1"}).stdout
    assert page.endswith(explained)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_relative_links_resolve(page: Path):
    for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", page.read_text(encoding="utf-8")):
        assert (page.parent / target).exists(), f"{page.name} links to missing {target}"


def test_every_documented_flag_exists():
    helps = "".join(
        CliRunner().invoke(app, [*command, "-h"], env={"COLUMNS": "200"}).stdout
        for command in (["check"], ["rules"], ["explain"], ["verify"], ["server"], [])
    )
    for page in PAGES:
        if page.name in ("performance.md", "testing.md"):  # flags of bench/, pytest and scripts/, not gradfix's
            continue
        for flag in set(re.findall(r"(?<![\w-])--[a-z][a-z-]*[a-z]", page.read_text(encoding="utf-8"))):
            if flag not in OTHER_TOOLS:
                assert flag in helps, f"{page.name} documents {flag}, which no gradfix command has"


def test_quick_start_first_line_exits_1_with_a_patch_as_documented(tmp_path: Path):
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    first = next(line for line in readme.splitlines() if line.startswith("python3 -m venv") and "pip install ." in line)
    command = first.split("&&")[-1].split()  # gradfix --diff --unsafe-fixes fixtures/
    assert command[0] == "gradfix" and "exits with status 1 by design" in readme
    env = {k: v for k, v in os.environ.items() if k != "FORCE_COLOR"}
    proc = subprocess.run([sys.executable, "-m", "gradfix", *command[1:]], cwd=ROOT, capture_output=True, text=True, env=env)
    assert proc.returncode == 1
    assert proc.stdout.startswith("--- a/fixtures/") and "+++ b/fixtures/" in proc.stdout


def test_readme_has_the_sections_a_newcomer_looks_for():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for heading in ("## Quick start", "## Performance, cache and big repositories", "## Testing", "## Security boundaries"):
        assert f"\n{heading}\n" in readme, heading
