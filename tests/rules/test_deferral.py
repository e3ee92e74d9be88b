"""A rule that leaves a shape to another rule does so only while that rule is enabled."""

from __future__ import annotations

import pytest

from gradfix import Settings, check, fix

TOGGLE_HACK = (
    "import torch\ndef f(x):\n    with torch.no_grad():\n        a = enc(x)\n"
    "        torch.set_grad_enabled(True)\n        b = head(a)\n        torch.set_grad_enabled(False)\n    return b\n"
)
VOLATILE = "import torch\nfrom torch.autograd import Variable\nv = Variable(torch.zeros(2), volatile=True)\n"


def _codes(source, **settings):
    return sorted(f.code for f in check(source, settings=Settings(**settings)))


@pytest.mark.parametrize(
    "source, owner, deferring",
    [(TOGGLE_HACK, "GF202", "GF201"), (VOLATILE, "GF401", "GF402")],
    ids=["GF201-defers-to-GF202", "GF402-defers-to-GF401"],
)
def test_the_shape_is_reported_once_and_by_the_other_rule_when_its_owner_is_ignored(source, owner, deferring):
    assert _codes(source, select=(owner, deferring)) == [owner]
    assert _codes(source, select=(deferring,)) == [deferring]
    assert _codes(source, select=("GF",), ignore=(owner,)).count(deferring) == 1


def test_gf201_fixes_the_toggle_hack_when_gf202_is_ignored():
    fixed = fix(TOGGLE_HACK, settings=Settings(select=("GF201",), unsafe_fixes=True))
    assert "with torch.enable_grad():\n            b = head(a)\n" in fixed
    assert "set_grad_enabled" not in fixed


def test_gf402_rewrites_volatile_calls_when_gf401_is_ignored():
    fixed = fix(VOLATILE, settings=Settings(select=("GF402",)))
    assert fixed == "import torch\nv = torch.zeros(2)\n"
    both = "from torch.autograd import Variable\nv = Variable(x, volatile=True, requires_grad=True)\n"
    assert _codes(both, select=("GF402",)) == ["GF402"]
    assert fix(both, settings=Settings(select=("GF402",), unsafe_fixes=True)) == both


MNIST_TEST = (
    "from torch.autograd import Variable\n\ndef test(model, test_loader):\n    for data, target in test_loader:\n"
    "        data, target = Variable(data, volatile=True), Variable(target)\n        model(data)\n"
)


def test_a_line_assigning_batches_to_themselves_goes_when_both_wrapper_rules_run():
    fixed = fix(MNIST_TEST, settings=Settings(select=("GF401", "GF402"), unsafe_fixes=True))
    # (the test loop needs no graph: it goes under `no_grad`, as `volatile=True` meant)
    assert fixed == (
        "import torch\n\ndef test(model, test_loader):\n    with torch.no_grad():\n"
        "        for data, target in test_loader:\n            model(data)\n"
    )


def test_the_line_stays_when_the_other_wrapper_rule_is_ignored():
    fixed = fix(MNIST_TEST, settings=Settings(select=("GF401",), unsafe_fixes=True))
    assert "        data, target = data, Variable(target)\n" in fixed


SAVE_BLOCK = "import torch\nwith torch.no_grad():\n    del outputs\n    torch.save(model.state_dict(), 'm.pt')\n"


def test_gf204_unwraps_a_block_with_a_save_when_gf203_is_ignored():
    assert _codes(SAVE_BLOCK, select=("GF203", "GF204")) == ["GF203"]
    assert _codes(SAVE_BLOCK, select=("GF204",)) == ["GF204"]
    fixed = fix(SAVE_BLOCK, settings=Settings(select=("GF204",)))
    assert fixed == "import torch\ndel outputs\ntorch.save(model.state_dict(), 'm.pt')\n"
