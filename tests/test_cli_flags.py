"""The conventional flags a Ruff user expects, driven through the real CLI.

In-process via typer's CliRunner (stdin, stdout and stderr separated); ``python -m gradfix``
in a subprocess where the terminal, the environment or the exit path matter.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gradfix.cli import app
from gradfix.rules import all_rules

BUGGY = "import torch\n\n\ndef f(x):\n    with torch.no_grad:\n        y = x * 2\n    return y\n"
FIXED = BUGGY.replace("no_grad:", "no_grad():")
TWO_BUGS = BUGGY + "\n\ndef g(x):\n    with torch.enable_grad:\n        return x\n"


def run(*args: str, input: str | bytes | None = None, env: dict | None = None):
    return CliRunner().invoke(app, ["check", *args], input=input, env=env)


def gradfix(*args: str, cwd: Path, env: dict | None = None, input: str | None = None) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "gradfix", *args], cwd=cwd, capture_output=True, text=True, timeout=120, env=full_env, input=input
    )


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    monkeypatch.setenv("NO_COLOR", "1")
    return tmp_path


# -- standard input ---------------------------------------------------------------------------


def test_stdin_is_checked_and_named_dash(tree):
    result = run("--select", "GF101", "-", input=BUGGY)
    assert result.exit_code == 1
    assert result.stdout.startswith("-:5:10: GF101 [*]")


def test_stdin_filename_names_the_source_and_picks_its_config(tree):
    (tree / "pkg").mkdir()
    (tree / "pkg" / "pyproject.toml").write_text('[tool.gradfix]\nper-file-ignores = { "legacy_*.py" = ["GF101"] }\n')
    named = run("--select", "GF101", "-", "--stdin-filename", "pkg/model.py", input=BUGGY)
    assert named.exit_code == 1 and named.stdout.startswith("pkg/model.py:5:10: GF101")
    ignored = run("--select", "GF101", "--stdin-filename", "pkg/legacy_model.py", input=BUGGY)  # no `-` needed
    assert ignored.exit_code == 0 and "All checks passed!" in ignored.stdout


def test_stdin_fix_prints_the_fixed_source_and_reports_on_stderr(tree):
    result = run("--select", "GF101", "--fix", "-", input=BUGGY)
    assert result.exit_code == 0
    assert result.stdout == FIXED
    assert result.stderr == "Fixed 1 finding in 1 file; 0 remaining.\n"
    assert not list(tree.iterdir())  # nothing written anywhere


def test_stdin_fix_of_clean_source_echoes_it_unchanged(tree):
    result = run("--select", "GF101", "--fix", "-", input=FIXED)
    assert result.exit_code == 0 and result.stdout == FIXED


def test_stdin_diff_goes_to_stdout(tree):
    result = run("--select", "GF101", "--diff", "-", "--stdin-filename", "m.py", input=BUGGY)
    assert result.exit_code == 1
    assert result.stdout.startswith("--- a/m.py\n+++ b/m.py\n@@ ")
    assert "Would fix 1 finding" in result.stderr


def test_stdin_cannot_be_mixed_with_paths(tree):
    (tree / "a.py").write_text(BUGGY)
    result = run("-", "a.py", input=BUGGY)
    assert result.exit_code == 2 and "cannot be combined" in result.stderr


def test_stdin_syntax_error_is_reported_not_raised(tree):
    result = run("-", input="print 'x'\n")
    assert result.exit_code == 2 and result.stdout.startswith("-:1:1: syntax error")


def test_no_path_at_all_is_a_usage_error(tree):
    result = run()
    assert result.exit_code == 2 and "no path given" in result.stderr


# -- report shape -----------------------------------------------------------------------------


def test_statistics_counts_per_rule(tree):
    (tree / "a.py").write_text(TWO_BUGS)
    (tree / "b.py").write_text(BUGGY)
    result = run("--select", "GF101", "--statistics", ".")
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert lines[0] == "3\tGF101\t[*] context-manager-not-called"
    assert lines[-1].startswith("Found 3 findings.")
    as_json = run("--select", "GF101", "--statistics", "--format", "json", ".")
    assert json.loads(as_json.stdout) == [{"code": "GF101", "name": "context-manager-not-called", "count": 3, "fixable": 3}]


def test_statistics_refuses_sarif(tree):
    (tree / "a.py").write_text(BUGGY)
    result = run("--statistics", "--format", "sarif", "a.py")
    assert result.exit_code == 2 and "--statistics" in result.stderr


def test_exit_zero_with_findings_but_not_with_errors(tree):
    (tree / "a.py").write_text(BUGGY)
    assert run("--select", "GF101", "--exit-zero", "a.py").exit_code == 0
    (tree / "broken.py").write_text("print 'x'\n")
    assert run("--select", "GF101", "--exit-zero", ".").exit_code == 2


def test_quiet_prints_findings_only(tree):
    (tree / "a.py").write_text(BUGGY + "y = 1  # gradfix: ignore[GF999]\n")
    result = run("--select", "GF101", "-q", "a.py")
    assert result.exit_code == 1
    assert result.stdout.splitlines() == [line for line in result.stdout.splitlines() if line.startswith("a.py:5:10: GF101")]
    assert result.stderr == ""
    fixed = run("--select", "GF101", "--apply", "--quiet", "a.py")
    assert fixed.exit_code == 0 and fixed.stdout == ""


def test_show_fixes_names_the_fix_in_check_mode(tree):
    (tree / "a.py").write_text(BUGGY)
    plain = run("--select", "GF101", "a.py")
    shown = run("--select", "GF101", "--show-fixes", "a.py")
    assert "(fix:" not in plain.stdout
    assert "a.py:5:10: GF101 [*]" in shown.stdout and "(fix: Call the context manager: add `()`)" in shown.stdout


CONDITIONAL_TOGGLE = "import torch\n\n\ndef f(model, x, frozen):\n    if frozen:\n        torch.set_grad_enabled(False)\n    return model(x)\n"


def test_why_a_finding_has_no_fix_is_kept_out_of_its_message(tree):
    """The message says what is wrong; why this finding gets no fix (its rule fixes others of
    its kind) goes to --show-fixes, JSON `no_fix`, SARIF `noFix` and the cache, unchanged."""
    (tree / "a.py").write_text(CONDITIONAL_TOGGLE)
    plain = run("--select", "GF201", "--no-cache", "a.py")
    line = "a.py:6:9: GF201 bare `torch.set_grad_enabled(False)` leaks the global grad mode to the caller"
    assert plain.stdout.splitlines()[0] == line
    shown = run("--select", "GF201", "--no-cache", "--show-fixes", "a.py")
    assert shown.stdout.splitlines()[0] == line + " (no fix: it runs only under a condition)"
    (row,) = json.loads(run("--select", "GF201", "--no-cache", "--format", "json", "a.py").stdout)
    assert row["fix"] is None and row["no_fix"] == "it runs only under a condition"
    sarif = json.loads(run("--select", "GF201", "--no-cache", "--format", "sarif", "a.py").stdout)
    assert sarif["runs"][0]["results"][0]["properties"]["noFix"] == "it runs only under a condition"
    cold = run("--select", "GF201", "--format", "json", "a.py").stdout
    warm = run("--select", "GF201", "--format", "json", "a.py").stdout  # read back from the cache
    assert json.loads(cold) == json.loads(warm) == [row]


def test_diff_per_fix_lines_only_with_show_fixes(tree):
    (tree / "a.py").write_text(TWO_BUGS)
    quiet = run("--select", "GF101", "--diff", "a.py")
    assert quiet.stderr == "Would fix 2 findings in 1 file; 0 remaining.\n"
    listed = run("--select", "GF101", "--diff", "--show-fixes", "a.py")
    assert sum(line.startswith("would fix: a.py:") for line in listed.stderr.splitlines()) == 2


# -- machine-readable outputs -----------------------------------------------------------------


def test_diff_with_json_keeps_stdout_pure_json(tree):
    (tree / "a.py").write_text(BUGGY)
    result = run("--select", "GF101", "--diff", "--format", "json", "a.py")
    assert result.exit_code == 1
    rows = json.loads(result.stdout)  # nothing else on stdout
    assert [r["code"] for r in rows] == ["GF101"]
    assert "-O FILE" in result.stderr  # the diff was not printed, and it says so


def test_diff_output_file_gets_the_diff_and_stdout_the_report(tree):
    (tree / "a.py").write_text(BUGGY)
    result = run("--select", "GF101", "--diff", "-O", "fix.patch", "--format", "json", "a.py")
    assert result.exit_code == 1
    patch = (tree / "fix.patch").read_text()
    assert patch.startswith("--- a/a.py\n+++ b/a.py\n") and "+    with torch.no_grad():" in patch
    assert [r["code"] for r in json.loads(result.stdout)] == ["GF101"]
    subprocess.run(["git", "apply", "fix.patch"], cwd=tree, check=True)
    assert (tree / "a.py").read_text() == FIXED


def test_rules_json_lists_every_rule():
    result = CliRunner().invoke(app, ["rules", "--format", "json"])
    rows = json.loads(result.stdout)
    assert [r["code"] for r in rows] == [r.code for r in all_rules()]
    gf202 = next(r for r in rows if r["code"] == "GF202")
    assert gf202["fix"] == "safe" and gf202["options"][0]["name"] == "style"
    assert {r["default_enabled"] for r in rows} == {True, False}


@pytest.mark.parametrize("name", ["context-manager-not-called", "CONTEXT_MANAGER_NOT_CALLED", "gf101"])
def test_explain_accepts_a_rule_name(name):
    result = CliRunner().invoke(app, ["explain", name], env={"NO_COLOR": "1"})
    assert result.exit_code == 0 and result.stdout.startswith("# GF101 context-manager-not-called")


def test_explain_names_the_article_and_points_to_the_source_repository():
    text = CliRunner().invoke(app, ["explain", "GF202"], env={"NO_COLOR": "1"}).stdout
    assert "§3.2" in text and "## Source" in text and "PyTorch梯度计算实战解析" in text
    for line in text.splitlines():  # a wheel has no tests/: say where those files are
        if "tests/facts/" in line:
            assert "(in the gradfix source repository)" in line


# -- silent no-ops speak -----------------------------------------------------------------------


def test_extend_select_that_enables_nothing_warns(tree):
    (tree / "a.py").write_text(BUGGY)
    result = run("--extend-select", "GF3", "a.py")
    assert "extend-select GF3 enables no rule" in result.stderr and "GF301" in result.stderr
    full = run("--extend-select", "GF301", "a.py")
    assert "enables no rule" not in full.stderr


def test_extend_select_in_the_config_that_enables_nothing_warns_once(tree):
    (tree / "pyproject.toml").write_text('[tool.gradfix]\nextend-select = ["GF3"]\n')
    (tree / "a.py").write_text(BUGGY)
    (tree / "b.py").write_text(BUGGY)
    result = run("a.py", "b.py")
    assert result.stderr.count("extend-select GF3 enables no rule") == 1, result.stderr


def test_unknown_code_in_a_suppression_comment_warns(tree):
    (tree / "a.py").write_text(
        "x = 1  # gradfix: ignore[GF999]\ny = 2  # noqa: E501, GF998\nz = 3  # noqa: GF101\nw = 4  # gradfix: ignore[]\n"
    )
    result = run("a.py")
    assert result.exit_code == 0
    warnings = [line for line in result.stderr.splitlines() if "suppresses nothing" in line]
    assert len(warnings) == 3
    assert "a.py: line 1: unknown rule code GF999" in warnings[0] and "line 2: unknown rule code GF998" in warnings[1]
    assert "line 4: `# gradfix: ignore[]` names no rule code" in warnings[2]


def test_async_keyword_argument_gets_a_hint(tree):
    (tree / "old.py").write_text("import torch\nx = torch.zeros(2).cuda(async=True)\n")
    result = run("old.py")
    assert result.exit_code == 2
    assert result.stdout.startswith("old.py:2:")
    assert "`async` is a reserved word since Python 3.7" in result.stdout and "non_blocking=" in result.stdout
    other = run("-", input="print 'x'\n")
    assert "async" not in other.stdout  # no hint where it does not apply


def test_verify_device_all_without_cuda_says_so(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    import torch

    import gradfix.verify.harness as harness

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(harness, "verify", lambda scenarios, devices, jobs=None: [])
    scenario = Path(__file__).parents[1] / "fixtures" / "gf101_mlp_eval_no_call.py"
    result = CliRunner().invoke(app, ["verify", "--device", "all", str(scenario)])
    assert "CUDA is not available" in result.stderr and "CPU only" in result.stderr


def test_interactive_on_a_notebook_says_it_is_not_reviewed(tmp_path):
    pexpect = pytest.importorskip("pexpect")
    nbformat = pytest.importorskip("nbformat")
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(BUGGY)])
    nbformat.write(notebook, str(tmp_path / "nb.ipynb"))
    child = pexpect.spawn(
        sys.executable, ["-m", "gradfix", "-i", "--select", "GF101", "nb.ipynb"], cwd=str(tmp_path), encoding="utf-8", timeout=60
    )
    child.expect("interactive review does not cover notebooks")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 1  # the notebook's finding is still reported


# -- version and colour -------------------------------------------------------------------------


@pytest.mark.parametrize("flag", ["-V", "--version"])
def test_version_flags(tmp_path, flag):
    proc = gradfix(flag, cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout.startswith("gradfix ")


@pytest.mark.parametrize(
    "args, env, coloured",
    [
        ([], {}, False),  # piped: plain
        (["--color", "always"], {}, True),
        (["--color", "always"], {"NO_COLOR": "1"}, True),  # the flag wins over the environment
        ([], {"FORCE_COLOR": "1"}, True),
        ([], {"FORCE_COLOR": "1", "NO_COLOR": "1"}, False),  # NO_COLOR wins over FORCE_COLOR
        (["--color", "never"], {"FORCE_COLOR": "1"}, False),
    ],
)
def test_color_flag_and_environment(tmp_path, args, env, coloured):
    (tmp_path / "a.py").write_text(BUGGY)
    proc = gradfix("--diff", "--select", "GF101", *args, "a.py", cwd=tmp_path, env=env)
    assert proc.returncode == 1
    assert ("\x1b[" in proc.stdout) is coloured
    assert "+    with torch.no_grad():" in proc.stdout.replace("\x1b[0m", "").replace("\x1b[32m", "")


def test_terminal_table_under_diff_says_would_fix(tmp_path):
    (tmp_path / "a.py").write_text(BUGGY)
    proc = gradfix("--diff", "--select", "GF101", "--color", "always", "a.py", cwd=tmp_path)
    assert proc.returncode == 1
    assert "would fix" in proc.stderr and "fixed" not in proc.stderr.replace("Would fix", "")
    applied = gradfix("--apply", "--select", "GF101", "--color", "always", "a.py", cwd=tmp_path)
    assert "fixed" in applied.stdout and "would fix" not in applied.stdout


def test_server_without_pygls_says_which_extra_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "pygls", None)  # `import pygls` now raises ImportError
    result = CliRunner().invoke(app, ["server"])
    assert result.exit_code == 2 and "pip install 'gradfix[lsp]'" in result.stderr
