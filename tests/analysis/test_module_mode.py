"""Module-mode state and module kinds (gradfix/analysis/module_mode.py) on real shapes."""

from __future__ import annotations

import ast

import pytest

from gradfix import Settings, check
from gradfix.analysis.module_mode import (
    ENTRY,
    EVAL,
    TRAIN,
    TRAINED,
    all_train_at,
    evaluation_items,
    leaking_evals,
    leaves,
    mode_items,
    modes_at,
    module_sensitivity,
    trained_evidence,
)
from gradfix.analysis.project import FREE, SENSITIVE, UNKNOWN
from gradfix.facts import build_facts

CLASSIFIER = """\
import torch
from torch import nn
from opacus.layers import DPLSTM


class Classifier(nn.Module):
    def __init__(self, layers=1):
        super().__init__()
        self.emb = nn.Embedding(10, 4)
        self.lstm = DPLSTM(4, 8, num_layers=layers, batch_first=True)
        self.out = nn.Linear(8, 2)

    def forward(self, x):
        return self.out(self.lstm(self.emb(x))[0][:, -1])


def train(model, loader, opt):
    for x, y in loader:
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()


def test(model, loader):
    with torch.no_grad():
        return sum((model(x).argmax(-1) == y).sum().item() for x, y in loader)


model = Classifier().to("cpu")
opt = torch.optim.SGD(model.parameters(), lr=0.1)
model, opt, loader = engine.make_private(module=model, optimizer=opt, data_loader=loader)
train(model, loader, opt)
test(model, loader)
"""


def _call_in(facts, func_name, callee):
    func = next(f for f in facts.functions if f.name == func_name)
    return next(c for c in facts.calls_in(func) if isinstance(c.func, ast.Name) and c.func.id == callee)


def test_a_parameter_is_what_the_callers_pass_through_wrappers():
    """precision-fp.md (opacus tutorial): the model passed to `test` is a mode-free
    classifier, wrapped by `make_private`; `.eval()` would change nothing."""
    facts = build_facts(CLASSIFIER)
    assert module_sensitivity(facts, "model", _call_in(facts, "test", "model")) == FREE
    assert check(CLASSIFIER, settings=Settings(select=("GF104", "GF105"))) == []


def test_dropout_anywhere_in_what_is_wrapped_makes_it_sensitive():
    source = CLASSIFIER.replace("Classifier().to", "nn.Sequential(Classifier(), nn.Dropout()).to")
    facts = build_facts(source)
    assert module_sensitivity(facts, "model", _call_in(facts, "test", "model")) == SENSITIVE
    assert [f.code for f in check(source, settings=Settings(select=("GF104",)))] == ["GF104"]


def test_an_unknown_wrapper_result_is_unknown_and_another_functions_local_is_another_object():
    source = CLASSIFIER.replace("engine.make_private(module=model, optimizer=opt, data_loader=loader)", "build(model)")
    facts = build_facts(source)
    assert module_sensitivity(facts, "model", _call_in(facts, "test", "model")) == UNKNOWN
    other = "def other():\n    model = nn.Dropout()\n    return model\n"
    facts = build_facts(CLASSIFIER + other)
    assert module_sensitivity(facts, "model", _call_in(facts, "test", "model")) == FREE


def test_leaking_evals_are_real_eval_calls_only():
    facts = build_facts(CLASSIFIER.replace("    with torch.no_grad():", "    model.eval()\n    with torch.no_grad():"))
    (switch,) = leaking_evals(facts)["model"]
    assert facts.segment(switch) == "model.eval()"
    assert leaking_evals(build_facts(CLASSIFIER)) == {}


LIGHTNING = """\
import torch
import lightning as L


class Module(L.LightningModule):
    def model_step(self, batch):
        x, y = batch
        with torch.no_grad():
            feats = self.encoder(x)
            logits = self.head(feats)
        return torch.nn.functional.cross_entropy(logits, y)

    def training_step(self, batch, batch_idx):
        loss = self.model_step(batch)
        return {"loss": loss}
"""


def test_lightning_backpropagates_what_training_step_returns():
    findings = check(LIGHTNING, settings=Settings(select=("GF102", "GF103")))
    assert [(f.code, f.line) for f in findings] == [("GF103", 8)]
    findings = check(LIGHTNING, settings=Settings(select=("GF102",)))
    assert [(f.code, f.line) for f in findings] == [("GF102", 15)]
    fine = LIGHTNING.replace("        with torch.no_grad():\n            feats = self.encoder(x)\n            logits", "        feats = self.encoder(x)\n        logits")
    assert check(fine, settings=Settings(select=("GF102", "GF103"))) == []


