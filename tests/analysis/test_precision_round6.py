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
