"""False positives and wrong fixes of the round-6 precision sample (bench/precision/verdicts6.tsv,
sample 4), one fixture per shape, written for these tests (the shapes seen in real code, not
copied from it); each also checks that the true finding next to it stays.
"""

from __future__ import annotations

from gradfix import Settings, check, fix

MODES = Settings(select=("GF104", "GF105"))


def _found(source, settings=MODES):
    return [(f.code, f.line) for f in check(source, settings=settings)]


# A model from `from_pretrained` (eval mode) handed to an evaluation function: the caller's
# binding sets the mode, with no `.eval()` anywhere (a notebook's cells, at module level).
PRETRAINED_CALLER = """\
import torch
from transformers import AutoModelForSeq2SeqLM
from peft import get_peft_model


@torch.inference_mode()
def evaluate(model, data):
    total = 0.0
    for batch in data:
        total += model(**batch).loss.item()
    return total


model = AutoModelForSeq2SeqLM.from_pretrained("t5")
model = get_peft_model(model, cfg)
model = model.to("cuda")
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
print(evaluate(model, val))
for batch in train:
    loss = model(**batch).loss
    loss.backward()
    optimizer.step()
"""


def test_a_caller_whose_binding_is_in_eval_mode_owns_the_mode():
    assert _found(PRETRAINED_CALLER) == []
    trained = PRETRAINED_CALLER.replace('from_pretrained("t5")', 'from_pretrained("t5").train()')
    assert _found(trained) == [("GF104", 10)]


# The file guards torch itself with `if is_torch_available():` (transformers' test files): the
# fix writes `torch.no_grad()` with that import, and adds no top-level `import torch`, which would
# break the module where torch is absent.
CONDITIONAL_TORCH = """\
from transformers import is_torch_available

if is_torch_available():
    import torch
    from transformers import BertModel


class Tester:
    def check(self, config, ids):
        model = BertModel(config)
        model.eval()
        result = model(ids)
        self.assertEqual(result.shape, (1, 2))
"""


def test_a_conditional_torch_import_is_the_name_the_fix_writes():
    fixed = fix(CONDITIONAL_TORCH, settings=Settings(select=("GF302",), unsafe_fixes=True))
    assert "        with torch.no_grad():\n            result = model(ids)\n" in fixed
    assert fixed.count("import torch") == 1


def _codes(source, *codes):
    return [(f.code, f.line) for f in check(source, settings=Settings(select=codes))]


# The author's own train-mode method (it freezes the encoder and puts only the head in train
# mode): a call of it switches the module, as `.train()` does.
OWN_TRAIN_METHOD = """\
import torch
from torch import nn


class Probe(nn.Module):
    def __init__(self, encoder):
        super().__init__()
        self.encoder = encoder
        self.head = nn.Sequential(nn.Dropout(0.1), nn.Linear(8, 2))

    def train_head(self):
        self.head.train()

    def forward(self, x):
        return self.head(self.encoder(x))


def evaluate(probe, batches):
    probe.eval()
    with torch.no_grad():
        return [probe(x) for x in batches]


def train_epoch(probe, batches, opt):
    probe.train_head()
    for x, y in batches:
        opt.zero_grad()
        (probe(x) - y).pow(2).mean().backward()
        opt.step()
"""


def test_a_method_that_switches_its_own_object_is_a_switch():
    assert _codes(OWN_TRAIN_METHOD, "GF105") == []
    assert _codes(OWN_TRAIN_METHOD.replace("    probe.train_head()\n", ""), "GF105") == [("GF105", 27)]


# A reference forward before the training loop is no training step; a flag saved and given
# back (`was = m.training; m.eval(); ...; if was: m.train()`) undoes the `.eval()`.
REFERENCE_AND_RESTORE = """\
import torch
from torch import nn

model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5))


def validate(model, x):
    was = model.training
    model.eval()
    with torch.no_grad():
        out = model(x)
    if was:
        model.train()
    return out


def test_training_changes_outputs(x, opt):
    before = model(x)
    model.train()
    for _ in range(3):
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()
    model.eval()
    assert not torch.equal(before, model(x))
"""


def test_a_reference_forward_and_a_restored_flag_are_no_training_in_eval_mode():
    assert _codes(REFERENCE_AND_RESTORE, "GF105") == []


# Legacy API in a branch selected by torch's version is meant for that torch.
VERSION_BRANCHES = """\
import torch
from torch.autograd import Variable

version = torch.__version__


def log(loss, x):
    if int(version[0]) > 0 or int(version[2]) > 3:
        total = loss.item()
    else:  # torch 0.3
        total = loss.data[0]
        x = Variable(x, volatile=True)
    return total, x, loss.data[0]
"""


def test_legacy_api_in_a_torch_version_branch_is_not_reported():
    assert _codes(VERSION_BRANCHES, "GF401", "GF403") == [("GF403", 13)]


# A criterion of another package (warp-ctc returns a 1-element tensor) has the shape it
# chooses; full reductions (`v.max()`) are 0-dim like `v.mean()`.
CRITERIA = """\
import torch
from warpctc_pytorch import CTCLoss

ctc = CTCLoss()


def step(acts, labels, sizes, lengths, v):
    loss = ctc(acts, labels, sizes, lengths) / acts.size(1)
    return loss.data[0], v.max().data[0], v.mean().data[0]
"""


def test_a_foreign_criterion_is_not_0_dim_and_full_reductions_are():
    assert _codes(CRITERIA, "GF403") == [("GF403", 9), ("GF403", 9)]
    # a criterion rebound to itself moved to a device is still the foreign one (and no crash)
    moved = CRITERIA.replace("ctc = CTCLoss()\n", "ctc = CTCLoss()\nctc = ctc.cuda()\n")
    assert _codes(moved, "GF403") == [("GF403", 10), ("GF403", 10)]


# A model function handed back by a factory stands for the model's forward: its caller (often
# in another file) may differentiate what it returns.
MODEL_FN_FACTORY = """\
def get_model_fn(model, train=False):
    def model_fn(x, labels):
        if not train:
            model.eval()
            return model(x, labels)
        model.train()
        return model(x, labels)

    return model_fn


def score(model, x, labels):
    model.eval()
    return model(x, labels)
"""


def test_a_returned_model_function_owns_no_grad_mode():
    assert _codes(MODEL_FN_FACTORY, "GF302") == [("GF302", 13)]
