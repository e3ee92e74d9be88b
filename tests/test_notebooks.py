"""Jupyter notebooks: findings per cell, fixes touch only the source of changed cells."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gradfix.cli import main
from gradfix.model import Span

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
    # Magic cells are analysed with the magic lines masked; only code that does not parse is skipped.
    assert "cell 6 skipped" in err and "cell 3" not in err and "cell 4" not in err
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
    assert code == 2 and "bad.ipynb:1:1: not a valid notebook" in out and "Traceback" not in err


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
    assert code == 2 and "cut.ipynb:1:1: not a valid notebook" in out and "internal error" not in err


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
    assert "m.ipynb:cell 2:1:6: GF101" in out and "skipped" not in err
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


def _code_cell(source):
    return {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": source}


def _sources(path: Path) -> list[str]:
    return ["".join(c["source"]) if isinstance(c["source"], list) else c["source"] for c in json.loads(path.read_text())["cells"]]


@pytest.mark.parametrize(
    "marker",
    ["# gradfix-notebook-cell 0", "# gradfix-notebook-cell 1", "# gradfix-notebook-context 0", "# gradfix-notebook-cell 7"],
)
def test_a_line_that_looks_like_a_cell_marker_is_user_code(tmp_path, capsys, monkeypatch, marker):
    # Issue 13: a marker-like line inside a string was taken as a cell boundary and --apply
    # deleted `import torch` and `DOC = ` (exit 0, "Fixed 1 finding").
    first = f'import torch\nDOC = """\n{marker}\n"""\nwith torch.no_grad:\n    y = 1\n'
    second = f"{marker}\nwith torch.no_grad:\n    z = 2\n"
    path = tmp_path / "nb.ipynb"
    write_notebook(path, [_code_cell(first), _code_cell(second)])
    code, out, err = run_cli(["--apply", "nb.ipynb"], capsys, monkeypatch, tmp_path)
    assert code == 0, out + err
    assert _sources(path) == [first.replace("no_grad:", "no_grad():"), second.replace("no_grad:", "no_grad():")]


def test_a_fixed_cell_that_does_not_compile_is_never_written(tmp_path):
    from gradfix.fixer import FixRun
    from gradfix.model import Finding
    from gradfix.notebook import process_notebook

    path = tmp_path / "nb.ipynb"
    raw = write_notebook(path, [_code_cell("x = 1\n"), _code_cell("y = 2\n")])
    finding = Finding("GF101", "name", "message", Span(2, 0, 2, 5))

    def broken_fix(text, findings):  # a rule bug: the fix of cell 2 leaves code that cannot compile
        return FixRun(text.replace("y = 2\n", "y = = 2\n").encode(), {0})

    result = process_notebook(raw, "nb.ipynb", lambda text: [finding], broken_fix, True)
    assert result.new_source is None
    assert any("cell 2 does not compile" in note for note in result.notes), result.notes


def test_magic_lines_are_masked_and_kept_byte_for_byte(tmp_path, capsys, monkeypatch):
    cells = [
        _code_cell(["%matplotlib inline\n", "import torch\n", "files = !ls -la  \n", "torch?\n",
                    "for f in files:\n", "    !echo $f\n", "with torch.no_grad:\n", "    y = 1"]),
        _code_cell(["%%time\n", "with torch.no_grad:\n", "    z = 2\n"]),
        _code_cell(["%%bash\n", "with torch.no_grad:\n"]),
    ]
    path = tmp_path / "m.ipynb"
    write_notebook(path, cells)
    code, out, err = run_cli(["m.ipynb"], capsys, monkeypatch, tmp_path)
    assert "m.ipynb:cell 1:7:6: GF101" in out and "m.ipynb:cell 2:2:6: GF101" in out
    assert "cell 3 skipped: cell magic %%bash (not Python)" in err
    code, out, err = run_cli(["--apply", "m.ipynb"], capsys, monkeypatch, tmp_path)
    assert code == 0, out + err
    sources = _sources(path)
    assert sources[0] == "".join(cells[0]["source"]).replace("no_grad:", "no_grad():")
    assert sources[1] == "".join(cells[1]["source"]).replace("no_grad:", "no_grad():")
    assert sources[2] == "".join(cells[2]["source"])


def test_a_fix_that_would_move_a_masked_line_leaves_the_notebook_unchanged(tmp_path, capsys, monkeypatch):
    # GF201's fix would indent the magic into a `with` block: never touch a masked line.
    from gradfix.notebook import mask_cell, unmask, CellMappingError

    # (the statement a `%time` runs stays visible after the placeholder, for the analysis)
    analysed = mask_cell("import torch\n%time x = 1\ny = 2\n", "n0nce", 0)
    masked = "_gradfix_magic_n0nce_0_1; x = 1"
    assert analysed.code == f"import torch\n{masked}\ny = 2\n"
    assert unmask(analysed, analysed.code) == "import torch\n%time x = 1\ny = 2\n"
    for moved in (f"import torch\nwith a:\n    {masked}\ny = 2\n", "import torch\ny = 2\n",
                  f"import torch\n{masked}\n{masked}\n", "import torch\n_gradfix_magic_n0nce_0_1; x = 2\ny = 2\n",
                  f"import torch\n{masked}\nq = _gradfix_magic_n0nce_0_1\n"):
        with pytest.raises(CellMappingError):
            unmask(analysed, moved)
    cells = [_code_cell("import torch\ndef f(x):\n    torch.set_grad_enabled(False)\n    %time y = x * 2\n"
                        "    torch.set_grad_enabled(True)\n    return y\n")]
    path = tmp_path / "e.ipynb"
    before = write_notebook(path, cells)
    code, out, err = run_cli(["--apply", "--unsafe-fixes", "--select", "GF201", "e.ipynb"], capsys, monkeypatch, tmp_path)
    assert "e.ipynb:cell 1:3:5: GF201" in out
    assert "cell 1, line 3: GF201 not fixed: its fix would change a line holding IPython syntax" in err
    assert "fixable" not in out + err
    assert code == 1 and path.read_bytes() == before


@pytest.mark.parametrize(
    "cells, message",
    [
        ('[1]', "cell 1 is not a JSON object"),
        ('["code"]', "cell 1 is not a JSON object"),
        ('[{"cell_type": "code", "source": null}]', "cell 1: 'source' is neither a string nor a list of strings"),
        ('[{"cell_type": "code", "source": 3}]', "cell 1: 'source' is neither a string nor a list of strings"),
        ('[{"cell_type": "code", "source": {"a": 1}}]', "cell 1: 'source' is neither a string nor a list of strings"),
        ('[{"cell_type": "code", "source": ["x = 1\\n", 2]}]', "cell 1: 'source' is a list holding something other than strings"),
        ('[{"cell_type": "code", "source": "x = \'\\ud800\'"}]', "cell 1: 'source' holds a lone surrogate"),
        ('[{"cell_type": 4, "source": ""}]', "cell 1: 'cell_type' is not a string"),
        ("[" * 5000 + "]" * 5000, "JSON nested too deeply"),
    ],
)
def test_malformed_notebooks_are_not_valid_notebooks(tmp_path, capsys, monkeypatch, cells, message):
    path = tmp_path / "bad.ipynb"
    path.write_text('{"nbformat": 4, "metadata": {}, "cells": ' + cells + "}")
    before = path.read_bytes()
    for args in (["bad.ipynb"], ["--apply", "bad.ipynb"]):
        code, out, err = run_cli(args, capsys, monkeypatch, tmp_path)
        assert code == 2, out + err
        assert f"bad.ipynb:1:1: not a valid notebook: {message}" in out, out + err
        assert "internal error" not in err and "Traceback" not in err
    assert path.read_bytes() == before


def test_cell_ids_and_names_never_choose_where_gradfix_writes(tmp_path, capsys, monkeypatch):
    tree = tmp_path / "tree"
    tree.mkdir()
    cells = [dict(_code_cell("import torch\nwith torch.no_grad:\n    y = 1\n"), metadata={"name": "../../outside.py"})]
    path = tree / "nb.ipynb"
    write_notebook(path, cells)
    data = json.loads(path.read_text())
    data["cells"][0]["id"] = "../../../outside"
    data["metadata"]["name"] = str(tmp_path / "escape.ipynb")
    path.write_text(json.dumps(data))
    code, _, _ = run_cli(["--apply", "."], capsys, monkeypatch, tree)
    assert code == 0
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["nb.ipynb", "tree"]
    assert _sources(path) == ["import torch\nwith torch.no_grad():\n    y = 1\n"]


def test_line_numbers_in_messages_are_cell_lines(tmp_path, capsys, monkeypatch):
    # A message naming "line 6" meant line 6 of the joined cells, not of the cell it is in.
    cells = [_code_cell("import torch\n"),
             _code_cell("def f(x):\n    torch.set_grad_enabled(False)\n    y = x * 2\n    torch.set_grad_enabled(True)\n    return y\n")]
    write_notebook(tmp_path / "t.ipynb", cells)
    code, out, err = run_cli(["--select", "GF201", "t.ipynb"], capsys, monkeypatch, tmp_path)
    assert "t.ipynb:cell 2:2:5: GF201" in out, out + err
    assert "… line 4: the closer" in out and "line 6" not in out, out


def test_a_future_import_opening_a_later_cell_does_not_block_the_fixes(tmp_path, capsys, monkeypatch):
    # Legal in a notebook (each cell runs alone); joined into one module it would not compile,
    # and every fix of the notebook was dropped as "does not compile".
    cells = [
        {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
         "source": "import torch\nfrom torch.autograd import Variable\n"},
        {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
         "source": "from __future__ import print_function\nx = Variable(torch.zeros(3))\n"},
    ]
    path = tmp_path / "f.ipynb"
    write_notebook(path, cells)
    code, _, err = run_cli(["--apply", "f.ipynb"], capsys, monkeypatch, tmp_path)
    sources = [c["source"] for c in json.loads(path.read_text())["cells"]]
    assert sources[1] == "from __future__ import print_function\nx = torch.zeros(3)\n", err
    assert "Variable" not in sources[0] and code == 0


def test_an_unknown_code_in_a_cells_suppression_comment_is_said(tmp_path, capsys, monkeypatch):
    cells = [
        {"cell_type": "markdown", "metadata": {}, "source": "# title"},
        {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
         "source": "import torch\nx = torch.ones(1)  # gradfix: ignore[GF999]\n"},
    ]
    write_notebook(tmp_path / "u.ipynb", cells)
    code, _, err = run_cli(["u.ipynb"], capsys, monkeypatch, tmp_path)
    assert "cell 2, line 2: unknown rule code GF999" in err and code == 0


def _two_cells_of_writes():
    return [
        _code_cell("import torch\nmodel = torch.nn.Linear(2, 2)\n"),
        _code_cell("# zero the biases\nmodel.bias.data.fill_(0)"),
        _code_cell("model.weight.data.normal_(std=0.01)"),
        _code_cell("with torch.no_grad:\n    y = model(torch.ones(2))\n"),
    ]


def test_consecutive_writes_in_two_cells_are_fixed_cell_by_cell(tmp_path, capsys, monkeypatch):
    path = tmp_path / "nb.ipynb"
    write_notebook(path, _two_cells_of_writes())
    code, out, err = run_cli(["--apply", "--unsafe-fixes", "--select", "GF304,GF101", "nb.ipynb"], capsys, monkeypatch, tmp_path)
    assert _sources(path)[1:] == [
        "# zero the biases\ntorch.nn.init.constant_(model.bias, 0)",
        "torch.nn.init.normal_(model.weight, std=0.01)",
        "with torch.no_grad():\n    y = model(torch.ones(2))\n",
    ]


def test_a_fix_spanning_two_cells_is_refused_and_the_others_are_made(tmp_path, capsys, monkeypatch):
    """A rule whose fix joins statements of two cells (here GF304 made blind to cell boundaries)
    cannot have it put back into the notebook. It is reported as not fixable (with the reason in
    JSON), the summary does not count it, and the notebook's other fixes are still made."""
    import gradfix.analysis.statements as statements

    monkeypatch.setattr(statements, "crosses_notebook_cell", lambda facts, first, last: False)
    cells = [
        _code_cell("import torch\nmodel = torch.nn.Linear(2, 2)\n"),
        _code_cell("# zero the biases\nmodel.bias.data.fill_(0)"),
        _code_cell("model.weight.data.normal_(std=0.01)"),
        _code_cell("with torch.no_grad:\n    y = model(torch.ones(2))\n"),
    ]
    path = tmp_path / "nb.ipynb"
    raw = write_notebook(path, cells)
    code, out, err = run_cli(["--diff", "--unsafe-fixes", "--select", "GF304,GF101", "nb.ipynb"], capsys, monkeypatch, tmp_path)
    assert "nb.ipynb:cell 2:2:1: GF304 in-place" in out + err, out + err  # no [*]
    assert "Would fix 1 finding in 1 file; 1 remaining." in out + err and "fixable" not in out + err, out + err
    assert "+with torch.no_grad():" in out, out  # the GF101 fix is still shown
    assert "cell 2, line 2: GF304 not fixed: its fix spans two notebook cells" in err, err
    assert path.read_bytes() == raw
    code, out, err = run_cli(
        ["--diff", "--unsafe-fixes", "--select", "GF304", "--format", "json", "nb.ipynb"], capsys, monkeypatch, tmp_path
    )
    (row,) = json.loads(out)
    assert row["fix"]["refused"] == "its fix spans two notebook cells"
    code, out, err = run_cli(["--apply", "--unsafe-fixes", "--select", "GF304,GF101", "nb.ipynb"], capsys, monkeypatch, tmp_path)
    assert _sources(path)[1:] == [
        "# zero the biases\nmodel.bias.data.fill_(0)",
        "model.weight.data.normal_(std=0.01)",
        "with torch.no_grad():\n    y = model(torch.ones(2))\n",
    ]


