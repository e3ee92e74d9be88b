"""files.py: which files a walk finds, unreadable folders, symlinks, and bounded pattern matching."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pathspec
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import gradfix.files as files
from gradfix.cli import app
from gradfix.files import PathError, discover, path_spec

BUGGY = "import torch\nwith torch.no_grad:\n    y = 1\n"


def names(root: Path, **kwargs) -> list[str]:
    return [d.path.relative_to(root).as_posix() for d in discover([root], **kwargs)]


def make(root: Path, *paths: str) -> None:
    for rel in paths:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x = 1\n")


def test_walk_order_skips_and_extensions(tmp_path):
    make(tmp_path, "b.py", "a.py", "pkg/c.py", "pkg/notes.txt", "nb.ipynb", "build/gen.py", ".git/hook.py",
         "__pycache__/m.py", "env/lib.py", "node_modules/x.py")
    (tmp_path / "env" / "pyvenv.cfg").write_text("")
    assert names(tmp_path) == ["a.py", "b.py", "pkg/c.py"]
    assert names(tmp_path, extensions=(".py", ".ipynb")) == ["a.py", "b.py", "nb.ipynb", "pkg/c.py"]


def test_gitignore_and_excludes_apply_below_their_folder(tmp_path):
    make(tmp_path, "keep.py", "gen_a.py", "sub/gen_b.py", "sub/own.py", "sub/deep/x.py", "legacy/old.py")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".gitignore").write_text("gen_*.py\n")
    (tmp_path / "sub" / ".gitignore").write_text("deep/\n!gen_b.py\n")
    assert names(tmp_path, exclude=["legacy/"]) == ["keep.py", "sub/gen_b.py", "sub/own.py"]


def test_a_gitignore_above_the_repository_root_does_not_apply(tmp_path):
    (tmp_path / ".gitignore").write_text("*.py\n")
    repo = tmp_path / "repo"
    make(repo, "m.py")
    (repo / ".git").mkdir()
    assert names(repo) == ["m.py"]


def test_duplicates_are_yielded_once_and_explicit_files_are_marked(tmp_path):
    make(tmp_path, "a.py", "data.txt")
    found = list(discover([tmp_path, tmp_path / "a.py", tmp_path / "data.txt"]))
    assert [(d.path.name, d.explicit) for d in found] == [("a.py", False), ("data.txt", True)]


def test_missing_and_broken_paths_raise(tmp_path):
    with pytest.raises(PathError, match="no such file or directory"):
        list(discover([tmp_path / "nope"]))
    os.symlink(tmp_path / "gone", tmp_path / "dangling")
    with pytest.raises(PathError, match="broken symbolic link"):
        list(discover([tmp_path / "dangling"]))


def test_links_inside_a_tree_are_not_followed_but_a_linked_folder_named_is_walked(tmp_path, monkeypatch):
    # Issue 13: a symlinked directory named on the command line was "not a regular file".
    real = tmp_path / "real"
    make(real, "m.py", "sub/n.py")
    tree = tmp_path / "tree"
    make(tree, "own.py")
    os.symlink(real, tree / "linked")
    assert names(tree) == ["own.py"]
    assert names(tree / "linked") == ["m.py", "sub/n.py"]
    (real / "m.py").write_text(BUGGY)
    monkeypatch.chdir(tree)
    result = CliRunner().invoke(app, ["check", "--select", "GF101", "linked"])
    assert result.exit_code == 1, result.output
    assert "linked/m.py:2:6: GF101" in result.stdout


def test_an_unreadable_folder_is_reported_and_the_walk_goes_on(tmp_path, monkeypatch):
    make(tmp_path, "a/one.py", "locked/secret.py", "z/two.py")
    real_scandir = os.scandir

    def scandir(path):
        if Path(path).name == "locked":
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)

    monkeypatch.setattr(files.os, "scandir", scandir)
    errors = []
    assert names(tmp_path, on_error=errors.append) == ["a/one.py", "z/two.py"]
    assert errors == [f"cannot read folder {(tmp_path / 'locked').as_posix()}: permission denied; its files were not checked"]
    with pytest.raises(PathError, match="cannot read folder"):  # without a handler it is an error
        names(tmp_path)


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root to drop privileges")
def test_a_mode_000_folder_as_an_ordinary_user():
    # Issue 13: "internal error: PermissionError … pyvenv.cfg", exit 2, nothing checked.
    base = Path(tempfile.mkdtemp(prefix="gradfix-locked-"))
    try:
        tree = base / "tree"
        for rel in ("a.py", "locked/b.py", "z/c.py"):
            (tree / rel).parent.mkdir(parents=True, exist_ok=True)
            (tree / rel).write_text(BUGGY)
        for path in (base, *base.rglob("*")):
            os.chown(path, 65534, 65534)
        base.chmod(0o755)
        (tree / "locked").chmod(0o000)
        warm = base / "warm"  # a first run as root loads every module lazily imported later
        warm.mkdir()
        (warm / "w.py").write_text(BUGGY)
        script = (
            "import os, sys\nimport gradfix.cli\n"
            f"try:\n    gradfix.cli.main(['--apply', {str(warm)!r}])\nexcept SystemExit:\n    pass\n"
            "os.setgid(65534); os.setuid(65534)\n"
            "gradfix.cli.main(sys.argv[1:])\n"
        )
        proc = subprocess.run(
            [sys.executable, "-c", script, "--select", "GF101", "--apply", "--jobs", "1", "."],
            cwd=tree, capture_output=True, text=True, env={**os.environ, "NO_COLOR": "1"},
        )
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.splitlines() == ["gradfix: cannot read folder locked: permission denied; its files were not checked"]
        assert (tree / "a.py").read_text() == BUGGY.replace("no_grad:", "no_grad():")
        assert (tree / "z" / "c.py").read_text() == BUGGY.replace("no_grad:", "no_grad():")
    finally:
        (tree / "locked").chmod(0o755)
        shutil.rmtree(base, ignore_errors=True)


def test_pathological_patterns_are_matched_without_backtracking():
    # Issue 13: `*a*a*a…*b` took 2 s for a 24-character name and 8.5 s for 28 (pathspec's regex).
    pattern = "*a" * 30 + "*b"
    stock = pathspec.GitIgnoreSpec.from_lines([pattern]).patterns[0].regex.pattern
    bounded = path_spec([pattern]).patterns[0].regex.pattern
    assert stock.count("[^/]*") == 31 and bounded.count("(?P=gfstar") == 30
    spec = path_spec([pattern])
    assert not spec.match_file("a" * 200)
    assert spec.match_file("x/" + "a" * 200 + "b")


_GLOB = st.lists(st.sampled_from(["a", "b", "*", "?", "[ab]", "/", "**/", "!"]), min_size=1, max_size=9).map("".join)
_NAME = st.lists(st.sampled_from(["a", "b", "/", "ab"]), min_size=1, max_size=8).map("".join)


@settings(max_examples=400, deadline=None)
@given(patterns=st.lists(_GLOB, min_size=1, max_size=3), name=_NAME)
def test_bounded_matching_agrees_with_pathspec(patterns, name):
    try:
        stock = pathspec.GitIgnoreSpec.from_lines(patterns)
    except Exception:  # pathspec rejects it: so must we
        with pytest.raises(Exception):
            path_spec(patterns)
        return
    assert path_spec(patterns).match_file(name) == stock.match_file(name)


_LINE = st.lists(
    st.sampled_from(["a", "b", ".py", "*", "**", "?", "[ab]", "[!a]", "/", "**/", "!", "#", "\\", " ", "(", "+", "."]),
    min_size=1,
    max_size=9,
).map("".join)
_PATH = st.lists(st.sampled_from(["a", "b", "/", "ab", ".py", "(", "+", " "]), min_size=1, max_size=8).map("".join)


@settings(max_examples=500, deadline=None)
@given(lines=st.lists(_LINE, min_size=0, max_size=5), path=_PATH)
@example(lines=["a"], path="/a")  # pathspec matches `a`: it strips the leading `/` first
def test_one_regex_for_a_whole_gitignore_agrees_with_pathspec(lines, path):
    # The walk rules out, with one combined regex, the paths that no line of a .gitignore
    # matches, and asks pathspec about the rest: the verdict must be pathspec's, line by line.
    try:
        stock = pathspec.GitIgnoreSpec.from_lines(lines)
    except Exception:
        return
    ignore = files._Gitignore(files.path_spec(lines))
    ignore.any_line = files._any_line(ignore.spec) or ignore.any_line  # combined from the first path on
    for name in (path, path.strip("/") + "/"):
        assert ignore.verdict(name) == stock.check_file(name).include


def test_a_gitignore_the_combined_regex_cannot_express_is_matched_line_by_line():
    # `*a*a*a*b` is matched through a backreference (no backtracking): no combined regex then.
    spec = files.path_spec(["*a*a*a*b", "!keep*"])
    assert files._any_line(spec) is None
    ignore = files._Gitignore(spec)
    for _ in range(files._COMBINE_AFTER + 2):
        assert ignore.verdict("x/aaab") is True and ignore.verdict("keepaaab") is False and ignore.verdict("c.py") is None
    assert ignore.any_line is None


def test_a_gitignore_asked_about_many_paths_combines_its_lines_and_keeps_its_verdicts():
    ignore = files._Gitignore(files.path_spec(["*.log", "build/", "!keep.log", "/top.py"]))
    paths = ["a.log", "keep.log", "sub/build/", "sub/build", "top.py", "sub/top.py", "m.py"]
    expected = [True, False, True, None, True, None, None]
    for _ in range(files._COMBINE_AFTER):
        assert [ignore.verdict(p) for p in paths] == expected
    assert ignore.any_line is not None
