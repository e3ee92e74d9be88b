"""The result cache: same findings with and without it, never trusted when broken, never used
to decide what --apply writes."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gradfix import cli, engine
from gradfix.cache import Cache, cache_key
from gradfix.engine import Job
from gradfix.model import Settings
from gradfix.runner import run_jobs

BUGGY = "import torch\nfrom torch.autograd import Variable\n\nwith torch.no_grad:\n    y = Variable(x)\n"
NOTEBOOK = {
    "cells": [{"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
               "source": ["import torch\n", "with torch.no_grad:\n", "    pass\n"]}],
    "metadata": {}, "nbformat": 4, "nbformat_minor": 5,
}


@pytest.fixture
def tree(tmp_path, monkeypatch):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "train.py").write_text(BUGGY)
    (tmp_path / "pkg" / "clean.py").write_text("import torch\n\nx = torch.ones(2)\n")
    (tmp_path / "broken.py").write_text("def f(:\n")
    (tmp_path / "nb.ipynb").write_text(json.dumps(NOTEBOOK))
    (tmp_path / "crlf.py").write_bytes(BUGGY.replace("\n", "\r\n").encode())
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GRADFIX_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path


def run(capsys, *args) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(list(args))
    out, err = capsys.readouterr()
    return exit_info.value.code, out, err


def entries(tree: Path) -> list[Path]:
    """The cache files (one per gradfix build and project digest)."""
    return sorted(p for p in (tree / "cache").rglob("*.json"))


FORMATS = ("text", "json", "sarif", "github")


@pytest.mark.parametrize("fmt", FORMATS)
def test_findings_are_byte_identical_with_and_without_the_cache(tree, capsys, monkeypatch, fmt):
    uncached = run(capsys, ".", "--format", fmt, "--no-cache")
    assert not (tree / "cache").exists()  # --no-cache writes nothing
    cold = run(capsys, ".", "--format", fmt)
    assert entries(tree)

    def no_analysis(*args, **kwargs):
        raise AssertionError("a warm run must not analyse unchanged files")

    monkeypatch.setattr(engine, "check", no_analysis)
    warm = run(capsys, ".", "--format", fmt)
    assert uncached == cold == warm
    assert uncached[0] == 2  # broken.py: a syntax error is cached as such


def test_cache_folder_is_ignored_by_git(tree, capsys):
    run(capsys, ".")
    assert (tree / "cache" / ".gitignore").read_text().splitlines()[-1] == "*"


def test_default_folder_is_at_the_project_root(tree, capsys, monkeypatch):
    monkeypatch.delenv("GRADFIX_CACHE_DIR")
    (tree / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    monkeypatch.chdir(tree / "pkg")
    run(capsys, ".")
    assert (tree / ".gradfix_cache" / ".gitignore").exists() and not (tree / "pkg" / ".gradfix_cache").exists()


def test_a_changed_file_or_setting_is_analysed_again(tree, capsys):
    first = run(capsys, "pkg")
    (tree / "pkg" / "train.py").write_text(BUGGY + "with torch.enable_grad:\n    pass\n")
    second = run(capsys, "pkg")
    assert second[1].count("GF101") == first[1].count("GF101") + 1
    assert "GF101" not in run(capsys, "pkg", "--ignore", "GF101")[1]


def _corruptions(data: bytes) -> list[bytes]:
    head, _, body = data.partition(b"\n")
    return [
        b"",
        data[: len(data) // 2],
        data[:-1],
        b"\x00\xff garbage \n{",
        head + b"\n" + body.replace(b"GF101", b"GF999"),  # content does not match its hash
        b"gradfix-cache " + hashlib.sha256(b"[]").hexdigest().encode() + b"\n[]",  # well formed, not a table
    ]


def test_corrupt_cache_files_are_ignored_and_rebuilt(tree, capsys):
    expected = run(capsys, ".", "--format", "json")
    (cache_file,) = entries(tree)
    good = cache_file.read_bytes()
    for index, broken in enumerate(_corruptions(good)):
        cache_file.write_bytes(broken)
        assert run(capsys, ".", "--format", "json") == expected, index
        assert cache_file.read_bytes() == good, index  # rebuilt


def _forge(cache: Cache, key: str, entry) -> None:
    body = json.dumps({key: entry}).encode()
    cache.path.parent.mkdir(parents=True, exist_ok=True)
    cache.path.write_bytes(f"gradfix-cache {hashlib.sha256(body).hexdigest()}\n".encode() + body)


@pytest.mark.parametrize(
    "entry",
    [
        {"path": "pkg/train.py", "result": {"findings": [{"code": 1}], "error": None, "error_kind": None, "notes": []}},
        {"path": "pkg/train.py", "result": {"findings": "GF101", "error": None, "error_kind": None, "notes": []}},
        {"path": "elsewhere.py", "result": {"findings": [], "error": None, "error_kind": None, "notes": []}},
        ["not", "an", "entry"],
    ],
)
def test_forged_but_well_formed_entries_are_checked_field_by_field(tree, entry):
    job = Job(str(tree / "pkg" / "train.py"), Settings(), "pkg/train.py")
    cache = Cache(tree / "cache")
    key = cache.key((tree / "pkg" / "train.py").read_bytes(), job.display, job.settings, False)
    _forge(cache, key, entry)
    (result,) = run_jobs([job], False, cache=Cache(tree / "cache"))
    assert [o.finding.code for o in result.findings] == ["GF101", "GF402"]


def test_apply_never_trusts_the_cache(tree, capsys):
    # A well-formed entry that says "no findings" for the file as it is on disk (the run's
    # project index of that one file is part of the key):
    from gradfix.analysis.project import ProjectIndex

    cache = Cache(tree / "cache", ProjectIndex.build(["pkg/train.py"]).digest())
    key = cache.key((tree / "pkg" / "train.py").read_bytes(), "pkg/train.py", Settings(), False)
    _forge(cache, key, {"path": "pkg/train.py", "result": {"findings": [], "error": None, "error_kind": None, "notes": []}})
    assert "All checks passed!" in run(capsys, "pkg/train.py")[1]  # report mode believes it
    run(capsys, "--apply", "pkg/train.py")
    assert "torch.no_grad():" in (tree / "pkg" / "train.py").read_text()  # --apply does not


def test_runs_over_parts_of_a_tree_keep_each_others_entries(tree, capsys, monkeypatch):
    run(capsys, "pkg")
    run(capsys, "broken.py")

    def no_analysis(*args, **kwargs):
        raise AssertionError("cached")

    monkeypatch.setattr(engine, "check", no_analysis)
    assert "GF101" in run(capsys, "pkg")[1] and "syntax error" in run(capsys, "broken.py")[1]


def test_a_file_changed_while_it_is_analysed_is_not_cached(tree, capsys, monkeypatch):
    from gradfix import runner

    real = runner.process_job

    def edit_meanwhile(job, *args, **kwargs):
        result = real(job, *args, **kwargs)
        Path(job.path).write_text(BUGGY + "# edited\n")
        return result

    monkeypatch.setattr(runner, "process_job", edit_meanwhile)
    run(capsys, "pkg/train.py")
    assert not entries(tree)


def test_key_takes_every_input_into_account():
    base = dict(source=b"x = 1\n", display="a.py", settings=Settings(), want_edits=False, project_digest="")
    keys = {cache_key(**base)}
    for change in (
        {"source": b"x = 2\n"},
        {"display": "b.py"},
        {"settings": Settings(unsafe_fixes=True)},
        {"want_edits": True},
        {"project_digest": "index:abc"},
    ):
        keys.add(cache_key(**{**base, **change}))
    assert len(keys) == 6


def test_concurrent_runs_share_one_cache(tree):
    env = {**os.environ, "GRADFIX_CACHE_DIR": str(tree / "cache")}
    command = [sys.executable, "-m", "gradfix", ".", "--format", "json"]
    runs = [subprocess.Popen(command, cwd=tree, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(4)]
    outputs = {p.communicate(timeout=120)[0] for p in runs}
    again = subprocess.run(command, cwd=tree, env=env, capture_output=True, timeout=120).stdout
    assert outputs == {again}
    assert not [p for p in (tree / "cache").rglob(".tmp-*")] and len(entries(tree)) == 1
