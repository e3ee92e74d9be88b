"""--shard K/N and --changed-since REF narrow the files checked; each run is a complete report."""

from __future__ import annotations

import subprocess

import pytest

from gradfix import cli
from gradfix.selection import SelectionError, parse_shard, shard_of

BUGGY = "import torch\nwith torch.no_grad:\n    pass\n"


def run(capsys, *args):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(list(args))
    out, err = capsys.readouterr()
    return exit_info.value.code, out, err


@pytest.fixture
def tree(tmp_path, monkeypatch):
    for i in range(12):
        (tmp_path / f"m{i}.py").write_text(BUGGY)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def findings(out: str) -> list[str]:
    return [line for line in out.splitlines() if ": GF" in line]


def test_shards_split_the_files_exactly_once(tree, capsys):
    everything = findings(run(capsys, ".")[1])
    parts = [findings(run(capsys, ".", "--shard", f"{k}/3")[1]) for k in (1, 2, 3)]
    assert sorted(sum(parts, [])) == sorted(everything) and len(everything) == 12
    assert all(parts)  # 12 files over 3 shards: none empty with this hash
    assert parts == [findings(run(capsys, "--shard", f"{k}/3", ".")[1]) for k in (1, 2, 3)]  # stable


def test_shard_depends_only_on_the_shown_path():
    assert shard_of("src/a.py", 4) == shard_of("src/a.py", 4)
    assert {shard_of(f"f{i}.py", 4) for i in range(50)} == {1, 2, 3, 4}


@pytest.mark.parametrize("value", ["0/3", "4/3", "a/b", "3", "1/0"])
def test_bad_shard_is_a_usage_error(tree, capsys, value):
    with pytest.raises(SelectionError):
        parse_shard(value)
    code, _, err = run(capsys, ".", "--shard", value)
    assert code == 2 and "--shard" in err


def git(tree, *args):
    subprocess.run(["git", "-c", "user.email=t@t", "-c", "user.name=t", *args], cwd=tree, check=True, capture_output=True)


def test_changed_since_checks_changed_and_untracked_files_only(tree, capsys):
    git(tree, "init", "-q")
    (tree / ".gitignore").write_text("ignored.py\n")
    git(tree, "add", ".")
    git(tree, "commit", "-qm", "base")
    (tree / "m1.py").write_text(BUGGY + "# edited\n")
    (tree / "new.py").write_text(BUGGY)
    (tree / "ignored.py").write_text(BUGGY)
    (tree / "sub").mkdir()
    (tree / "sub" / "staged.py").write_text(BUGGY)
    git(tree, "add", "sub/staged.py")
    paths = {line.split(":")[0] for line in findings(run(capsys, ".", "--changed-since", "HEAD")[1])}
    assert paths == {"m1.py", "new.py", "sub/staged.py"}
    # From a subfolder too (git names paths from the top of the work tree).
    paths = {line.split(":")[0] for line in findings(run(capsys, str(tree / "sub"), "--changed-since", "HEAD")[1])}
    assert {p.rsplit("/", 1)[-1] for p in paths} == {"staged.py"}


def test_changed_since_a_bad_ref_or_outside_git_is_a_usage_error(tree, capsys):
    code, _, err = run(capsys, ".", "--changed-since", "HEAD")
    assert code == 2 and "not in a git repository" in err
    git(tree, "init", "-q")
    code, _, err = run(capsys, ".", "--changed-since", "no-such-ref")
    assert code == 2 and "--changed-since: fatal:" in err and "no-such-ref" in err
