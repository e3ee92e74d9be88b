"""Awkward rewrites and the false GF104 findings of the round-11 sample
(bench/precision/verdicts11.tsv), and the false findings of round 12 as first judged
(verdicts12.tsv), one fixture per shape, written for these tests: the facts each one showed to
be wrong, corrected in the shared analysis for every rule."""

from __future__ import annotations

import textwrap

import pytest
from pathlib import Path

from gradfix import Settings, check, fix
from gradfix.model import FixSafety

GF104 = Settings(select=("GF104",))
GF304 = Settings(select=("GF304",), unsafe_fixes=True)
GF401 = Settings(select=("GF401",), unsafe_fixes=True)
GF402 = Settings(select=("GF402",), unsafe_fixes=True)


def _fix(source: str, settings: Settings, path: str = "<string>") -> str:
    source = textwrap.dedent(source)
    fixed = fix(source, path, settings=settings)
    compile(fixed, "<fixed>", "exec")
    assert fix(fixed, path, settings=settings) == fixed  # idempotent
    return fixed


# -- GF304: one `with` per loop, or the decorator ------------------------------------------------
def test_an_init_loop_that_raises_for_an_unknown_parameter_goes_in_whole():
    # `raise ValueError(f"..")` does the same under no_grad: one `with` around the loop, not
    # one per branch
    fixed = _fix(
        """\
        import torch
        def init(model):
            for name, p in model.named_parameters():
                if name.endswith("weight"):
                    p.data.normal_(std=0.02)
                elif name.endswith("bias"):
                    p.data.zero_()
                else:
                    raise ValueError(f"uninitialised: {name}")
            model.train()
        """,
        GF304,
    )
    assert fixed.count("with torch.no_grad():") == 1
    assert "    with torch.no_grad():\n        for name, p in model.named_parameters():" in fixed
    assert "p.normal_(std=0.02)" in fixed and "p.zero_()" in fixed


def test_a_number_chosen_by_a_conditional_expression_joins_the_block():
    # two module-level init loops, the second computing a float ramp: one `with` around both
    fixed = _fix(
        """\
        import torch
        from model import model, N
        for name, p in model.named_parameters():
            if "proj" in name:
                p.data.zero_()
        for i, block in enumerate(model.blocks):
            ramp = i / (N - 1) if N > 1 else 0.0
            block.fc.weight.data.mul_(1.0 - 0.5 * ramp)
        """,
        GF304,
    )
    assert fixed.count("with torch.no_grad():") == 1
    assert "    for i, block in enumerate(model.blocks):\n        ramp = i" in fixed


def test_values_computed_from_data_alone_are_the_same_under_no_grad():
    # `torch.cumsum(w.data)` and what is computed from it need no grad whatever the mode: the
    # `if` and the write after it share one `with`
    fixed = _fix(
        """\
        import torch
        from torch import nn
        class Embedding(nn.Module):
            def __init__(self, n, d, smooth=False, scale=10.0):
                super().__init__()
                self.embedding = nn.Embedding(n, d)
                if smooth:
                    weight = torch.cumsum(self.embedding.weight.data, dim=0)
                    weight = weight / torch.arange(1, n + 1).to(weight).sqrt()[:, None]
                    self.embedding.weight.data[:] = weight
                self.embedding.weight.data /= scale
                self.scale = scale
        """,
        GF304,
    )
    assert fixed.count("with torch.no_grad():") == 1
    assert "        with torch.no_grad():\n            if smooth:" in fixed
    assert "            self.embedding.weight /= scale\n        self.scale = scale" in fixed


OPTIMIZER = """\
import torch
from math import sqrt
class Prodigy(torch.optim.Optimizer):
    def step(self, closure=None):
        loss = None
        if closure is not None:
            loss = closure()
        group = self.param_groups[0]
        lr = max(g["lr"] for g in self.param_groups)
        scale = sqrt(group["beta"])
        for group in self.param_groups:
            for p in group["params"]:
                p.data.mul_(scale)
        loss = closure()
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                p.data.add_(p.grad, alpha=-lr)
        return loss
"""