SCRIPT_2017 = """\
import torch
from torch import nn


class Rnn(nn.Module):
    def __init__(self, n):
        super(Rnn, self).__init__()
        self.lstm = nn.LSTM(n, 32, 2, batch_first=True)
        self.classifier = nn.Linear(32, 10)


model = Rnn(28)
if torch.cuda.is_available():
    model = model.cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(3):
    for img, label in train_loader:
        loss = criterion(model(img), label)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    for img, label in test_loader:
        print(model(img))
"""


def test_a_mode_free_model_trained_after_eval_is_not_reported():
    """pytorch-beginner (2017): `.eval()` in the epoch loop is never undone, but the LSTM has no
    dropout and nothing else depends on the mode: training in eval mode changes nothing.
    `model = model.cuda()` is the same module."""
    facts = build_facts(SCRIPT_2017)
    use = next(c for c in facts.calls if isinstance(c.func, ast.Name) and c.func.id == "model")
    assert module_sensitivity(facts, "model", use) == FREE
    assert check(SCRIPT_2017, settings=Settings(select=("GF105",))) == []
    with_dropout = SCRIPT_2017.replace("32, 2, batch_first=True", "32, 2, batch_first=True, dropout=0.5")
    assert [f.code for f in check(with_dropout, settings=Settings(select=("GF105",)))] == ["GF105"]


# -- module-mode state along control flow (a join over the paths, not source order) ---------

TRAIN_FN = """\
import torch


def train(model, loader, opt):
    model.train()
    for x in loader:
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()

"""


def _modes_at_last_forward(source: str, func_name: str = "ev"):
    """The modes of `model` at the last `model(...)` call of ``func_name``, as an evaluation
    sees them (GF104's question)."""
    facts = build_facts(source)
    func = next(f for f in facts.functions if f.name == func_name)
    call = max(
        (c for c in facts.calls_in(func) if isinstance(c.func, ast.Name) and c.func.id == "model"),
        key=lambda c: (c.lineno, c.col_offset),
    )
    return modes_at(facts, func, call, evaluation_items(facts, func, {"model"}))


def _gf104_lines(source: str) -> list[int]:
    return [f.line for f in check(source, settings=Settings(select=("GF104",)))]


FLOW_SHAPES = [
    # (the body of `ev(model, x, c)`, ending in a forward of `model`; its modes there)
    ("    if c:\n        model.eval()\n", {ENTRY, EVAL}),  # the other path keeps the caller's mode
    ("    if c:\n        model.eval()\n    else:\n        model.train(False)\n", {EVAL}),
    ("    if not c:\n        model.eval()\n    else:\n        return None\n", {EVAL}),  # a return ends its path
    ("    if not c:\n        model.eval()\n    else:\n        raise ValueError(x)\n", {EVAL}),
    ("    try:\n        model.eval()\n        y = model(x)\n    finally:\n        model.train()\n", {TRAIN}),
    # a handler may start before the switch
    ("    try:\n        load(model)\n        model.eval()\n    except OSError:\n        pass\n", {ENTRY, EVAL}),
    # a `continue` carries the first iteration's state out of the loop
    ("    for i in x:\n        if i is None:\n            continue\n        model.eval()\n", {ENTRY, EVAL}),
    ("    while True:\n        if c:\n            break\n        model.eval()\n", {ENTRY, EVAL}),
    ("    while True:\n        model.eval()\n        if c:\n            break\n", {EVAL}),  # left by its break only
    ("    with open('log') as log:\n        model.eval()\n", {EVAL}),
    ("    model.eval()\n    model = Net()\n", {TRAINED}),  # a new module, in train mode
    ("    model.eval()\n    model = model.to('cpu')\n", {EVAL}),  # the same module
]


@pytest.mark.parametrize(("body", "modes"), FLOW_SHAPES)
def test_the_mode_at_a_forward_joins_the_paths_that_reach_it(body, modes):
    source = TRAIN_FN + "def ev(model, x, c):\n" + body + "    with torch.no_grad():\n        return model(x)\n"
    assert _modes_at_last_forward(source) == modes
    # a parameter rebound to a new module is the function's own object: with its constructor's
    # random weights, running it evaluates nothing (GF104 waits for loaded weights)
    assert bool(_gf104_lines(source)) == (bool(modes & {ENTRY, TRAINED}) and "= Net()" not in body)


def test_gf104_reports_the_path_in_train_mode():
    one_branch = TRAIN_FN + "def ev(model, x, c):\n" + FLOW_SHAPES[0][0] + "    with torch.no_grad():\n        return model(x)\n"
    assert _gf104_lines(one_branch) == [15]


