"""Jupyter notebooks: findings per cell, fixes touch only the source of changed cells."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gradfix.cli import main

CELLS = [
    {"cell_type": "markdown", "metadata": {}, "source": ["# Evaluate\n", "with torch.no_grad:\n", "    pass"]},
    {
        "cell_type": "code",
        "execution_count": 1,
        "metadata": {"scrolled": True},
        "outputs": [{"name": "stdout", "output_type": "stream", "text": ["héllo\n"]}],
        "source": ["import torch as T\n", "import torch.nn as nn"],
    },
    {"cell_type": "code", "execution_count": 2, "metadata": {}, "outputs": [], "source": ["%timeit x = 1"]},
    {"cell_type": "code", "execution_count": 3, "metadata": {}, "outputs": [], "source": ["!pip install torch"]},
    {
        "cell_type": "code",
        "execution_count": 4,
        "metadata": {},
        "outputs": [],
        "source": ["model = nn.Linear(2, 2)  # café\n", "with T.no_grad:\n", "    y = model(T.ones(2))"],
    },
    {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": "def broken(:\n"},
]


def write_notebook(path: Path, cells=CELLS, indent=1) -> bytes:
    cells = [{"id": f"cell-{i}", **cell} for i, cell in enumerate(cells)]
    document = {
        "cells": cells,
        "metadata": {"kernelspec": {"display_name": "Python 3", "name": "python3"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    data = (json.dumps(document, sort_keys=True, indent=indent, ensure_ascii=False) + "\n").encode()
    path.write_bytes(data)
    return data


def run_cli(args, capsys, monkeypatch, cwd):
    monkeypatch.chdir(cwd)
    with pytest.raises(SystemExit) as exit_info:
        main(list(args))
    out, err = capsys.readouterr()
    return exit_info.value.code, out, err


def test_findings_name_the_cell_and_imports_cross_cells(tmp_path, capsys, monkeypatch):
    write_notebook(tmp_path / "nb.ipynb")
    code, out, err = run_cli(["nb.ipynb"], capsys, monkeypatch, tmp_path)
    assert code == 1
    # `T` was imported in cell 2; the bug is on line 2 of cell 5.
    assert "nb.ipynb:cell 5:2:6: GF101 [*]" in out
    assert "cell 1" not in out  # markdown is never code
    assert "cell 3 skipped" in err and "cell 4 skipped" in err and "cell 6 skipped" in err
    code, out, _ = run_cli(["--format", "json", "nb.ipynb"], capsys, monkeypatch, tmp_path)
    (row,) = json.loads(out)
    assert (row["cell"], row["line"], row["column"]) == (5, 2, 6)


def test_apply_rewrites_only_changed_sources(tmp_path, capsys, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    path = tmp_path / "nb.ipynb"
    before = write_notebook(path)
    code, out, _ = run_cli(["--apply", "nb.ipynb"], capsys, monkeypatch, tmp_path)
    assert code == 0, out
    after = path.read_bytes()
    assert after == before.replace(b'"with T.no_grad:\\n"', b'"with T.no_grad():\\n"')
    notebook = nbformat.reads(after.decode(), as_version=4)
    nbformat.validate(notebook)
    assert notebook.cells[1].outputs[0]["text"] == "héllo\n"
    # Second run: nothing to do, byte-identical.
    code, _, _ = run_cli(["--apply", "nb.ipynb"], capsys, monkeypatch, tmp_path)
    assert code == 0 and path.read_bytes() == after


def test_notebook_without_fixes_is_byte_identical(tmp_path, capsys, monkeypatch):
    cells = [dict(CELLS[1]), {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": "x = 1"}]
    path = tmp_path / "clean.ipynb"
    before = write_notebook(path, cells, indent=2)
    code, _, _ = run_cli(["--apply", "."], capsys, monkeypatch, tmp_path)
    assert code == 0 and path.read_bytes() == before


def test_diff_is_per_cell_and_writes_nothing(tmp_path, capsys, monkeypatch):
    path = tmp_path / "nb.ipynb"
    before = write_notebook(path)
    code, out, _ = run_cli(["--diff", "nb.ipynb"], capsys, monkeypatch, tmp_path)
    assert code == 1 and path.read_bytes() == before
    assert "--- a/nb.ipynb:cell 5\n+++ b/nb.ipynb:cell 5\n" in out
    assert "-with T.no_grad:\n+with T.no_grad():\n" in out
    assert '"source"' not in out  # a readable diff, not raw JSON


def test_string_sources_and_no_notebooks_flag(tmp_path, capsys, monkeypatch):
    cells = [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
              "source": "import torch\nwith torch.no_grad:\n    y = x * 2\n"}]
    path = tmp_path / "s.ipynb"
    write_notebook(path, cells)
    code, out, _ = run_cli(["--no-notebooks", "."], capsys, monkeypatch, tmp_path)
    assert code == 0 and "s.ipynb" not in out
    code, _, _ = run_cli(["--apply", "."], capsys, monkeypatch, tmp_path)
    assert code == 0
    assert json.loads(path.read_text())["cells"][0]["source"] == "import torch\nwith torch.no_grad():\n    y = x * 2\n"


def test_invalid_notebook_is_a_clear_error(tmp_path, capsys, monkeypatch):
    (tmp_path / "bad.ipynb").write_text("{not json")
    code, out, err = run_cli(["bad.ipynb"], capsys, monkeypatch, tmp_path)
    assert code == 2 and "bad.ipynb:1:1: not a notebook" in out and "Traceback" not in err


def test_notebook_fixes_are_idempotent_when_one_fix_uncovers_another(tmp_path, capsys, monkeypatch):
    # GF101 makes the block a real grad context; GF204 then unwraps it (it does no tensor work).
    cells = [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
              "source": "import torch\nwith torch.no_grad:\n    pass\n"}]
    path = tmp_path / "n.ipynb"
    write_notebook(path, cells)
    code, _, _ = run_cli(["--apply", "."], capsys, monkeypatch, tmp_path)
    assert code == 0
    once = path.read_bytes()
    assert json.loads(once)["cells"][0]["source"] == "import torch\npass\n"
    code, _, _ = run_cli(["--apply", "."], capsys, monkeypatch, tmp_path)
    assert code == 0 and path.read_bytes() == once


def test_truncated_notebook_is_a_clear_error(tmp_path, capsys, monkeypatch):
    # A notebook cut off inside a string (seen in a real repository snapshot).
    (tmp_path / "cut.ipynb").write_text('{"cells": [{"cell_type": "markdown", "source": ["- how to use')
    code, out, err = run_cli(["cut.ipynb"], capsys, monkeypatch, tmp_path)
    assert code == 2 and "cut.ipynb:1:1: not a notebook" in out and "internal error" not in err


def test_imports_in_a_magic_cell_count_for_later_cells(tmp_path, capsys, monkeypatch):
    cells = [
        {"cell_type": "code", "execution_count": 1, "metadata": {}, "outputs": [],
         "source": ["%matplotlib inline\n", "import torch as T\n", "!nvidia-smi"]},
        {"cell_type": "code", "execution_count": 2, "metadata": {}, "outputs": [],
         "source": ["with T.no_grad:\n", "    y = T.ones(2) * 2\n"]},
    ]
    path = tmp_path / "m.ipynb"
    before = write_notebook(path, cells)
    code, out, err = run_cli(["m.ipynb"], capsys, monkeypatch, tmp_path)
    assert "m.ipynb:cell 2:1:6: GF101" in out and "cell 1 skipped" in err
    code, _, _ = run_cli(["--apply", "m.ipynb"], capsys, monkeypatch, tmp_path)
    assert code == 0
    after = json.loads(path.read_text())
    assert after["cells"][0]["source"] == cells[0]["source"]  # the magic cell is never rewritten
    assert after["cells"][1]["source"] == ["with T.no_grad():\n", "    y = T.ones(2) * 2\n"]
    assert path.read_bytes() != before


@pytest.mark.parametrize("first_cell_without_imports", [False, True])
def test_an_import_a_fix_needs_goes_to_the_first_code_cell(tmp_path, capsys, monkeypatch, first_cell_without_imports):
    from gradfix.rules import rule_by_code

    if rule_by_code("GF304") is None:
        pytest.skip("GF304 not available")
    cells = [
        {"cell_type": "markdown", "metadata": {}, "source": ["# SGD by hand"]},
        {"cell_type": "code", "execution_count": 1, "metadata": {}, "outputs": [],
         "source": ["from torch import nn\n", "net = nn.Linear(2, 2)\n"]},
        {"cell_type": "code", "execution_count": 2, "metadata": {}, "outputs": [],
         "source": ["for p in net.parameters():\n", "    p.data.add_(p.grad.data, alpha=-0.1)\n"]},
    ]
    if first_cell_without_imports:  # then the new import lands before the first cell's code
        cells[1]["source"] = ["net = make_net()\n"]
    path = tmp_path / "sgd.ipynb"
    write_notebook(path, cells)
    code, out, err = run_cli(["--apply", "--unsafe-fixes", "--select", "GF304", "sgd.ipynb"], capsys, monkeypatch, tmp_path)
    sources = ["".join(c["source"]) if isinstance(c["source"], list) else c["source"]
               for c in json.loads(path.read_text())["cells"]]
    if "no_grad" not in sources[2]:
        pytest.skip(f"GF304 did not fix this shape: {out}")
    assert "import torch\n" in sources[1] and "net = " in sources[1]
    assert sources[0] == "# SGD by hand"
    compile("\n".join(sources[1:]), "nb", "exec")