def _code(source: str) -> dict:
    return {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": source}


def test_an_import_a_skipped_cell_still_uses_is_kept(tmp_path, capsys, monkeypatch):
    """Round 10 (functional-zoo, DiscoGAN-pytorch): a Python 2 cell gradfix cannot parse still
    calls `Variable`; dropping `from torch.autograd import Variable` with the last parsed use
    would make that cell raise NameError."""
    cells = [
        _code("import torch\nfrom torch.autograd import Variable\nimport numpy as np\n"),
        _code("x = Variable(torch.zeros(3))\n"),
        _code("print x\ny = Variable(torch.ones(2))\n"),  # Python 2: skipped
    ]
    path = tmp_path / "nb.ipynb"
    write_notebook(path, cells)
    code, out, err = run_cli(["--apply", "nb.ipynb"], capsys, monkeypatch, tmp_path)
    assert "cell 3 skipped" in err
    fixed = [c["source"] for c in json.loads(path.read_text())["cells"]]
    assert fixed[0] == cells[0]["source"]  # the import stays
    assert fixed[1] == "x = torch.zeros(3)\n"
    assert fixed[2] == cells[2]["source"]
    # without the skipped cell the import goes, as before
    write_notebook(path, cells[:2])
    run_cli(["--apply", "nb.ipynb"], capsys, monkeypatch, tmp_path)
    assert "Variable" not in json.loads(path.read_text())["cells"][0]["source"]
