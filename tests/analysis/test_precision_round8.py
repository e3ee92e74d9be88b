"""Wrong and awkward findings of the round-8 precision sample (bench/precision/verdicts8.tsv,
sample 6), one fixture per shape, written for these tests (the shapes seen in real code, not
copied from it)."""

from __future__ import annotations

import json
import textwrap

from gradfix import Settings, check, fix
from gradfix.cli import main

GF304 = Settings(select=("GF304",), unsafe_fixes=True)
GF402 = Settings(select=("GF402",), unsafe_fixes=True)


def _fix(source: str, settings: Settings) -> str:
    fixed = fix(source, settings=settings)
    compile(fixed, "<fixed>", "exec")
    assert fix(fixed, settings=settings) == fixed  # idempotent
    return fixed


def test_a_graph_librarys_feature_mapping_is_not_a_tensors_data():
    # DGL: `g.nodes[t].data` is the node-feature mapping; a computed key proves nothing, the
    # graph built by `dgl.heterograph(..)` does.
    source = textwrap.dedent(
        """\
        import dgl, torch
        def load(edges, files, feats):
            g = dgl.heterograph(edges)
            for key in files:
                for ntype in feats[key]:
                    g.nodes[ntype].data[key[5:]] = torch.from_numpy(feats[key][ntype])
            return g
        """
    )
    assert check(source, "io.py", GF304) == []


def test_a_tensor_next_to_a_graph_is_still_reported():
    source = textwrap.dedent(
        """\
        import dgl, torch
        def load(edges, w):
            g = dgl.graph(edges)
            w.data[0] = 1.0
            return g
        """
    )
    assert [f.code for f in check(source, "io.py", GF304)] == ["GF304"]


SECTION = """\
import torch
from torch.autograd import Variable

x = torch.zeros(3)

# build the model
x = Variable(x)

def model(v):
    return v * 2
"""


def test_a_comment_above_a_dropped_self_assignment_stays_above_the_next_statement():
    fixed = _fix(SECTION, GF402)
    assert "Variable" not in fixed and "detach" not in fixed
    assert "# build the model\n\ndef model(v):" in fixed


def test_a_comment_above_the_last_statement_of_a_block_keeps_the_alias():
    source = textwrap.dedent(
        """\
        import torch
        from torch.autograd import Variable

        def run(loader, net):
            for data, target in loader:
                # wrap the batch
                data, target = Variable(data), Variable(target)
        """
    )
    fixed = _fix(source, GF402)
    assert "# wrap the batch\n        data, target = data.detach(), target.detach()" in fixed


PRELUDE = ["import torch\nfrom torch.autograd import Variable", "x = torch.zeros(3)"]


def _applied(tmp_path, monkeypatch, capsys, sources):
    """The cells of a notebook (PRELUDE, then ``sources``) after `gradfix --apply` of GF402."""
    path = tmp_path / "demo.ipynb"
    cells = [
        {"cell_type": "code", "execution_count": None, "id": f"c{i}", "metadata": {}, "outputs": [], "source": s}
        for i, s in enumerate([*PRELUDE, *sources])
    ]
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    monkeypatch.chdir(tmp_path)
    try:
        main(["--apply", "--unsafe-fixes", "--select", "GF402", "--no-cache", path.name])
    except SystemExit:
        pass
    capsys.readouterr()
    return [c["source"] for c in json.loads(path.read_text())["cells"]]


def test_in_a_notebook_the_comment_moves_within_its_cell(tmp_path, monkeypatch, capsys):
    cells = _applied(tmp_path, monkeypatch, capsys, ["# build the model\nx = Variable(x)\ny = x * 2"])
    assert cells[2] == "# build the model\ny = x * 2"


def test_a_cell_holding_only_the_self_assignment_keeps_the_alias(tmp_path, monkeypatch, capsys):
    cells = _applied(tmp_path, monkeypatch, capsys, ["# wrap it\nx = Variable(x)", "y = x * 2"])
    assert cells[2] == "# wrap it\nx = x.detach()" and cells[3] == "y = x * 2"


def test_batches_of_a_splits_data_handed_in_need_no_detach():
    # A 2017 book's `train(net, train_data, valid_data, ...)`: the batches of a split's data.
    source = textwrap.dedent(
        """\
        import torch
        from torch.autograd import Variable

        def train(net, train_data, valid_data, optimizer, criterion):
            for im, label in train_data:
                im = Variable(im.cuda())
                label = Variable(label.cuda())
                loss = criterion(net(im), label)
            for im, label in valid_data:
                im = Variable(im)
                print(net(im))
        """
    )
    fixed = _fix(source, GF402)
    assert "im = im.cuda()" in fixed and "label = label.cuda()" in fixed and ".detach()" not in fixed