def test_an_optimizer_step_that_reevaluates_the_closure_in_the_middle_is_decorated():
    # torch.optim's own form: the whole step under no_grad, each closure under enable_grad
    fixed = _fix(OPTIMIZER, GF304)
    assert "    @torch.no_grad()\n    def step(self, closure=None):" in fixed
    assert fixed.count("with torch.enable_grad():") == 2
    assert "            with torch.enable_grad():\n                loss = closure()" in fixed
    assert "        with torch.enable_grad():\n            loss = closure()\n" in fixed
    assert ".data" not in fixed and "with torch.no_grad()" not in fixed


def test_a_step_that_calls_code_gradfix_cannot_see_is_not_decorated():
    source = OPTIMIZER.replace('        scale = sqrt(group["beta"])\n', '        scale = self.schedule(group)\n')
    fixed = _fix(source, GF304)
    assert "@torch.no_grad()" not in fixed
    assert fixed.count("with torch.no_grad():") == 2


# -- GF402: module constants and loaders handed in ------------------------------------------------
CONSTANT = """\
import torch
from torch.autograd import Variable

vgg_mean = torch.FloatTensor([103.9, 116.8, 123.7]).view(3, 1, 1)

def preprocess(x):
    return x * 255 - Variable(vgg_mean).type(x.type())

def restore(t):
    return (t + vgg_mean.expand_as(t)) / 255.0
"""


def test_a_module_constant_built_fresh_is_followed_into_functions():
    fixed = _fix(CONSTANT, GF402)
    assert "return x * 255 - vgg_mean.type(x.type())" in fixed
    assert "Variable" not in fixed


def test_a_module_name_a_function_may_rebind_or_make_require_grad_is_not_followed():
    rebinds = CONSTANT + "\ndef reset():\n    global vgg_mean\n    vgg_mean = torch.zeros(3, 1, 1)\n"
    assert "Variable(vgg_mean)" not in _fix(rebinds, GF402) and "vgg_mean.detach()" in _fix(rebinds, GF402)
    learns = CONSTANT + "\ndef learn():\n    vgg_mean.requires_grad_()\n"
    assert "vgg_mean.detach().type(x.type())" in _fix(learns, GF402)
    # a name the function binds for itself is its own, not the constant
    local = CONSTANT.replace("def preprocess(x):\n", "def preprocess(x, vgg_mean):\n")
    assert "vgg_mean.detach().type(x.type())" in _fix(local, GF402)


def test_a_constant_another_function_hands_to_a_parameter_keeps_the_alias():
    # the rewrite would hand the constant itself where the alias went, and a read elsewhere
    # that may make it require grad forbids that
    source = CONSTANT + "\ndef fit(opt):\n    return torch.nn.Parameter(vgg_mean)\n"
    assert "vgg_mean.detach().type(x.type())" in _fix(source, GF402)


LOADER = """\
import torch
from torch.autograd import Variable

def get_batch(batch):
    text = batch["text"][0]
    labels = batch["label"]
    text = Variable(text).long()
    labels = Variable(labels).long()
    return text, labels

def evaluate(model, data):
    for i, batch in enumerate(data):
        text, labels = get_batch(batch)
        model(text)

def main(model, train_data, val_data):
    evaluate(model, train_data)
    evaluate(model, val_data)
"""


def test_a_loader_every_caller_hands_in_is_a_loader():
    fixed = _fix(LOADER, GF402)
    assert "text = text.long()" in fixed and "labels = labels.long()" in fixed
    [finding, _] = check(textwrap.dedent(LOADER), settings=GF402)
    assert "batch" in finding.fix_title


def test_a_parameter_one_caller_hands_something_else_is_no_loader():
    source = LOADER + "\ndef probe(model, tensors):\n    evaluate(model, tensors)\n"
    fixed = _fix(source, GF402)
    assert "text.detach().long()" in fixed


