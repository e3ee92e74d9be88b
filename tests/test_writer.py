"""writer.py: nothing is written outside what was read, nothing is lost when a write fails."""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

import gradfix.runner as runner
import gradfix.writer as writer
from gradfix.cli import app
from gradfix.writer import WriteError, read_file, write_atomic

BUGGY = "import torch\n\n\ndef f(x):\n    with torch.no_grad:\n        y = x * 2\n    return y\n"
FIXED = BUGGY.replace("no_grad:", "no_grad():")


def run(*args: str):
    return CliRunner().invoke(app, ["check", "--select", "GF101", *args])


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "tree").mkdir()
    (tmp_path / "outside").mkdir()
    monkeypatch.chdir(tmp_path / "tree")
    monkeypatch.setenv("NO_COLOR", "1")
    return tmp_path / "tree"


def _after_reading(monkeypatch, name: str, action) -> None:
    """Run ``action`` right after the worker has read and fixed ``name`` (before the write)."""
    real = runner.process_job

    def process_then_act(job, want_fixes, *args, **kwargs):
        result = real(job, want_fixes, *args, **kwargs)
        if job.display == name:
            action()
        return result

    monkeypatch.setattr(runner, "process_job", process_then_act)


def _leftovers(*folders: Path) -> list[Path]:
    return [p for folder in folders for p in folder.rglob("*") if p.name.endswith(".gradfix.tmp")]


def test_a_file_swapped_for_a_symlink_mid_run_is_not_written_through(tree, monkeypatch):
    # Issue 13: the writer followed realpath and wrote the fix into the link's target.
    outside = tree.parent / "outside" / "theirs.py"
    outside.write_text(BUGGY)
    (tree / "a.py").write_text(BUGGY)

    def swap():
        (tree / "a.py").unlink()
        os.symlink(outside, tree / "a.py")

    _after_reading(monkeypatch, "a.py", swap)
    result = run("--apply", "a.py")
    assert result.exit_code == 2
    assert outside.read_text() == BUGGY
    assert (tree / "a.py").is_symlink()
    assert "gradfix: cannot write a.py: " in result.stderr
    assert not _leftovers(tree, outside.parent)


def test_a_folder_swapped_for_a_symlink_mid_run_is_not_written_through(tree, monkeypatch):
    elsewhere = tree.parent / "outside" / "pkg"
    elsewhere.mkdir()
    (elsewhere / "m.py").write_text(BUGGY)
    (tree / "pkg").mkdir()
    (tree / "pkg" / "m.py").write_text(BUGGY)

    def swap():
        (tree / "pkg").rename(tree / "pkg.old")
        os.symlink(elsewhere, tree / "pkg")

    _after_reading(monkeypatch, "pkg/m.py", swap)
    result = run("--apply", "pkg")
    assert result.exit_code == 2
    assert "gradfix: cannot write pkg/m.py: it changed on disk while gradfix ran; not overwritten" in result.stderr
    assert (elsewhere / "m.py").read_text() == BUGGY
    assert (tree / "pkg.old" / "m.py").read_text() == BUGGY


def test_a_file_replaced_by_another_inode_mid_run_is_not_overwritten(tree, monkeypatch):
    (tree / "a.py").write_text(BUGGY)

    def replace_with_same_bytes():  # e.g. `git checkout` rewrote it: same bytes, a new file
        (tree / "new.py").write_text(BUGGY)
        os.replace(tree / "new.py", tree / "a.py")

    _after_reading(monkeypatch, "a.py", replace_with_same_bytes)
    result = run("--apply", "a.py")
    assert result.exit_code == 2
    assert "gradfix: cannot write a.py: it changed on disk while gradfix ran; not overwritten" in result.stderr
    assert (tree / "a.py").read_text() == BUGGY


def test_a_symlink_named_on_the_command_line_is_checked_but_not_written_through(tree):
    outside = tree.parent / "outside" / "theirs.py"
    outside.write_text(BUGGY)
    os.symlink(outside, tree / "link.py")
    checked = run("link.py")
    assert checked.exit_code == 1 and "link.py:5:10: GF101" in checked.stdout
    result = run("--apply", "link.py")
    assert result.exit_code == 2
    assert f"gradfix: cannot write link.py: it is a symbolic link; not written through it (run gradfix on {outside.resolve()})" in result.stderr
    assert outside.read_text() == BUGGY and (tree / "link.py").is_symlink()
    assert "Fixed 0 findings" in result.stdout


def test_a_hard_linked_file_is_fixed_and_the_user_is_told(tree):
    (tree / "a.py").write_text(BUGGY)
    os.link(tree / "a.py", tree.parent / "outside" / "twin.py")
    result = run("--apply", "a.py")
    assert result.exit_code == 0, result.output
    assert (tree / "a.py").read_text() == FIXED
    assert (tree.parent / "outside" / "twin.py").read_text() == BUGGY  # the other name is not ours
    assert "gradfix: a.py: had 2 hard links: the fixed file replaced this name only, the other 1 keep the old content" in result.stderr


