"""False positives found by the round-4 precision sample (bench/precision, sample 2), one fixture each.

The fixtures are written for these tests (shapes seen in real code, not copied from it).
"""

from __future__ import annotations

import ast

from gradfix import Settings, check
from gradfix.analysis.module_mode import module_sensitivity
from gradfix.analysis.project import FREE, SENSITIVE
from gradfix.facts import build_facts

# A module-level model rebound through `torch.compile` several times (a compile-bug repro):
# every binding of `net` is the same mode-free Sequential, however many times it is re-wrapped.
REWRAPPED = """\
import torch


def evaluate(net, x):
    with torch.no_grad():
        return net(x)


net = torch.nn.Sequential(torch.nn.Linear(8, 1), torch.nn.Tanh())
net = torch.compile(net)
evaluate(net, torch.randn(2, 8))
net = torch.nn.Sequential(torch.nn.Linear(8, 1), torch.nn.Tanh())
net = torch.compile(net)
net = net.cuda()
net = torch.compile(net)
net.train()
evaluate(net, torch.randn(2, 8))
"""


def _forward_in(facts, func_name):
    func = next(f for f in facts.functions if f.name == func_name)
    return next(c for c in facts.calls_in(func) if isinstance(c.func, ast.Name) and c.func.id == "net")


def test_rebinding_a_module_to_a_wrapper_of_itself_adds_no_new_kind_of_module():
    facts = build_facts(REWRAPPED)
    assert module_sensitivity(facts, "net", _forward_in(facts, "evaluate")) == FREE
    assert check(REWRAPPED, settings=Settings(select=("GF104",))) == []


def test_a_sensitive_binding_among_the_rewrapped_ones_still_counts():
    source = REWRAPPED.replace("torch.nn.Tanh())\nnet = torch.compile(net)\nnet = net.cuda()",
                               "torch.nn.Dropout())\nnet = torch.compile(net)\nnet = net.cuda()")
    facts = build_facts(source)
    assert module_sensitivity(facts, "net", _forward_in(facts, "evaluate")) == SENSITIVE
    assert [f.code for f in check(source, settings=Settings(select=("GF104",)))] == ["GF104"]


# A benchmark script: grad switched off once at the top, then the program runs at module level.
SCRIPT = """\
import torch

torch.manual_seed(0)
torch.set_grad_enabled(False)


class Block(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x) * 3


block = Block()
for _ in range(3):
    block(torch.randn(4))
"""

# A test module: pytest imports it, so the toggle leaks into every test collected after it.
TEST_MODULE = """\
import torch

torch.set_grad_enabled(False)
x = torch.randn(10)


def test_sum():
    assert x.sum().grad_fn is None
"""


def test_a_module_level_toggle_in_a_standalone_script_is_the_scripts_own_setting():
    assert check(SCRIPT, settings=Settings(select=("GF201",))) == []
    called = SCRIPT.replace("for _ in range(3):\n    block(torch.randn(4))\n", "y = Block()(torch.randn(4))\n")
    assert check(called, settings=Settings(select=("GF201",))) == []


def test_a_module_level_toggle_in_an_importable_module_is_still_reported():
    assert [f.code for f in check(TEST_MODULE, settings=Settings(select=("GF201",)))] == ["GF201"]
    # a `__main__` guard says the file is imported too, whatever else its top level runs
    guarded = SCRIPT + "\nif __name__ == '__main__':\n    print('done')\n"
    assert [f.code for f in check(guarded, settings=Settings(select=("GF201",)))] == ["GF201"]


# A memory benchmark pasted together with its fix: `step` trains, then a redefinition under
# no_grad only runs the forward. Nothing can run the first `step` (nothing at module level runs
# main before the redefinition, so main's call sees the second, like any later caller): it
# trains nothing and is no evidence that `model` is in train mode where the second runs it.
REDEFINED = """\
import torch


def step(model, n):
    out = model(torch.randn(n, 8))
    out.sum().backward()
    model.zero_grad()


def main(model):
    for n in (2, 4, 8):
        step(model, n)


@torch.no_grad()
def step(model, n):
    out = model(torch.randn(n, 8))
    total = out.sum()
"""


def test_a_redefined_function_is_not_the_one_its_callers_run():
    assert check(REDEFINED, settings=Settings(select=("GF104",))) == []