def test_a_conditional_move_a_drawn_batch_and_a_shape_lender_keep_the_origin():
    # `x.cuda() if cuda else x` is one of its branches; `next(loader_iter)` draws a batch;
    # `expand_as(real)` takes only `real`'s shape.
    source = textwrap.dedent(
        """\
        import torch
        from torch.autograd import Variable

        def demo(model, a, cuda):
            image = torch.from_numpy(a).float()
            image = image.cuda() if cuda else image
            return model(Variable(image))

        def train(model, loader_iter, real, n):
            data, target = next(loader_iter)
            data = Variable(data)
            alpha = torch.rand(n, 1).expand_as(real)
            x = Variable(alpha * real.data, requires_grad=True)
            return model(data, x, target)
        """
    )
    fixed = _fix(source, GF402)
    assert "return model(image)" in fixed and "data = " not in fixed.split("next(loader_iter)")[1]
    assert "x = (alpha * real.data).requires_grad_()" in fixed and ".detach()" not in fixed


def test_a_branch_that_may_carry_a_graph_keeps_the_detach():
    source = textwrap.dedent(
        """\
        import torch
        from torch.autograd import Variable

        def f(model, a, h, reset):
            image = torch.zeros(3) if reset else h
            return model(Variable(image))
        """
    )
    assert "image.detach()" in _fix(source, GF402)


MASKED_CONV = """\
import torch
from torch import nn

class MaskedConv(nn.Module):
    def __init__(self, mask):
        super().__init__()
        self.conv = nn.Conv2d(1, 1, 3, padding=1)
        self.register_buffer("mask", mask)

    def forward(self, x):
        self.conv.weight.data *= self.mask
        return self.conv(x)
"""


def test_a_data_write_in_forward_is_reported_without_a_fix():
    findings = check(MASKED_CONV, "masked.py", GF304)
    assert [f.code for f in findings] == ["GF304"] and findings[0].fix is None


def test_why_the_forward_write_keeps_its_data():
    # The fact behind the refusal: the same conv applied twice in one graph; the `.data` write
    # bypasses the version check, the no_grad form trips it on backward.
    torch = __import__("pytest").importorskip("torch")
    namespace: dict = {}
    exec(MASKED_CONV, namespace)
    m = namespace["MaskedConv"](torch.ones(1, 1, 3, 3))
    x = torch.randn(1, 1, 4, 4)
    m(m(x)).sum().backward()  # works with .data
    fixed = MASKED_CONV.replace(
        "        self.conv.weight.data *= self.mask\n",
        "        with torch.no_grad():\n            self.conv.weight *= self.mask\n",
    )
    namespace = {}
    exec(fixed, namespace)
    m = namespace["MaskedConv"](torch.ones(1, 1, 3, 3))
    with __import__("pytest").raises(RuntimeError, match="inplace operation"):
        m(m(x)).sum().backward()


def test_batches_of_a_loader_picked_from_a_mapping_need_no_detach():
    source = textwrap.dedent(
        """\
        import torch
        from torch.autograd import Variable

        def train(net, dataloader, kwargs, phase):
            for x, y in dataloader[phase]:
                x = Variable(x)
                net(x, y)
            for x, y in kwargs['train_data']:
                x = Variable(x)
                net(x, y)
        """
    )
    assert ".detach()" not in _fix(source, GF402)


def test_a_training_driver_is_no_module():
    # Hugging Face's Trainer: `.train()` runs the training loop; `trainer.eval()` would raise.
    source = textwrap.dedent(
        """\
        import torch
        from transformers import Trainer

        trainer = Trainer(model_init=make_model, args=args)
        trainer.train()

        def predict(batch):
            with torch.no_grad():
                return trainer.model(batch)
        """
    )
    assert check(source, "ner.py", Settings(select=("GF104",))) == []


REBOUND = """\
import torch

def train(model, predictor, x, opt):
    model.train()
    predictor(model(x)).sum().backward()
    opt.step()

@torch.no_grad()
def test(model, predictor, x):
    predictor.eval()
    model = Infer(model.lin.weight.t())
    return predictor(model(x))

@torch.no_grad()
def test_moved(model, predictor, x):
    predictor.eval()
    model = model.to("cpu")
    return predictor(model(x))
"""


def test_a_parameter_rebound_to_a_new_object_is_that_object():
    # OGB's inference copy: `model` now names a new object built from the weights; the trained
    # argument is never run. A moved parameter is still the argument.
    findings = check(REBOUND, "gnn.py", Settings(select=("GF104",)))
    assert [(f.code, f.line) for f in findings] == [("GF104", 18)]


GF104 = Settings(select=("GF104",), unsafe_fixes=True)

SAMPLER = """\
import torch

def langevin(model, x, steps):
    was_training = model.training
    model.eval()
    x.requires_grad_(True)
    for _ in range(steps):
        (-model(x)).sum().backward()
        x.grad.zero_()
    model.train(was_training)
    return x.detach()

@torch.no_grad()
def score(x):
    return model(x)
"""


def test_a_backward_through_a_module_it_put_in_eval_mode_trains_nothing():
    # Langevin sampling (or an adversarial attack) takes gradients of the input through a
    # model it switched to eval mode first: that is no evidence the file trains the model.
    assert check(SAMPLER, "ebm.py", GF104) == []