def test_a_switch_at_the_end_of_a_loop_body_reaches_the_next_iteration():
    source = TRAIN_FN + (
        "def ev(model, xs):\n    for x in xs:\n        with torch.no_grad():\n            print(model(x))\n"
        "        model.eval()\n"
    )
    assert _modes_at_last_forward(source) == {ENTRY, EVAL}  # the first iteration runs in the caller's mode
    assert _gf104_lines(source) == [14]
    facts = build_facts(
        "def fit(model, loader, opt):\n    model.train()\n    for epoch in range(3):\n        for x in loader:\n"
        "            model(x).sum().backward()\n            opt.step()\n        model.eval()\n        score(model)\n"
        "        model.train()\n"
    )
    fit = facts.functions[0]
    use = next(c for c in facts.calls_in(fit) if isinstance(c.func, ast.Name) and c.func.id == "model")
    items = mode_items(facts, fit, {"model"})
    assert modes_at(facts, fit, use, items) == {TRAIN}
    assert all_train_at(facts, fit, [use], items, entry_train=False)


def test_a_helpers_summary_is_what_its_own_control_flow_leaves():
    source = TRAIN_FN + (
        "def prepare(model, fast):\n    if fast:\n        model.eval()\n\n"
        "def restore(model):\n    was = model.training\n    model.eval()\n    log(model)\n    model.train(was)\n\n"
        "def ev(model, x, fast):\n    prepare(model, fast)\n    with torch.no_grad():\n        return model(x)\n"
    )
    facts = build_facts(source)
    named = {f.name: f for f in facts.functions}
    assert leaves(facts, named["prepare"], {"model"}) == {ENTRY, EVAL}
    assert leaves(facts, named["restore"], {"model"}) == {ENTRY}  # `.train(was)` hands the mode back
    assert leaves(facts, named["train"], {"model"}) == {TRAINED}
    assert _modes_at_last_forward(source) == {ENTRY, EVAL}
    assert _gf104_lines(source) == [24]
    both = source.replace("    if fast:\n        model.eval()\n", "    model.eval()\n")
    assert _gf104_lines(both) == []


# -- a GAN generator sampled in train mode (the StarGAN shape, own fixture) -----------------

GAN_MODELS = """\
import torch.nn as nn


class Generator(nn.Module):
    def __init__(self, dim=8):
        super().__init__()
        self.main = nn.Sequential(
            nn.Conv2d(3, dim, 3), nn.InstanceNorm2d(dim, affine=True, track_running_stats=True), nn.ReLU()
        )

    def forward(self, x):
        return self.main(x)
"""

GAN_SOLVER = """\
import torch
from gan.models import Generator


class Solver:
    def build(self):
        self.G = Generator()
        self.g_opt = torch.optim.Adam(self.G.parameters())

    def train(self, loader):
        for x in loader:
            fake = self.G(x)
            self.g_opt.zero_grad()
            fake.mean().backward()
            self.g_opt.step()

    def test(self, loader):
        with torch.no_grad():
            return [self.G(x) for x in loader]
"""


def _gan_findings(root, solver: str):
    from gradfix.analysis.project import ProjectIndex

    pkg = root / "gan"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "models.py").write_text(GAN_MODELS)
    (pkg / "solver.py").write_text(solver)
    index = ProjectIndex.build([str(p) for p in root.rglob("*.py")])
    path = pkg / "solver.py"
    return check(path.read_bytes(), str(path), Settings(select=("GF104",)), project=index)


def test_a_generator_trained_here_and_sampled_without_eval_is_reported_without_a_fix(tmp_path):
    """yunjey/stargan `test()` (precision-fp.md, GF104 recall): G holds instance norm with
    running statistics (mode-sensitive, in another file), is trained by `train()` of the same
    class, and is sampled under `no_grad` with no `.eval()` anywhere. It does run in train
    mode, so GF104 says so; whether train-mode sampling is intended only the author knows
    (StarGAN samples that way everywhere): no fix."""
    (finding,) = _gan_findings(tmp_path / "a", GAN_SOLVER)
    assert finding.line == 19 and finding.fix is None
    assert "`self.G`" in finding.message and "GAN generator" in finding.no_fix
    # The file switches G to eval elsewhere: the convention is not in play, the usual fix is offered.
    switched = GAN_SOLVER + "\n    def show(self, x):\n        self.G.eval()\n        return self.G(x)\n"
    (finding,) = _gan_findings(tmp_path / "b", switched)
    assert finding.line == 19 and finding.fix is not None