def test_an_import_under_the_main_guard_goes_though_a_sibling_star_imports_the_file(tmp_path: Path):
    # a star import runs the module as a module: its `__main__` block and the imports there
    # never run, so no importer can take `Variable` from it
    script = tmp_path / "scaler.py"
    script.write_text(
        textwrap.dedent(
            """\
            import torch

            class Scaler:
                pass

            if __name__ == "__main__":
                from torch.autograd import Variable
                x = Variable(torch.randn(4, 3), requires_grad=False)
                w = Variable(torch.randn(3, 2), requires_grad=True)
                print((x @ w).sum())
            """
        )
    )
    (tmp_path / "train.py").write_text("from scaler import *\n")
    fixed = fix(script.read_text(), str(script), settings=GF402)
    assert "Variable" not in fixed
    assert "x = torch.randn(4, 3)\n" in fixed and "w = torch.randn(3, 2, requires_grad=True)" in fixed
    # at module level the import may be what the star import takes: it stays
    top = script.read_text().replace('if __name__ == "__main__":\n    from torch.autograd import Variable\n', "from torch.autograd import Variable\nif True:\n")
    script.write_text(top)
    assert "from torch.autograd import Variable" in fix(top, str(script), settings=GF402)


# -- GF401: the `with` around the outer loop ------------------------------------------------------
def test_the_no_grad_for_a_volatile_call_goes_around_an_outer_loop_of_index_arithmetic():
    fixed = _fix(
        """\
        import numpy as np
        import torch
        from torch.autograd import Variable
        def shard_scores(images, captions, score, size=128):
            d = np.zeros((len(images), len(captions)))
            for i in range(len(images) // size + 1):
                start, end = size * i, min(size * (i + 1), len(images))
                for j in range(len(captions) // size + 1):
                    lo, hi = size * j, min(size * (j + 1), len(captions))
                    im = Variable(torch.from_numpy(images[start:end]), volatile=True)
                    d[start:end, lo:hi] = score(im, captions[lo:hi]).data.numpy()
            return d
        """,
        GF401,
    )
    assert "    with torch.no_grad():\n        for i in range(" in fixed
    assert fixed.count("with torch.no_grad():") == 1
    assert "im = torch.from_numpy(images[start:end])" in fixed


def test_an_outer_loop_that_trains_keeps_the_with_inside():
    fixed = _fix(
        """\
        import torch
        from torch.autograd import Variable
        def run(model, opt, loader, val_loader):
            for epoch in range(3):
                for x in loader:
                    model(x).sum().backward()
                    opt.step()
                for x in val_loader:
                    out = model(Variable(x, volatile=True))
        """,
        GF401,
    )
    assert "        with torch.no_grad():\n            for x in val_loader:" in fixed


# -- GF104: an uncalled helper's parameter --------------------------------------------------------
NOTEBOOK_HELPERS = """\
import torch
from torch import nn

def get_model():
    model = nn.Sequential(nn.Conv2d(1, 8, 3), nn.ReLU(), nn.Flatten(), nn.Linear(8, 1){extra})
    return model, torch.optim.Adam(model.parameters())

def train_batch(x, y, model, opt):
    loss = (model(x) - y).pow(2).mean()
    loss.backward()
    opt.step()

def accuracy(x, y, model):
    with torch.no_grad():
        prediction = model(x)
    return (prediction > 0.5) == y

model, opt = get_model()
for x, y in loader:
    train_batch(x, y, model, opt)
"""


def test_an_uncalled_helper_shares_evidence_with_a_mode_free_model_only_by_name():
    assert check(NOTEBOOK_HELPERS.format(extra=""), settings=GF104) == []


def test_an_uncalled_helper_of_a_notebook_that_trains_dropout_is_still_reported():
    found = check(NOTEBOOK_HELPERS.format(extra=", nn.Dropout()"), settings=GF104)
    assert [(f.code, f.line) for f in found] == [("GF104", 15)]