def test_a_real_training_loop_next_to_the_sampler_is_still_evidence():
    source = SAMPLER + textwrap.dedent(
        """\

        def fit(model, opt, x):
            model.train()
            model(x).mean().backward()
            opt.step()
        """
    )
    assert [f.code for f in check(source, "ebm.py", GF104)] == ["GF104"]


REDEFINED = """\
import torch
from torch import nn

class Plain(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 4), nn.Tanh())

    def forward(self, x):
        return self.body(x)

class Drop(Plain):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5))

def fit(model, opt, x):
    model(x).sum().backward()
    opt.step()

def score(model, x):
    with torch.no_grad():
        return model(x)

x = torch.randn(2, 4)
model = Plain()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
fit(model, opt, x)
score(model, x)

def score(model, x):
    with torch.no_grad():
        return model(x).sum()

model = Drop()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
fit(model, opt, x)
score(model, x)
"""


def test_a_module_level_name_is_what_the_bindings_reaching_the_read_hold():
    # The first `score` only ever runs on the mode-free `Plain` bound before its call; it is
    # redefined before `model` holds a module with dropout (a notebook's cell after cell).
    findings = check(REDEFINED, "cells.py", GF104)
    assert [(f.code, f.line) for f in findings] == [("GF104", 33)]


PER_LOADER = """\
import torch

def fit(model, opt, x):
    model.train()
    model(x).sum().backward()
    opt.step()

def validate(model, train_loader, val_loader):
    scores = {}
    for name, loader in [("train", train_loader), ("val", val_loader)]:
        correct = 0
        with torch.no_grad():
            for x, y in loader:
                correct += int((model(x).argmax(1) == y).sum())
        scores[name] = correct
    return scores
"""


def test_eval_goes_before_the_loop_that_nothing_in_switches():
    fixed = _fix(PER_LOADER, GF104)
    assert "    scores = {}\n    model.eval()\n    for name, loader in" in fixed
    assert fixed.count("model.eval()") == 1


def test_eval_stays_in_a_loop_that_trains_between_evaluations():
    source = PER_LOADER.replace(
        "        correct = 0\n", "        fit(model, opt, x)\n        correct = 0\n"
    ).replace("def validate(model, train_loader, val_loader):", "def validate(model, train_loader, val_loader, opt, x):")
    fixed = _fix(source, GF104)
    assert "        correct = 0\n        model.eval()\n        with torch.no_grad():" in fixed


TAB_AFTER_SPACES = (
    "import torch\n"
    "class Net(torch.nn.Module):\n"
    "    def __init__(self, scale):\n"
    "        super().__init__()\n"
    "        self.conv = torch.nn.Conv2d(3, 3, 3)\n"
    "        for m in self.modules():\n"
    "            if isinstance(m, torch.nn.Conv2d):\n"
    "        \t    m.bias.data.zero_()\n"
)


def test_a_file_libcst_cannot_parse_promises_no_fix():
    # CPython accepts a tab after spaces in an indentation that LibCST's tokenizer rejects:
    # the finding stays, and says why it has no fix instead of promising one.
    compile(TAB_AFTER_SPACES, "dbpn.py", "exec")
    [finding] = check(TAB_AFTER_SPACES, "dbpn.py", GF304)
    assert finding.fix is None and finding.fix_title is None
    assert "LibCST could not parse" in finding.no_fix
    assert fix(TAB_AFTER_SPACES, settings=GF304) == TAB_AFTER_SPACES


def test_a_tab_after_spaces_that_libcst_reads_keeps_its_fix():
    source = "import torch\ndef init(m):\n    if m is not None:\n    \tm.bias.data.zero_()\n"
    [finding] = check(source, "init.py", GF304)
    assert finding.fix is not None and finding.no_fix is None


GF105 = Settings(select=("GF105",), unsafe_fixes=True)

FRESH_EACH_TIME = """\
import torch
from torch import nn

def fit(net, loader, epochs):
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    for _ in range(epochs):
        for x, y in loader:
            opt.zero_grad()
            nn.functional.cross_entropy(net(x), y).backward()
            opt.step()

def accuracy(net, x, y):
    net.eval()
    with torch.no_grad():
        return (net(x).argmax(1) == y).float().mean()

net = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.2), nn.Linear(8, 2))
fit(net, loader, 3)
print(accuracy(net, x, y))
other = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.5), nn.Linear(8, 2))
fit(other, loader, 3)
"""


def test_a_training_function_every_caller_hands_a_new_module_trains_in_train_mode():
    # Each call passes a module built just before it (train mode); the `.eval()` elsewhere
    # never reaches a call of `fit`.
    assert check(FRESH_EACH_TIME, "tut.py", GF105) == []


def test_a_caller_handing_in_an_evaluated_module_is_still_reported():
    source = FRESH_EACH_TIME + "fit(net, loader, 1)\n"
    assert [f.code for f in check(source, "tut.py", GF105)] == ["GF105"]