def test_a_module_a_training_scope_only_runs_under_no_grad_is_not_trained_by_it():
    """A frozen teacher: the distillation step calls it under `no_grad` only, so the file does
    not train it, and a later check of the teacher alone keeps its caller's mode."""
    source = (
        "import torch\n\ndef distil(student, teacher, x, opt):\n    teacher.requires_grad_(False)\n    student.zero_grad()\n"
        "    with torch.no_grad():\n        t = teacher(x)\n    (student(x) - t).pow(2).mean().backward()\n    opt.step()\n\n"
        "def check_teacher(teacher, x):\n    with torch.no_grad():\n        return teacher(x)\n"
    )
    facts = build_facts(source)
    assert "teacher" not in trained_evidence(facts) and "student" in trained_evidence(facts)
    assert _gf104_lines(source) == []


def _gf302_lines(source: str) -> list[int]:
    return [f.line for f in check(source, settings=Settings(select=("GF302",)))]


def test_gf302_asks_whether_a_path_reaches_the_forward_in_the_eval_mode_it_set():
    """GF302 asks the same flow: the forward is an evaluation where some path reaches it in
    eval mode (udacity's `if train: model.train()` / `if not train: model.eval()` test still
    wastes a graph on both), not after a `.train()` on every path, nor after an `.eval()` whose
    path returned."""
    branch = "def test(model, x, train):\n    if train:\n        model.train()\n    if not train:\n        model.eval()\n    return model(x)\n"
    assert _gf302_lines(branch) == [5]
    returned = "def predict(model, x, fast):\n    if fast:\n        model.eval()\n        return None\n    return model(x)\n"
    assert _gf302_lines(returned) == []
    retrained = "def probe(model, xs):\n    model.eval()\n    print(model(xs[0]))\n    model.train()\n    return model(xs[1])\n"
    assert [f.message.split("line ")[1][:1] for f in check(retrained, settings=Settings(select=("GF302",)))] == ["3"]
    # `model = DataParallel(model).cuda()` is the same module, still in eval mode
    wrapped = "def evaluate(model, xs):\n    model = model.eval()\n    model = torch.nn.DataParallel(model).cuda()\n    return [model(x) for x in xs]\n"
    assert _gf302_lines("import torch\n" + wrapped) == [3]


def test_an_eval_that_an_early_return_carries_out_of_its_scope_leaks():
    """GF105's "the file puts it into eval mode elsewhere" follows the flow too: a `return`
    before the switch back leaves the module in eval mode; one inside `try` goes through the
    `finally` that restores it."""
    train = "def train(model, loader, opt):\n    for x in loader:\n        model(x).sum().backward()\n        opt.step()\n\n"
    early = train + (
        "def evaluate(model, x, quick):\n    model.eval()\n    if quick:\n        return model(x)\n"
        "    y = model(x)\n    model.train()\n    return y\n"
    )
    facts = build_facts(early)
    assert [facts.segment(c) for c in leaking_evals(facts)["model"]] == ["model.eval()"]
    assert [(f.code, f.line) for f in check(early, settings=Settings(select=("GF105",)))] == [("GF105", 3)]
    restored = train + (
        "def evaluate(model, x, quick):\n    model.eval()\n    try:\n        if quick:\n            return model(x)\n"
        "        return model(x) + 1\n    finally:\n        model.train()\n"
    )
    facts = build_facts(restored)
    assert leaking_evals(facts) == {}
    assert leaves(facts, next(f for f in facts.functions if f.name == "evaluate"), {"model"}) == {TRAINED}


def test_a_caller_or_enclosing_function_owns_the_mode_only_where_it_set_it_on_every_path():
    evaluate = "def evaluate(model, x):\n    with torch.no_grad():\n        return model(x)\n\n"
    owned = TRAIN_FN + evaluate + "def main(model, x):\n    model.eval()\n    print(evaluate(model, x))\n"
    assert _gf104_lines(owned) == []
    half = TRAIN_FN + evaluate + "def main(model, x, fast):\n    if fast:\n        model.eval()\n    print(evaluate(model, x))\n"
    assert _gf104_lines(half) == [13]  # called in the caller's mode when `fast` is false
    nested = TRAIN_FN + (
        "def fit(model, x, fast):\n    def val():\n        with torch.no_grad():\n            return model(x)\n"
        "    if fast:\n        model.eval()\n    return val()\n"
    )
    assert _gf104_lines(nested) == [14]
    assert _gf104_lines(nested.replace("    if fast:\n        model.eval()\n", "    model.eval()\n")) == []