# -- round 12, as first judged: facts about the module's mode on some paths ------------------------
GUARDED = """\
import torch
from torch import nn

def evaluate(net, batches):
    if isinstance(net, nn.Module):
        net.eval()
    with torch.no_grad():
        return [net(x) for x in batches]

def fit(net, batches, opt):
    net.train()
    for x in batches:
        net(x).sum().backward()
        opt.step()
"""


def test_a_path_where_the_object_failed_an_nn_module_test_has_no_mode():
    # d2l's `evaluate_accuracy_gpu`: `.eval()` under `if isinstance(net, nn.Module):` covers
    # every path on which `net` has a mode; `net.eval()` before the block would raise there
    assert check(GUARDED, settings=GF104) == []
    # a narrower class proves nothing about other modules
    narrower = GUARDED.replace("isinstance(net, nn.Module)", "isinstance(net, nn.Linear)")
    assert [(f.code, f.line) for f in check(narrower, settings=GF104)] == [("GF104", 8)]


LAST_BATCH = """\
import torch
from torch import nn
model = nn.Sequential(nn.Linear(2, 2), nn.Dropout())
opt = torch.optim.SGD(model.parameters(), lr=0.1)

for epoch in range(3):
    model.train()
    for x in loader:
        model(x).sum().backward()
        opt.step()

def validate(model, loader):
    model.eval()
    with torch.no_grad():
        return [model(x) for x in loader]

while True:
    model.train()
    steps = list(enumerate(loader))
    for i, x in tqdm(steps):
        model(x).sum().backward()
        opt.step()
        if i == len(steps) - 1:
            validate(model, loader)
"""
GF105 = Settings(select=("GF105",))


def test_validation_on_the_last_batch_of_an_epoch_leaves_no_step_in_eval_mode():
    assert check(LAST_BATCH, settings=GF105) == []
    # on any other batch it does: the next steps train in eval mode, reported at the loop
    # that does it, not at the notebook's first training loop
    every = LAST_BATCH.replace("if i == len(steps) - 1:", "if i % 100 == 0:")
    assert [(f.code, f.line) for f in check(every, settings=GF105)] == [("GF105", 21)]
    # ...and a step after the last-batch validation runs in eval mode too
    after = LAST_BATCH.replace("        model(x).sum().backward()\n        opt.step()\n        if", "        if") + "        model(x).sum().backward()\n        opt.step()\n"
    assert [f.code for f in check(after, settings=GF105)] == ["GF105"]


def test_a_write_through_data_to_a_global_becomes_its_in_place_method():
    # a notebook's `def optimize(lr): w.data -= lr * w.grad.data` with `w` a global: `w -= ..`
    # in the function would make `w` local and raise UnboundLocalError
    source = """\
        import torch
        w = torch.randn(3, requires_grad=True)

        def optimize(lr):
            w.data -= lr * w.grad.data

        def step(p, lr):
            p.data -= lr * p.grad

        def halve():
            w.data //= 2
        """
    fixed = _fix(source, GF304)
    assert "    w.sub_(lr * w.grad)\n" in fixed
    assert "    p -= lr * p.grad\n" in fixed  # its own name: rebinding it is fine
    assert "w.data //= 2" in fixed  # no in-place method for `//=`: reported without a fix
    pytest.importorskip("torch")  # the fixed code runs
    namespace: dict = {}
    exec(compile(fixed, "<fixed>", "exec"), namespace)
    namespace["w"].grad = namespace["torch"].ones(3)
    namespace["optimize"](0.5)  # runs: no UnboundLocalError


