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
    """The cache files (one per gradfix build)."""
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


NO_FINDINGS = {"findings": [], "error": None, "error_kind": None, "notes": []}


@pytest.mark.parametrize(
    "entry",
    [
        {"path": "pkg/train.py", "result": {"findings": [{"code": 1}], "error": None, "error_kind": None, "notes": []}, "reads": {}},
        {"path": "pkg/train.py", "result": {"findings": "GF101", "error": None, "error_kind": None, "notes": []}, "reads": {}},
        {"path": "elsewhere.py", "result": NO_FINDINGS, "reads": {}},
        {"path": "pkg/train.py", "result": NO_FINDINGS},  # what it read is not said
        {"path": "pkg/train.py", "result": NO_FINDINGS, "reads": ["pkg/clean.py"]},
        {"path": "pkg/train.py", "result": NO_FINDINGS, "reads": {"/nowhere/model.py": "0" * 40}},  # not in this run
        ["not", "an", "entry"],
    ],
)
def test_forged_but_well_formed_entries_are_checked_field_by_field(tree, entry):
    from gradfix.analysis.project import ProjectIndex

    job = Job(str(tree / "pkg" / "train.py"), Settings(), "pkg/train.py")
    cache = Cache(tree / "cache", ProjectIndex.build([job.path]))  # the key run_jobs makes
    key = cache.key((tree / "pkg" / "train.py").read_bytes(), job.display, job.settings, False)
    _forge(cache, key, entry)
    (result,) = run_jobs([job], False, cache=Cache(tree / "cache"))
    assert [o.finding.code for o in result.findings] == ["GF101", "GF402"]
    # The same entry, well formed, is believed: the key above is the one looked up.
    _forge(cache, key, {"path": "pkg/train.py", "result": NO_FINDINGS, "reads": {}})
    (result,) = run_jobs([job], False, cache=Cache(tree / "cache"))
    assert result.findings == []


def test_apply_never_trusts_the_cache(tree, capsys):
    # A well-formed entry that says "no findings" for the file as it is on disk (the layout of
    # the run's project index, that one file, is part of the key):
    from gradfix.analysis.project import ProjectIndex

    cache = Cache(tree / "cache", ProjectIndex.build(["pkg/train.py"]))
    key = cache.key((tree / "pkg" / "train.py").read_bytes(), "pkg/train.py", Settings(), False)
    _forge(cache, key, {"path": "pkg/train.py", "result": {"findings": [], "error": None, "error_kind": None, "notes": []}, "reads": {}})
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


# -- results that read other files (the project index) ------------------------------------

MODELS = """\
import torch.nn as nn
from .blocks import Block


class Net(nn.Module):
    def __init__(self, n=8):
        super().__init__()
        self.blocks = nn.Sequential(*[Block(n) for _ in range(2)])
"""
BLOCKS = """\
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.drop = nn.Dropout(0.1)
"""
PREDICT = """\
import torch
from pkg.models import Net

net = Net()
opt = torch.optim.SGD(net.parameters(), lr=0.1)


def fit(loader):
    for x, y in loader:
        opt.zero_grad()
        (net(x) - y).pow(2).mean().backward()
        opt.step()


def predict(x):
    with torch.no_grad():
        return net(x)
"""


@pytest.fixture
def project(tmp_path, monkeypatch):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "models.py").write_text(MODELS)
    (tmp_path / "pkg" / "blocks.py").write_text(BLOCKS)
    (tmp_path / "predict.py").write_text(PREDICT)
    (tmp_path / "other.py").write_text("import torch\n\n\ndef helper(x):\n    return x\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GRADFIX_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path


def _checked(monkeypatch) -> list[str]:
    """The paths the engine analyses from now on."""
    seen, real = [], engine.check

    def check(source, path="<string>", *args, **kwargs):
        seen.append(path)
        return real(source, path, *args, **kwargs)

    monkeypatch.setattr(engine, "check", check)
    return seen


def _gf104(capsys) -> list[tuple[str, int]]:
    code, out, _ = run(capsys, ".", "--select", "GF104", "--format", "json")
    return [(f["path"], f["line"]) for f in json.loads(out)]


def test_a_finding_that_read_another_file_is_recomputed_when_that_file_changes(project, capsys, monkeypatch):
    # predict.py's finding rests on Block (two files away) holding dropout.
    assert _gf104(capsys) == [("predict.py", 17)]
    checked = _checked(monkeypatch)
    assert _gf104(capsys) == [("predict.py", 17)] and checked == []  # warm: nothing analysed
    (project / "pkg" / "blocks.py").write_text(BLOCKS.replace("nn.Dropout(0.1)", "nn.Identity()"))
    # Net is now mode-free: `.eval()` would change nothing, the finding goes; predict.py and
    # the file that changed are analysed again, the others are not.
    assert _gf104(capsys) == []
    assert sorted(checked) == ["pkg/blocks.py", "predict.py"]
    assert run(capsys, ".", "--select", "GF104", "--format", "json", "--no-cache")[1].strip() == "[]"


def test_an_edit_elsewhere_keeps_the_entries_that_did_not_read_it(project, capsys, monkeypatch):
    _gf104(capsys)
    checked = _checked(monkeypatch)
    (project / "other.py").write_text("import torch\n\n\ndef helper(x):\n    return x + 1\n")
    assert _gf104(capsys) == [("predict.py", 17)]
    assert checked == ["other.py"]


def test_a_new_file_is_a_new_layout(project, capsys, monkeypatch):
    # Which modules exist decides where `pkg.models.Net` is found: every entry is made again.
    _gf104(capsys)
    checked = _checked(monkeypatch)
    (project / "models.py").write_text("class Net:\n    pass\n")
    assert _gf104(capsys) == [("predict.py", 17)]
    assert "predict.py" in checked


def test_a_cached_entry_names_the_files_it_read(project, capsys):
    _gf104(capsys)
    (cache_file,) = entries(project)
    stored = json.loads(cache_file.read_bytes().partition(b"\n")[2])
    reads = {e["path"]: sorted(Path(p).name for p in e["reads"]) for e in stored.values()}
    assert reads["predict.py"] == ["blocks.py", "models.py"] and reads["other.py"] == []
