"""The command line, end to end: exit codes, --diff/--apply, json, suppression, select/ignore.

Most tests go through typer's CliRunner (in-process, fast); ``test_real_subprocess`` runs
``python -m gradfix`` for real. Tests select GF101 (the one rule that always exists) unless they
are about rule selection itself, so rules added later cannot change their results.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gradfix.cli import app
from gradfix.rules import all_rules

BUGGY = "import torch\n\n\ndef f(x):\n    with torch.no_grad:\n        y = x * 2\n    return y\n"
FIXED = "import torch\n\n\ndef f(x):\n    with torch.no_grad():\n        y = x * 2\n    return y\n"
CLEAN = "import torch\n\n\ndef g(x):\n    with torch.no_grad():\n        y = x * 2\n    return y\n"
LEGACY = (
    "import torch\n"
    "from torch.autograd import Variable\n"
    "\n"
    "\n"
    "def evaluate(model, loader, criterion):\n"
    "    total = 0\n"
    "    for x, t in loader:\n"
    "        x = Variable(x, volatile=True)  # old API\n"
    "        loss = criterion(model(x), Variable(t))\n"
    "        total += loss.data[0]\n"
    "    return total\n"
    "\n"
    "\n"
    "def probe(x):\n"
    "    with torch.no_grad:\n"
    "        return x * 2\n"
)
ALL = ",".join(r.code for r in all_rules())


def run(*args: str):
    """Invoke the CLI in-process; ``args`` as after ``gradfix``."""
    return CliRunner().invoke(app, ["check", *args])


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NO_COLOR", "1")
    return tmp_path


def write(path: Path, data: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    path.write_bytes(data)
    return path


# -- exit codes and the report ---------------------------------------------------------------


def test_clean_file_exits_0(tree):
    write(tree / "ok.py", CLEAN)
    result = run("--select", "GF101", "ok.py")
    assert result.exit_code == 0, result.output
    assert "All checks passed" in result.stdout


def test_findings_exit_1_with_path_line_col(tree):
    write(tree / "pkg" / "bad.py", BUGGY)
    result = run("--select", "GF101", "pkg")
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert lines[0].startswith("pkg/bad.py:5:10: GF101 [*] ")
    assert "Found 1 finding" in lines[-1]
    assert (tree / "pkg" / "bad.py").read_text() == BUGGY  # report mode writes nothing


def test_findings_sorted_by_file_then_line(tree):
    write(tree / "b.py", BUGGY + "\n\ndef h(x):\n    with torch.enable_grad:\n        return x * 3\n")
    write(tree / "a.py", BUGGY)
    result = run("--select", "GF101", ".")
    positions = [line.split(": GF101")[0] for line in result.stdout.splitlines() if "GF101" in line]
    assert positions == ["a.py:5:10", "b.py:5:10", "b.py:11:10"]


def test_apply_exits_0_when_everything_was_fixed(tree):
    write(tree / "bad.py", BUGGY)
    result = run("--select", "GF101", "--apply", "bad.py")
    assert result.exit_code == 0, result.output
    assert (tree / "bad.py").read_text() == FIXED
    # One summary; the per-fix lines only with --show-fixes.
    assert result.stdout == "Fixed 1 finding in 1 file; 0 remaining.\n"
    write(tree / "bad.py", BUGGY)
    result = run("--select", "GF101", "--apply", "--show-fixes", "bad.py")
    assert "fixed: bad.py:5:10: GF101 [*]" in result.stdout and "(fix: Call the context manager" in result.stdout
    again = run("--select", "GF101", "--apply", "bad.py")
    assert again.exit_code == 0 and (tree / "bad.py").read_text() == FIXED


def test_apply_exits_1_when_findings_remain(tree):
    # set_grad_enabled without a mode argument is reported without a fix.
    write(tree / "bad.py", "import torch\nwith torch.set_grad_enabled:\n    y = 1\n")
    result = run("--select", "GF101", "--apply", "bad.py")
    assert result.exit_code == 1
    assert "1 remaining" in result.stdout


def test_nonexistent_path_exits_2_with_one_line(tree):
    result = run("missing.py")
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == ["gradfix: missing.py: no such file or directory"]
    assert "Traceback" not in result.output


def test_diff_and_apply_together_is_a_usage_error(tree):
    write(tree / "bad.py", BUGGY)
    result = run("--diff", "--apply", "bad.py")
    assert result.exit_code == 2
    assert (tree / "bad.py").read_text() == BUGGY


def test_unknown_option_is_a_usage_error(tree):
    write(tree / "bad.py", BUGGY)
    assert run("--no-such-flag", "bad.py").exit_code == 2


def test_syntax_error_next_to_good_file(tree):
    write(tree / "broken.py", "import torch\ndef f(:\n    pass\n")
    write(tree / "good.py", BUGGY)
    result = run("--select", "GF101", "--apply", ".")
    assert result.exit_code == 2
    assert "broken.py:2:7: syntax error" in result.stdout
    assert (tree / "broken.py").read_text() == "import torch\ndef f(:\n    pass\n"
    assert (tree / "good.py").read_text() == FIXED  # the other file is still fixed
    assert "Traceback" not in result.output


# -- --diff ---------------------------------------------------------------------------------


def test_diff_writes_nothing_and_exits_1(tree):
    path = write(tree / "bad.py", BUGGY)
    before = path.stat().st_mtime_ns
    result = run("--select", "GF101", "--diff", "bad.py")
    assert result.exit_code == 1
    assert path.read_text() == BUGGY and path.stat().st_mtime_ns == before
    assert result.stdout.startswith("--- a/bad.py\n+++ b/bad.py\n@@ ")
    assert "-    with torch.no_grad:\n+    with torch.no_grad():\n" in result.stdout
    assert "\x1b[" not in result.stdout  # plain when not a terminal
    # The report goes to stderr so stdout stays a clean patch: one summary, no per-fix line.
    assert result.stderr == "Would fix 1 finding in 1 file; 0 remaining.\n"


def test_diff_on_clean_tree_exits_0_and_prints_no_patch(tree):
    write(tree / "ok.py", CLEAN)
    result = run("--select", "GF101", "--diff", "ok.py")
    assert result.exit_code == 0
    assert result.stdout == ""


@pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")
@pytest.mark.parametrize(
    "files, flags",
    [
        ({"bad.py": BUGGY, "sub/crlf.py": BUGGY.replace("\n", "\r\n"), "ok.py": CLEAN}, ["--select", "GF101"]),
        ({"legacy/train.py": LEGACY, "bom.py": b"\xef\xbb\xbf" + BUGGY.encode()}, ["--select", ALL, "--unsafe-fixes"]),
    ],
    ids=["gf101", "all-rules"],
)
def test_diff_applies_with_git_apply_to_exactly_what_apply_writes(tmp_path, monkeypatch, files, flags):
    monkeypatch.setenv("NO_COLOR", "1")
    review, applied = tmp_path / "review", tmp_path / "applied"
    for name, text in files.items():
        write(review / name, text)
        write(applied / name, text)
    monkeypatch.chdir(review)
    diff = run(*flags, "--diff", ".")
    assert diff.exit_code == 1, diff.output
    assert all((review / n).read_bytes() == (t if isinstance(t, bytes) else t.encode()) for n, t in files.items())
    monkeypatch.chdir(applied)
    assert run(*flags, "--apply", ".").exit_code in (0, 1)
    patch = tmp_path / "fix.patch"
    patch.write_bytes(diff.stdout_bytes)
    subprocess.run(["git", "apply", "--unsafe-paths", str(patch)], cwd=review, check=True, capture_output=True)
    for name in files:
        assert (review / name).read_bytes() == (applied / name).read_bytes(), name
    assert any((applied / n).read_bytes() != (t if isinstance(t, bytes) else t.encode()) for n, t in files.items())


# -- json -----------------------------------------------------------------------------------

KEYS = {"path", "line", "column", "end_line", "end_column", "code", "name", "message", "fix"}


def test_json_schema(tree):
    write(tree / "bad.py", BUGGY + "\nwith torch.set_grad_enabled:\n    z = 1\n")
    result = run("--select", "GF101", "--format", "json", "bad.py")
    assert result.exit_code == 1
    rows = json.loads(result.stdout)
    assert isinstance(rows, list) and len(rows) == 2
    for row in rows:
        assert set(row) == KEYS
        assert row["path"] == "bad.py" and row["code"] == "GF101"
        assert row["name"] == "context-manager-not-called"
        assert all(isinstance(row[k], int) for k in ("line", "column", "end_line", "end_column"))
        assert isinstance(row["message"], str) and row["message"]
    first, second = rows
    assert (first["line"], first["column"], first["end_line"], first["end_column"]) == (5, 10, 5, 23)
    assert first["fix"] == {"safety": "safe", "applied": False, "title": "Call the context manager: add `()`"}
    assert second["fix"] is None  # set_grad_enabled without a mode: no fix


def test_json_under_apply_marks_applied(tree):
    write(tree / "bad.py", BUGGY)
    result = run("--select", "GF101", "--format", "json", "--apply", "bad.py")
    rows = json.loads(result.stdout)
    assert [r["fix"] for r in rows] == [{"safety": "safe", "applied": True, "title": "Call the context manager: add `()`"}]
    assert result.exit_code == 0


def test_json_on_clean_tree_is_an_empty_array(tree):
    write(tree / "ok.py", CLEAN)
    result = run("--select", "GF101", "--format", "json", "ok.py")
    assert json.loads(result.stdout) == [] and result.exit_code == 0


# -- suppression ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "comment, suppressed",
    [
        ("# gradfix: ignore", True),
        ("# gradfix: ignore[GF101]", True),
        ("# gradfix: ignore[GF2, GF1]", True),
        ("# gradfix: ignore[GF2]", False),
        ("# noqa: GF101", True),
        ("# noqa", True),
        ("# noqa: E501", False),
        ("# a comment", False),
    ],
)
def test_suppression_comments(tree, comment, suppressed):
    source = BUGGY.replace("with torch.no_grad:\n", f"with torch.no_grad:  {comment}\n")
    write(tree / "s.py", source)
    listed = run("--select", "GF101", "s.py")
    assert ("GF101" in listed.stdout) is not suppressed
    assert listed.exit_code == (0 if suppressed else 1)
    result = run("--select", "GF101", "--apply", "s.py")
    assert result.exit_code == 0
    assert ((tree / "s.py").read_text() == source) is suppressed


def test_suppression_on_multiline_with_opening_line(tree):
    source = "import torch\nwith (  # gradfix: ignore[GF101]\n    torch.no_grad\n):\n    y = 1\n"
    write(tree / "m.py", source)
    assert run("--select", "GF101", "m.py").exit_code == 0


# -- select / ignore ----------------------------------------------------------------------------


def test_select_and_ignore(tree):
    write(tree / "bad.py", BUGGY)
    assert "GF101" in run("--select", "GF1", "bad.py").stdout
    assert "GF101" in run("--select", "GF101,GF2", "bad.py").stdout
    assert "GF101" not in run("--ignore", "GF101", "bad.py").stdout
    assert "GF101" not in run("--select", "GF1", "--ignore", "GF10", "bad.py").stdout
    gf1 = run("--select", "GF1", "--format", "json", "bad.py")
    assert all(row["code"].startswith("GF1") for row in json.loads(gf1.stdout))


def test_select_unknown_code_is_a_usage_error(tree):
    write(tree / "bad.py", BUGGY)
    result = run("--select", "XYZ1", "bad.py")
    assert result.exit_code == 2
    assert result.stderr.startswith("gradfix: ")


def test_ignore_keeps_file_unchanged_under_apply(tree):
    write(tree / "bad.py", BUGGY)
    result = run("--select", "GF101", "--ignore", "GF101", "--apply", "bad.py")
    assert result.exit_code == 0
    assert (tree / "bad.py").read_text() == BUGGY


# -- bytes kept ---------------------------------------------------------------------------------


def test_crlf_file_preserved(tree):
    write(tree / "crlf.py", BUGGY.replace("\n", "\r\n"))
    assert run("--select", "GF101", "--apply", "crlf.py").exit_code == 0
    assert (tree / "crlf.py").read_bytes() == FIXED.replace("\n", "\r\n").encode()


def test_bom_file_preserved(tree):
    write(tree / "bom.py", b"\xef\xbb\xbf" + BUGGY.encode())
    assert run("--select", "GF101", "--apply", "bom.py").exit_code == 0
    assert (tree / "bom.py").read_bytes() == b"\xef\xbb\xbf" + FIXED.encode()


def test_bom_and_crlf_diff_keeps_them(tree):
    write(tree / "both.py", b"\xef\xbb\xbf" + BUGGY.replace("\n", "\r\n").encode())
    result = run("--select", "GF101", "--diff", "both.py")
    assert b"-    with torch.no_grad:\r\n+    with torch.no_grad():\r\n" in result.stdout_bytes


def test_mode_bits_preserved(tree):
    path = write(tree / "script.py", "#!/usr/bin/env python\n" + BUGGY)
    path.chmod(0o751)
    assert run("--select", "GF101", "--apply", "script.py").exit_code == 0
    assert path.stat().st_mode & 0o777 == 0o751
    assert not list(tree.glob(".*.tmp")), "temp file left behind"


# -- the real thing ---------------------------------------------------------------------------


def test_real_subprocess(tmp_path):
    write(tmp_path / "bad.py", BUGGY)
    write(tmp_path / "broken.py", "print 'python 2'\n")
    env = {"PATH": "/usr/bin:/bin", "NO_COLOR": "1"}
    cmd = [sys.executable, "-m", "gradfix", "--select", "GF101"]
    report = subprocess.run([*cmd, "bad.py"], cwd=tmp_path, capture_output=True, env=env)
    assert report.returncode == 1
    assert report.stdout.decode().startswith("bad.py:5:10: GF101 [*] ")
    diff = subprocess.run([*cmd, "--diff", "bad.py"], cwd=tmp_path, capture_output=True, env=env)
    assert diff.returncode == 1 and diff.stdout.startswith(b"--- a/bad.py\n+++ b/bad.py\n")
    both = subprocess.run([*cmd, "--apply", "."], cwd=tmp_path, capture_output=True, env=env)
    assert both.returncode == 2
    assert b"broken.py:1:1: syntax error" in both.stdout
    assert b"Traceback" not in both.stderr + both.stdout
    assert (tmp_path / "bad.py").read_text() == FIXED
    assert (tmp_path / "broken.py").read_text() == "print 'python 2'\n"


def test_diff_reports_remaining_findings_at_their_lines_on_disk(tree):
    # The first fix removes a line (GF101 then GF204 unwraps an empty block); the finding left
    # below it must point at its line in the file on disk, not in the unwritten preview.
    (tree / "m.py").write_text(
        "import torch\n\n\ndef f(model, x):\n    with torch.no_grad:\n        pass\n    return x\n\n\n"
        "def g(x):\n    if x:\n        torch.set_grad_enabled(True)\n    return x\n"
    )
    result = run("--diff", "m.py")
    assert result.exit_code == 1
    remaining = [line for line in result.stderr.splitlines() if "GF201" in line]
    assert remaining and remaining[0].startswith("m.py:12:9: GF201"), result.stderr
    result = run("--apply", "m.py")
    remaining = [line for line in result.stdout.splitlines() if "GF201" in line]
    assert remaining[0].startswith("m.py:11:9: GF201")  # after --apply: the line in the new file