def test_a_lazy_modules_parameter_is_reported_without_a_fix():
    source = textwrap.dedent(
        """\
        import torch
        from torch import nn
        class LinearRegression(nn.Module):
            def __init__(self, sigma=0.01):
                super().__init__()
                self.net = nn.LazyLinear(1)
                self.net.weight.data.normal_(0, sigma)
                self.net.bias.data.fill_(0)
        """
    )
    found = check(source, settings=GF304)
    assert [f.line for f in found] == [7, 8] and not any(f.fix for f in found)
    # once it has run a forward its parameters exist: an update after `conv(X)` is fixed
    trained = textwrap.dedent(
        """\
        import torch
        from torch import nn
        conv = nn.LazyConv2d(1, kernel_size=(1, 2), bias=False)
        for i in range(10):
            conv(X).sum().backward()
            conv.weight.data[:] -= 0.03 * conv.weight.grad
        """
    )
    assert [f.fix for f in check(trained, settings=GF304)] == [FixSafety.UNSAFE]


def test_a_config_flag_named_for_the_torch_version_marks_a_version_branch():
    # Detectron.pytorch: `cfg.PYTORCH_VERSION_LESS_THAN_040` is set from torch.__version__ in
    # another module; the `volatile=True` call under it is the author's code for torch 0.3
    source = """\
import torch
from torch.autograd import Variable
from core.config import cfg

def im_detect(model, blob):
    if cfg.PYTORCH_VERSION_LESS_THAN_040:
        inputs = [Variable(torch.from_numpy(blob), volatile=True)]
    else:
        inputs = [torch.from_numpy(blob)]
    return model(*inputs)
"""
    assert check(source, settings=GF401) == []
    other = source.replace("cfg.PYTORCH_VERSION_LESS_THAN_040", "cfg.TEST.BBOX_AUG")
    assert [f.code for f in check(other, settings=GF401)] == ["GF401"]


def test_a_fresh_tensor_filled_with_a_size_needs_no_grad():
    fixed = _fix(
        """\
        import torch
        from torch.autograd import Variable
        def last_index(x):
            N, T = x.size()
            idx = torch.LongTensor(N).fill_(T - 1)
            return Variable(idx)
        """,
        GF402,
    )
    assert "    return idx\n" in fixed


def test_a_flagged_loader_batch_is_flagged_itself():
    # `Variable(data, volatile)` passes `volatile` as `requires_grad`: the batch, which nothing
    # else holds, is flagged in place, with no `.detach()` first
    fixed = _fix(
        """\
        import torch
        from torch.autograd import Variable
        def fit(model, data_loader, volatile=False):
            for batch_idx, (data, target) in enumerate(data_loader):
                data = Variable(data, volatile)
                output = model(data)
        """,
        GF402,
    )
    assert "        data = data.requires_grad_(volatile)\n" in fixed


NOTEBOOK_GLOBAL = """\
import torch
from torch import nn
model = nn.Sequential(nn.Linear(3, 32), nn.ReLU(), nn.Linear(32, 1))
opt = torch.optim.Adam(model.parameters())
for _ in range(4):
    opt.zero_grad()
    model(X).sum().backward()
    opt.step()

def accuracy(data):
    with torch.no_grad():
        return model(data).mean().item()

base = accuracy(X)
"""


def test_a_global_read_in_a_def_is_what_the_module_binds_when_defs_run():
    # the notebook's only `model` is mode-free: its helper's no_grad needs no `.eval()`
    assert check(NOTEBOOK_GLOBAL, settings=GF104) == []
    sensitive = NOTEBOOK_GLOBAL.replace("nn.ReLU()", "nn.Dropout()")
    assert [(f.code, f.line) for f in check(sensitive, settings=GF104)] == [("GF104", 12)]
    # a later binding the def may also see counts too (a call after it runs the def again)
    later = NOTEBOOK_GLOBAL + "model = nn.Sequential(nn.Linear(3, 1), nn.Dropout())\nprint(accuracy(X))\n"
    assert [f.code for f in check(later, settings=GF104)] == ["GF104"]