def test_the_first_definition_counts_while_a_call_can_see_it():
    # called at module level before the redefinition: the training def runs, `model` is trained
    live = REDEFINED.replace("\n\n@torch.no_grad()", "\nstep(net, 1)\n\n\n@torch.no_grad()")
    found = check(live, settings=Settings(select=("GF104",)))
    assert [(f.code, f.line) for f in found] == [("GF104", 19)]
    assert "trained at line 5" in found[0].message


# A benchmark that defines nothing: grad off at the top, then it prints its measurements. There
# is nothing to import from it but its variables; it runs as a program.
PRINTING_SCRIPT = """\
import torch as T
from timeit import timeit

T.set_grad_enabled(False)  # benchmark only
print('threads:', T.get_num_threads())
x = T.rand(128)
print('multinomial:', timeit(lambda: T.multinomial(x, 1), number=100))
"""


def _gf201(source: str) -> list[str]:
    return [f.code for f in check(source, settings=Settings(select=("GF201",)))]


def test_a_toggle_atop_a_file_that_only_runs_and_prints_is_the_scripts_setting():
    assert _gf201(PRINTING_SCRIPT) == []
    assert _gf201(PRINTING_SCRIPT.replace("\n", "\r\n")) == []
    assert _gf201(PRINTING_SCRIPT.replace("print('threads:', T.get_num_threads())\n", "")) == []


def test_a_toggle_in_a_module_others_import_is_still_reported():
    # a settings module: constants and torch's own configuration, imported for its effect
    settings = "import torch\ntorch.manual_seed(0)\ntorch.set_grad_enabled(False)\ntorch.set_num_threads(4)\nLR = 0.1\n"
    assert _gf201(settings) == ["GF201"]
    assert _gf201("import torch\ntorch.set_grad_enabled(False)\nSIZES = [torch.Size([2, 3])]\n") == ["GF201"]
    # a file with definitions is importable for them, whatever it prints
    library = PRINTING_SCRIPT + "\n\ndef sample(n):\n    return T.rand(n)\n"
    assert _gf201(library) == ["GF201"]
    demo_class = PRINTING_SCRIPT + "\n\nclass Probe:\n    pass\n"
    assert _gf201(demo_class) == ["GF201"]
    # a `__main__` guard says the file is imported too
    guarded = PRINTING_SCRIPT + "\nif __name__ == '__main__':\n    print('done')\n"
    assert _gf201(guarded) == ["GF201"]


# The same benchmark's kinds: the model is built mode-free, then handed to a helper that returns
# it wrapped (`return DataParallel(model)`), and a pasted snippet calls the evaluation at module
# level with a name nothing binds. Both keep the model's kind: the helper hands back the module
# it was given, and the pasted call raises NameError before it runs anything.
WRAPPED = """\
import torch
from torch import nn
import torch.nn.parallel as tp


def wrap(model):
    return tp.DataParallel(model)


def wrap_ddp(model, rank):
    model = tp.DistributedDataParallel(model, device_ids=[rank])
    return model


def fit(model, x):
    model(x).sum().backward()
    model.zero_grad()


def measure(model, x):
    with torch.no_grad():
        return model(x).sum()


def main(x, mode):
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU()).cuda()
    if mode == "dp":
        model = wrap(model)
    elif mode == "ddp":
        model = wrap_ddp(model, 0)
    fit(model, x)
    return measure(model, x)


measure(net, torch.randn(2, 8))
"""


def test_a_helper_that_returns_the_module_it_is_given_keeps_its_kind():
    assert check(WRAPPED, settings=Settings(select=("GF104",))) == []
    # ... the kind it keeps is the module's own: a Dropout inside is still reported
    sensitive = WRAPPED.replace("nn.ReLU()).cuda()", "nn.Dropout()).cuda()")
    assert [(f.code, f.line) for f in check(sensitive, settings=Settings(select=("GF104",)))] == [("GF104", 22)]
    # a helper that may hand back something else is no wrapper of it
    other = WRAPPED.replace("    return tp.DataParallel(model)\n", "    return tp.DataParallel(model) if model else build()\n")
    assert [f.code for f in check(other, settings=Settings(select=("GF104",)))] == ["GF104"]


def test_a_call_whose_argument_nothing_binds_passes_nothing():
    # once `net` is bound at module level (to a module of unknown kind), that call counts
    bound = "import zoo\n" + WRAPPED.replace("\n\nmeasure(net,", "\n\nnet = zoo.build()\nmeasure(net,")
    assert [f.code for f in check(bound, settings=Settings(select=("GF104",)))] == ["GF104"]
    star = "from zoo import *\n" + WRAPPED
    assert [f.code for f in check(star, settings=Settings(select=("GF104",)))] == ["GF104"]