@pytest.mark.parametrize("where", ["mkstemp", "write", "fsync"])
def test_disk_full_at_the_write_loses_nothing(tree, monkeypatch, where):
    (tree / "a.py").write_text(BUGGY)
    (tree / "b.py").write_text(BUGGY)
    full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def fail(*args, **kwargs):
        raise full

    if where == "mkstemp":
        monkeypatch.setattr(writer.tempfile, "mkstemp", fail)
    elif where == "fsync":
        monkeypatch.setattr(writer.os, "fsync", fail)
    else:
        real_fdopen = writer.os.fdopen

        class Full:
            def __init__(self, handle):
                self.handle = handle

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                self.handle.close()

            def fileno(self):
                return self.handle.fileno()

            def write(self, data):
                self.handle.write(data[: len(data) // 2])  # half of it landed, then the disk filled
                raise full

        monkeypatch.setattr(writer.os, "fdopen", lambda fd, mode, *a: Full(real_fdopen(fd, mode, *a)) if "w" in mode else real_fdopen(fd, mode, *a))
    result = run("--apply", ".")
    assert result.exit_code == 2
    assert (tree / "a.py").read_text() == BUGGY and (tree / "b.py").read_text() == BUGGY
    assert not _leftovers(tree)
    lines = result.stderr.splitlines()
    assert "gradfix: cannot write a.py: No space left on device" in lines, result.stderr
    # Issue 13: the summary still said "N fixable with --apply" right after --apply failed.
    assert result.stdout.splitlines()[-1] == "Fixed 0 findings in 0 files; 2 remaining. 2 files could not be written (see above)."


def test_write_atomic_refuses_stale_content_and_keeps_the_mode(tmp_path):
    path = tmp_path / "m.py"
    path.write_text("old\n")
    path.chmod(0o640)
    data, read_as = read_file(path)
    assert read_as == (str(path.resolve()), path.stat().st_dev, path.stat().st_ino)
    with pytest.raises(WriteError, match="changed on disk"):
        write_atomic(path, b"new\n", b"something else\n", read_as)
    assert write_atomic(path, b"new\n", data, read_as) is None
    assert path.read_bytes() == b"new\n" and path.stat().st_mode & 0o777 == 0o640
    with pytest.raises(WriteError, match="changed on disk"):  # a new inode now: the old pin is stale
        write_atomic(path, b"newer\n", b"new\n", read_as)
    assert not _leftovers(tmp_path)


def _aged(path: Path, text: str = "x") -> Path:
    path.write_text(text)
    past = time.time() - 60
    os.utime(path, (past, past))
    return path


def test_remove_stale_temp_takes_only_unlocked_old_temp_files_of_gradfix(tmp_path):
    import fcntl

    dead = _aged(tmp_path / ".m.py.abcd_123.gradfix.tmp")
    assert writer.remove_stale_temp(dead) is True and not dead.exists()
    fresh = tmp_path / ".m.py.abcd_124.gradfix.tmp"
    fresh.write_text("x")  # a run may have just created it and not locked it yet
    assert writer.remove_stale_temp(fresh) is False and fresh.exists()
    live = _aged(tmp_path / ".m.py.abcd_125.gradfix.tmp")
    with open(live, "rb") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        assert writer.remove_stale_temp(live) is False and live.exists()
    for name in (".m.py.ABCD_123.gradfix.tmp", "m.py.abcd_123.gradfix.tmp", ".m.py.abcd_12.gradfix.tmp",
                 ".m.py.abcd_123.gradfix.tmp~", ".m.py.abcd_123.gradfix.tmpx"):
        other = _aged(tmp_path / name)
        assert writer.remove_stale_temp(other) is False and other.exists(), name
    os.symlink(tmp_path / "m.py", tmp_path / ".m.py.link_123.gradfix.tmp")
    (tmp_path / "m.py").write_text("mine")
    assert writer.remove_stale_temp(tmp_path / ".m.py.link_123.gradfix.tmp") is False
    (tmp_path / ".m.py.dir__123.gradfix.tmp").mkdir()
    assert writer.remove_stale_temp(tmp_path / ".m.py.dir__123.gradfix.tmp") is False
    assert (tmp_path / "m.py").read_text() == "mine"


@pytest.mark.parametrize("layout", ["repository", "worktree", "worktree-no-space", "none"])
def test_temp_files_are_hidden_from_git_in_the_right_exclude_file(tmp_path, monkeypatch, layout):
    monkeypatch.setattr(writer, "_hidden", set())
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    common = tmp_path / "main.git"
    if layout == "repository":
        (tree / ".git" / "info").mkdir(parents=True)
        (tree / ".git" / "info" / "exclude").write_text("# theirs\n*.log")
        exclude = tree / ".git" / "info" / "exclude"
    elif layout.startswith("worktree"):  # what `git worktree add` makes: .git is a file
        gitdir = common / "worktrees" / "tree"
        gitdir.mkdir(parents=True)
        (gitdir / "commondir").write_text("../..\n")
        (tree / ".git").write_text(f"gitdir:{'' if layout.endswith('no-space') else ' '}{gitdir}\n")
        exclude = common / "info" / "exclude"
    writer.hide_temps_from_git(tree / "sub")
    writer.hide_temps_from_git(tree / "sub")  # once only
    if layout == "none":
        assert not list(tmp_path.rglob("exclude"))
        return
    text = exclude.read_text()
    lines = text.splitlines()
    assert lines.count(".*.gradfix.tmp") == 1 and text.endswith(".*.gradfix.tmp\n")
    if layout == "repository":
        assert lines[:2] == ["# theirs", "*.log"]  # appended, never rewritten
    monkeypatch.setattr(writer, "_hidden", set())
    writer.hide_temps_from_git(tree)
    assert exclude.read_text().splitlines().count(".*.gradfix.tmp") == 1  # already there: not added again