def test_only_the_bindings_in_force_when_a_def_runs_count():
    # an earlier cell's `model` (with dropout, in train mode) is not what the helper sees:
    # nothing calls it before the mode-free `model` of its own cell is bound
    earlier = (
        "from torch import nn\n"
        "model = nn.Sequential(nn.Linear(3, 1), nn.Dropout())\n"
        "def saliency(x):\n    return model(x)\n"
        "saliency(X)\n"
    )
    assert check(earlier + NOTEBOOK_GLOBAL, settings=GF104) == []
    # handed on as a callback, the helper may run anywhere: every binding counts again
    escaping = earlier + NOTEBOOK_GLOBAL + "run_later(accuracy)\n"
    escaping = escaping.replace("saliency(X)\n", "saliency(X)\nrun(accuracy)\n")
    assert [f.code for f in check(escaping, settings=GF104)] == ["GF104"]


ATTRIBUTE = """\
import numpy as np
import torch
from torch.autograd import Variable
from torch.nn import Module

class GridGen(Module):
    def __init__(self, h, w):
        super().__init__()
        self.grid = torch.from_numpy(np.zeros([h, w, 3], dtype=np.float32))

    def forward(self, x):
        self.batchgrid = torch.zeros(torch.Size([x.size(0)]) + self.grid.size())
        for i in range(x.size(0)):
            self.batchgrid[i] = self.grid
        self.batchgrid = Variable(self.batchgrid)
        return torch.bmm(self.batchgrid.view(x.size(0), -1, 3), x)
"""


def test_an_attribute_every_assignment_of_its_class_builds_fresh_is_fresh():
    # Detectron's grid generators: `self.batchgrid = Variable(self.batchgrid)` goes whole
    fixed = _fix(ATTRIBUTE, GF402)
    assert "Variable" not in fixed and "self.batchgrid = self.batchgrid" not in fixed
    assert "            self.batchgrid[i] = self.grid\n        return torch.bmm(" in fixed


def test_an_attribute_written_with_a_tensor_that_may_carry_a_graph_is_not_fresh():
    # an item written from the forward's input, or the attribute handed to an alias that is
    # then read elsewhere: the alias stays
    source = ATTRIBUTE.replace("self.batchgrid[i] = self.grid", "self.batchgrid[i] = x[i]")
    assert "self.batchgrid = self.batchgrid.detach()" in _fix(source, GF402)
    alias = ATTRIBUTE.replace("self.batchgrid = Variable(self.batchgrid)\n        return torch.bmm(self.batchgrid", "grid = Variable(self.batchgrid)\n        return torch.bmm(grid")
    assert "grid = self.batchgrid.detach()" in _fix(alias, GF402)


def test_no_decorator_where_torch_is_imported_only_under_a_condition():
    # transformers' test files: `if is_torch_available(): import torch` above a tester class
    # defined either way; a decorator would run at class definition and raise NameError
    # without torch, a `with` in the method runs only when the method does
    source = textwrap.dedent(
        """\
        from transformers import is_torch_available
        if is_torch_available():
            import torch

        class Tester:
            def check(self, model, x):
                model.eval()
                result = model(x)
                result = model(x, x)
        """
    )
    fixed = _fix(source, Settings(select=("GF302",), unsafe_fixes=True))
    assert "@torch.no_grad()" not in fixed and "        with torch.no_grad():\n" in fixed
    # imported either way, the decorator it is
    plain = source.replace("if is_torch_available():\n    import torch\n", "import torch\n")
    assert "    @torch.no_grad()\n    def check" in _fix(plain, Settings(select=("GF302",), unsafe_fixes=True))


def test_the_call_method_of_a_plain_helper_class_is_no_forward():
    source = textwrap.dedent(
        """\
        import torch
        class WeightDecay:
            def __call__(self, param, grad, group):
                if group['weight_decay'] != 0:
                    param.data.mul_(1.0 - group['lr'] * group['weight_decay'])
                return grad
        """
    )
    fixed = _fix(source, GF304)
    assert "    @torch.no_grad()\n    def __call__" in fixed and "param.mul_(1.0" in fixed
    module = source.replace("class WeightDecay:", "class WeightDecay(torch.nn.Module):")
    assert [f.fix for f in check(module, settings=GF304)] == [None]  # a module's forward: no fix
