"""The project index (gradfix/analysis/project.py): one answer to "is this module
mode-sensitive?" across the files of a tree, used by GF104."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gradfix import Settings, check
from gradfix.analysis.project import FREE, SENSITIVE, UNKNOWN, ProjectIndex, Sensitivity
from gradfix.facts import build_facts

MODELS = """\
import torch.nn as nn
from .blocks import Block


class Head(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.fc = nn.Linear(n, 2)


class Net(nn.Module):
    def __init__(self, n=8):
        super().__init__()
        self.blocks = nn.Sequential(*[Block(n) for _ in range(2)])
        self.head = Head(n)


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = self._make(4)

    def _make(self, n):
        return nn.Sequential(nn.Linear(n, n), nn.ReLU(), Head(n))


def net8():
    return Net(8)
"""

BLOCKS = """\
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.fc = nn.Linear(n, n)
        self.drop = nn.Dropout(0.1)
"""

PREDICT = """\
import torch
from pkg.models import Net, Tiny

net = Net()
tiny = Tiny()
opt = torch.optim.SGD([*net.parameters(), *tiny.parameters()], lr=0.1)


def fit(loader):
    for x, y in loader:
        opt.zero_grad()
        (net(x) + tiny(x) - y).pow(2).mean().backward()
        opt.step()


def predict(x):
    with torch.no_grad():
        return net(x)


def curve(x):
    with torch.no_grad():
        return tiny(x)
"""


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "models.py").write_text(MODELS)
    (pkg / "blocks.py").write_text(BLOCKS)
    (tmp_path / "predict.py").write_text(PREDICT)
    return tmp_path


def _index(root: Path) -> ProjectIndex:
    return ProjectIndex.build([str(p) for p in root.rglob("*.py")])


def test_index_records_classes_functions_and_the_import_graph(tree):
    index = _index(tree)
    # The empty pkg/__init__.py defines and imports nothing: the text prefilter skips it.
    assert set(index.modules) == {"pkg.models", "pkg.blocks", "predict"}
    models = index.modules["pkg.models"]
    assert [c for c, _ in models.classes] == ["Head", "Net", "Tiny"]
    assert models.functions[-1] == "net8"
    graph = index.import_graph()
    assert graph["pkg.models"] == {"pkg.blocks"} and graph["predict"] == {"pkg.models"}


def test_sensitivity_is_transitive_across_files(tree):
    index = _index(tree)
    source = (tree / "predict.py").read_text()
    facts = build_facts(source, str(tree / "predict.py"))
    sens = Sensitivity(index, facts.tree, "predict")
    assert sens.of_qualname("pkg.models.Net") == SENSITIVE  # via Block's Dropout in another file
    assert sens.of_qualname("pkg.models.Tiny") == FREE  # Linear, ReLU, Head(Linear), via _make
    assert sens.of_qualname("pkg.models.net8") == SENSITIVE  # a factory returning Net
    assert sens.of_qualname("pkg.models.Missing") == UNKNOWN
    assert sens.of_qualname("torchvision.models.resnet18") == SENSITIVE
    alone = Sensitivity(None, facts.tree, "predict")
    assert alone.of_qualname("pkg.models.Net") == UNKNOWN  # no index: unknown, never free


def test_gf104_uses_the_index_for_classes_defined_in_other_files(tree):
    path = tree / "predict.py"
    settings = Settings(select=("GF104",))
    with_index = check(path.read_bytes(), str(path), settings, project=_index(tree))
    # `net` holds dropout (Block, two files away): reported. `tiny` is trained but mode-free:
    # `.eval()` would change nothing, silent.
    assert [(f.line, f.message.split("`")[1]) for f in with_index] == [(18, "net")]
    alone = check(path.read_bytes(), str(path), settings)
    # On its own the file cannot tell what Net and Tiny hold: unknown but trained, reported.
    assert [(f.line, f.message.split("`")[1]) for f in alone] == [(18, "net"), (23, "tiny")]


def test_opacus_layers_are_judged_like_the_torch_layers_they_replace():
    source = (
        "import torch.nn as nn\nfrom opacus.layers import DPLSTM\n"
        "class Classifier(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.emb = nn.Embedding(10, 4)\n        self.lstm = DPLSTM(4, 8, num_layers=1, batch_first=True)\n"
        "        self.out = nn.Linear(8, 2)\n"
        "class Deep(Classifier):\n    def __init__(self):\n        super().__init__()\n"
        "        self.lstm = DPLSTM(4, 8, num_layers=2, dropout=0.3)\n"
    )
    facts = build_facts(source)
    sens = Sensitivity(None, facts.tree, "")
    assert sens.of_qualname("Classifier") == FREE
    assert sens.of_qualname("Deep") == SENSITIVE


def test_the_cli_builds_the_index_once_per_run(tree, capsys):
    from gradfix.cli import main

    with pytest.raises(SystemExit):
        main([str(tree), "--select", "GF104", "--format", "json"])
    report = json.loads(capsys.readouterr().out)
    assert [(Path(f["path"]).name, f["line"]) for f in report] == [("predict.py", 18)]
    assert report[0]["fix"]["title"] == "Insert `net.eval()` before the block"


def test_digest_is_stable_and_follows_the_files_it_read(tree):
    first, again = _index(tree).digest(), _index(tree).digest()
    assert first == again
    (tree / "pkg" / "blocks.py").write_text(BLOCKS.replace("Dropout(0.1)", "Identity()"))
    changed = _index(tree)
    assert changed.digest() != first
    facts = build_facts(PREDICT, str(tree / "predict.py"))
    assert Sensitivity(changed, facts.tree, "predict").of_qualname("pkg.models.Net") == FREE


def test_a_file_changed_after_indexing_is_unknown_not_guessed(tree):
    index = _index(tree)
    (tree / "pkg" / "blocks.py").write_text(BLOCKS + "\n# edited\n")
    facts = build_facts(PREDICT, str(tree / "predict.py"))
    assert Sensitivity(index, facts.tree, "predict").of_qualname("pkg.models.Net") == UNKNOWN


def test_the_index_is_built_only_when_a_selected_rule_asks_it(tree):
    from gradfix.engine import Job, with_project_index
    from gradfix.model import Settings as S

    jobs = [Job(str(p), S(select=("GF102",)), p.name) for p in tree.rglob("*.py")]
    assert all(j.project is None for j in with_project_index(jobs))
    jobs = [Job(str(p), S(select=("GF104",)), p.name) for p in tree.rglob("*.py")]
    indexed = with_project_index(jobs)
    assert indexed[0].project is not None and all(j.project is indexed[0].project for j in indexed)


def test_a_class_whose_forward_reads_training_is_mode_sensitive():
    source = (
        "import torch.nn as nn\nimport torch.nn.functional as F\n"
        "class Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.fc = nn.Linear(4, 4)\n"
        "    def forward(self, x):\n        return F.dropout(self.fc(x), 0.5, training=self.training)\n"
        "class Plain(nn.Module):\n    def __init__(self, act_layer=nn.GELU):\n        super().__init__()\n"
        "        self.fc = nn.Linear(4, 4)\n        self.act = act_layer()\n"
    )
    sens = Sensitivity(None, build_facts(source).tree, "")
    assert sens.of_qualname("Net") == SENSITIVE
    assert sens.of_qualname("Plain") == UNKNOWN  # `act_layer()` could build anything


# -- names bound by `from module import *` -----------------------------------------------------

UTILS = """\
import torch
import torch.nn.functional as F
from torch.autograd import Variable


def to_var(x):
    return x
"""

EVALUATE = """\
from utils import *


def evaluate(model, loader):
    total = 0
    for x, y in loader:
        x = Variable(x, volatile=True)
        total += F.nll_loss(model(x), y).item()
    return total
"""


def _codes(root: Path, name: str, select=("GF401",)) -> list[tuple[str, int]]:
    path = root / name
    found = check(path.read_bytes(), str(path), Settings(select=select), project=_index(root))
    return [(f.code, f.line) for f in found]


def test_a_star_import_of_a_project_module_binds_what_it_imports(tmp_path):
    (tmp_path / "utils.py").write_text(UTILS)
    (tmp_path / "evaluate.py").write_text(EVALUATE)
    assert _codes(tmp_path, "evaluate.py") == [("GF401", 7)]
    # without the project, `Variable` could be anything: nothing is reported
    path = tmp_path / "evaluate.py"
    assert check(path.read_bytes(), str(path), Settings(select=("GF401",))) == []


def test_a_relative_star_import_and_a_star_import_inside_the_module(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "common.py").write_text("from torch.autograd import *\n\n\ndef f():\n    pass\n")
    (pkg / "utils.py").write_text("from .common import *\n")
    (pkg / "evaluate.py").write_text(EVALUATE.replace("from utils import *", "from .utils import *"))
    assert _codes(tmp_path, "pkg/evaluate.py") == [("GF401", 7)]


@pytest.mark.parametrize(
    "utils",
    [
        UTILS + '\n__all__ = ["to_var"]\n',  # `__all__` leaves Variable out
        UTILS + "\nVariable = object\n",  # the module rebinds the name: unknown
        UTILS.replace("from torch.autograd import Variable", "from mylib import Variable"),
        "from numpy import *\n",  # a module of no project and no torch: unknown
    ],
    ids=["__all__", "rebound", "other-library", "numpy"],
)
def test_a_star_import_binds_only_what_the_module_exports(tmp_path, utils):
    (tmp_path / "utils.py").write_text(utils)
    (tmp_path / "evaluate.py").write_text(EVALUATE)
    assert _codes(tmp_path, "evaluate.py") == []


def test_the_last_star_import_that_binds_a_name_wins(tmp_path):
    (tmp_path / "utils.py").write_text(UTILS)
    (tmp_path / "other.py").write_text("from mylib import Variable\n")
    (tmp_path / "evaluate.py").write_text(EVALUATE.replace("from utils import *", "from utils import *\nfrom other import *"))
    assert _codes(tmp_path, "evaluate.py") == []
    (tmp_path / "evaluate.py").write_text(EVALUATE.replace("from utils import *", "from other import *\nfrom utils import *"))
    assert _codes(tmp_path, "evaluate.py") == [("GF401", 8)]


def test_a_result_that_read_a_star_imported_module_follows_its_edits(tmp_path, capsys, monkeypatch):
    from gradfix import cli

    (tmp_path / "utils.py").write_text(UTILS)
    (tmp_path / "evaluate.py").write_text(EVALUATE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GRADFIX_CACHE_DIR", str(tmp_path / "cache"))

    def gf401() -> list[tuple[str, int]]:
        with pytest.raises(SystemExit):
            cli.main([".", "--select", "GF401", "--format", "json"])
        return [(f["path"], f["line"]) for f in json.loads(capsys.readouterr().out) if f["code"] == "GF401"]

    assert gf401() == [("evaluate.py", 7)]
    (tmp_path / "utils.py").write_text(UTILS.replace("from torch.autograd import Variable", "from mylib import Variable"))
    assert gf401() == []  # the cached entry read utils.py: it is not trusted any more


def test_a_package_init_resolves_its_relative_imports_against_the_package_itself(tmp_path):
    # `from .layers import Block` in pkg/nn/__init__.py reads pkg.nn.layers, not pkg.layers: a
    # class re-exported there is judged by its own definition (mode-free here)
    nn_pkg = tmp_path / "pkg" / "nn"
    nn_pkg.mkdir(parents=True)
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (nn_pkg / "__init__.py").write_text("from .layers import Block\nfrom . import layers\n")
    (nn_pkg / "layers.py").write_text(BLOCKS.replace("nn.Dropout(0.1)", "nn.Identity()"))
    (tmp_path / "pkg" / "layers.py").write_text(BLOCKS)  # a decoy with dropout at the wrong level
    (tmp_path / "train.py").write_text("from pkg.nn import Block\n")
    index = _index(tmp_path)
    facts = build_facts((tmp_path / "train.py").read_text(), str(tmp_path / "train.py"))
    sens = Sensitivity(index, facts.tree, "train")
    assert index.is_package("pkg.nn") and not index.is_package("pkg.nn.layers")
    assert sens.of_qualname("pkg.nn.Block") == FREE
