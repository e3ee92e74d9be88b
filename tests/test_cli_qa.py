"""What a new user hit while trying every CLI surface (QA pass): each test pins one fix."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from gradfix.cli import main

GF101 = "import torch\n\n\ndef evaluate(model, x):\n    with torch.no_grad:\n        return model(x)\n"
# GF101 (safe) plus GF105 (unsafe): `train` trains a model this file put into eval mode.
SAFE_AND_UNSAFE = (
    "import torch\n\n\n"
    "def evaluate(model, x):\n    model.eval()\n    with torch.no_grad:\n        return model(x)\n\n\n"
    "def train(model, opt, x, y):\n    loss = ((model(x) - y) ** 2).mean()\n    opt.zero_grad()\n"
    "    loss.backward()\n    opt.step()\n"
)
GF205 = "import torch\n\n\ndef f(x):\n    with torch.set_grad_enabled(False):\n        return x * 2\n"


def run_cli(args, capsys, cwd: Path, monkeypatch):
    monkeypatch.chdir(cwd)
    with pytest.raises(SystemExit) as exit_info:
        main(list(args))
    out, err = capsys.readouterr()
    return exit_info.value.code, out, err


def test_json_output_carries_the_file_that_was_not_checked(tmp_path, capsys, monkeypatch):
    (tmp_path / "py2.py").write_text('print "hello"\n')
    (tmp_path / "good.py").write_text(GF101)
    code, out, err = run_cli(["--format", "json", "."], capsys, tmp_path, monkeypatch)
    assert code == 2
    rows = json.loads(out)  # stdout stays pure json, with a row for the file that does not parse
    assert [(row["path"], row["code"]) for row in rows] == [("good.py", "GF101"), ("py2.py", None)]
    assert rows[1]["name"] == "syntax-error" and rows[1]["line"] == 1 and "syntax error" in rows[1]["message"]
    assert "py2.py:1:" in err and "syntax error" in err and "Traceback" not in err


def test_sarif_output_says_on_stderr_why_a_file_was_not_checked(tmp_path, capsys, monkeypatch):
    (tmp_path / "py2.py").write_text('print "hello"\n')
    code, out, err = run_cli(["--format", "sarif", "."], capsys, tmp_path, monkeypatch)
    assert code == 2
    json.loads(out)
    assert "py2.py:1:" in err and "syntax error" in err


@pytest.fixture
def nested(tmp_path: Path) -> Path:
    (tmp_path / "pkg" / "legacy").mkdir(parents=True)
    (tmp_path / "pkg" / "a.py").write_text(GF101)
    (tmp_path / "pkg" / "legacy" / "b.py").write_text(GF101)
    return tmp_path


@pytest.mark.parametrize("cwd, target", [(".", "pkg"), ("pkg", "."), (".", ".")])
def test_config_exclude_is_relative_to_the_pyproject_folder(nested, capsys, monkeypatch, cwd, target):
    (nested / "pyproject.toml").write_text('[tool.gradfix]\nexclude = ["pkg/legacy/**"]\n')
    code, out, _ = run_cli([target], capsys, nested / cwd, monkeypatch)
    assert code == 1
    assert "a.py:5:10: GF101" in out and "legacy" not in out


def test_config_exclude_anchored_pattern_does_not_match_a_subfolder(nested, capsys, monkeypatch):
    # `legacy/**` is anchored at the pyproject's folder: pkg/legacy is not excluded, even when
    # gradfix walks pkg/ (it used to be matched relative to the walked folder).
    (nested / "pyproject.toml").write_text('[tool.gradfix]\nexclude = ["legacy/**"]\n')
    code, out, _ = run_cli(["pkg"], capsys, nested, monkeypatch)
    assert "pkg/legacy/b.py:5:10: GF101" in out


def test_config_exclude_does_not_hide_a_file_named_on_the_command_line(nested, capsys, monkeypatch):
    (nested / "pyproject.toml").write_text('[tool.gradfix]\nexclude = ["pkg/legacy/**"]\n')
    code, out, _ = run_cli(["pkg/legacy/b.py"], capsys, nested, monkeypatch)
    assert code == 1 and "pkg/legacy/b.py:5:10: GF101" in out


@pytest.mark.parametrize("args", [["--ignore", "ALL"], ["--ignore", "all"]])
def test_ignore_all_ignores_every_rule(tmp_path, capsys, monkeypatch, args):
    (tmp_path / "a.py").write_text(GF101)
    code, out, _ = run_cli([*args, "a.py"], capsys, tmp_path, monkeypatch)
    assert code == 0 and "GF101" not in out and "All checks passed!" in out


def test_config_ignore_all(tmp_path, capsys, monkeypatch):
    (tmp_path / "pyproject.toml").write_text('[tool.gradfix]\nignore = ["ALL"]\n')
    (tmp_path / "a.py").write_text(GF101)
    code, out, _ = run_cli(["."], capsys, tmp_path, monkeypatch)
    assert code == 0 and "GF101" not in out


def test_extend_select_all_adds_off_by_default_rules(tmp_path, capsys, monkeypatch):
    (tmp_path / "a.py").write_text(GF205)
    code, out, _ = run_cli(["a.py"], capsys, tmp_path, monkeypatch)
    assert code == 0
    code, out, _ = run_cli(["--extend-select", "ALL", "a.py"], capsys, tmp_path, monkeypatch)
    assert code == 1 and "a.py:5:10: GF205" in out


class _Tty:
    def isatty(self) -> bool:
        return True


def test_interactive_report_marks_unsafe_fixes_as_a_plain_run_would(tmp_path, capsys, monkeypatch):
    import gradfix.review

    (tmp_path / "a.py").write_text(SAFE_AND_UNSAFE)
    monkeypatch.setattr(gradfix.review, "review", lambda results, jobs: [])  # the user quits at once
    monkeypatch.setattr(sys, "stdin", _Tty())
    code, out, _ = run_cli(["-i", "a.py"], capsys, tmp_path, monkeypatch)
    assert code == 1
    assert "GF101 [*]" in out and "GF105 [unsafe]" in out
    assert "[*] 1 fixable with --apply" in out and "1 more fixable with --unsafe-fixes" in out


def test_github_annotations_leave_out_what_apply_fixed(tmp_path, capsys, monkeypatch):
    (tmp_path / "a.py").write_text(SAFE_AND_UNSAFE)
    code, out, _ = run_cli(["--apply", "--format", "github", "a.py"], capsys, tmp_path, monkeypatch)
    assert code == 1
    lines = out.splitlines()
    assert len(lines) == 1 and "title=GF105" in lines[0]  # GF101 was fixed: nothing to annotate
    assert "with torch.no_grad():" in (tmp_path / "a.py").read_text()


def test_github_annotations_name_the_notebook_cell(tmp_path, capsys, monkeypatch):
    cells = [
        {"cell_type": "markdown", "metadata": {}, "source": ["# notes"]},
        {"cell_type": "code", "execution_count": 1, "metadata": {}, "outputs": [], "source": GF101.splitlines(True)},
    ]
    notebook = {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": cells}
    (tmp_path / "nb.ipynb").write_text(json.dumps(notebook, indent=1) + "\n")
    code, out, _ = run_cli(["--format", "github", "nb.ipynb"], capsys, tmp_path, monkeypatch)
    assert code == 1
    assert "title=GF101" in out and "::cell 2, line 5: " in out


def test_missing_path_counts_in_the_summary(tmp_path, capsys, monkeypatch):
    (tmp_path / "clean.py").write_text("x = 1\n")
    code, out, err = run_cli(["nope.py", "clean.py"], capsys, tmp_path, monkeypatch)
    assert code == 2
    assert "nope.py: no such file or directory" in err
    assert out.splitlines()[-1] == "No findings. 1 path not found."


@pytest.mark.parametrize(
    "args, message",
    [
        (["verify", "--device", "tpu"], "--device 'tpu': expected cpu, cuda or all"),
        (["verify", "--format", "xml"], "--format 'xml': expected text or json"),
    ],
)
def test_verify_bad_flag_names_the_flag(tmp_path, capsys, monkeypatch, args, message):
    code, _, err = run_cli(args, capsys, tmp_path, monkeypatch)
    assert code == 2 and message in err


def test_top_level_help_points_to_the_check_options(tmp_path, capsys, monkeypatch):
    code, out, _ = run_cli(["-h"], capsys, tmp_path, monkeypatch)
    assert code == 0
    assert "gradfix PATH..." in out and "gradfix check -h" in out


def test_check_help_lists_every_documented_flag(tmp_path, capsys, monkeypatch):
    code, out, _ = run_cli(["check", "-h"], capsys, tmp_path, monkeypatch)
    assert code == 0
    for flag in (
        "--diff", "--apply", "--unsafe-fixes", "--select", "--ignore", "--extend-select", "--option",
        "--format", "--output-file", "--exclude", "--jobs", "--no-notebooks", "--interactive",
        "--verify-cmd", "--debug",
    ):  # fmt: skip
        assert flag in out, flag
    assert "{paths}" not in out and "PATH" in out


@pytest.mark.parametrize("args", [["--bogus", "x.py"], ["-j", "0", "x.py"], ["--format", "xml", "x.py"]])
def test_usage_errors_are_plain_text_and_exit_2(tmp_path, capsys, monkeypatch, args):
    code, out, err = run_cli(args, capsys, tmp_path, monkeypatch)
    assert code == 2
    assert "Error:" in err and "╭" not in err and "Traceback" not in err


def test_rules_table_never_cuts_a_rule_name(tmp_path, capsys, monkeypatch):
    import gradfix.cli

    monkeypatch.setattr(gradfix.cli, "use_color", lambda stream: True)
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = run_cli(["rules"], capsys, tmp_path, monkeypatch)
    assert code in (0, None)
    assert "context-manager-not-called" in out and "…" not in out.split("summary")[0]
