"""Awkward and wrong fixes of the round-7 precision sample (bench/precision/verdicts7.tsv,
sample 5), one fixture per shape, written for these tests (the shapes seen in real code, not
copied from it)."""

from __future__ import annotations

import textwrap

import pytest

from gradfix import Settings, check, fix

GF304 = Settings(select=("GF304",), unsafe_fixes=True)


def _fix(source: str) -> str:
    fixed = fix(source, settings=GF304)
    compile(fixed, "<fixed>", "exec")
    assert fix(fixed, settings=GF304) == fixed  # idempotent
    return fixed


# A pre-1.5 optimizer: every update through `.data`, the loss re-evaluated by a closure.
LEGACY_OPTIMIZER = """\
import copy
import math
import torch
from torch.optim import Optimizer


class Momentum(Optimizer):
    def __init__(self, params, lr=0.1, beta=0.9):
        super().__init__(params, dict(lr=lr, beta=beta))

    def step(self, closure=None):
        \"\"\"One update.\"\"\"
        loss = None
        if closure is not None:
            loss = closure()
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = p.grad.data
                if grad.is_sparse:
                    raise RuntimeError("dense gradients only")
                state = self.state[p]
                if "buf" not in state:
                    state["buf"] = copy.deepcopy(p.data).zero_()
                    state["step"] = 0
                state["step"] += 1
                buf = state["buf"]
                buf.mul_(group["beta"]).add_(grad)
                scale = self._scale(group, state["step"])
                p.data.add_(buf, alpha=-scale)
        return loss

    def _scale(self, group, step):
        return group["lr"] / math.sqrt(step)
"""


def test_a_legacy_optimizer_step_is_decorated_and_its_closure_keeps_grad_mode():
    fixed = _fix(LEGACY_OPTIMIZER)
    assert fixed.count("no_grad") == 1 and "    @torch.no_grad()\n    def step(self, closure=None):" in fixed
    assert "            with torch.enable_grad():\n                loss = closure()\n" in fixed
    assert "p.add_(buf, alpha=-scale)" in fixed and "p.data.add_" not in fixed
    [finding] = check(LEGACY_OPTIMIZER, settings=GF304)
    assert "closure runs under `torch.enable_grad()`" in finding.fix_title


def _trained(source: str):
    torch = pytest.importorskip("torch")
    namespace: dict = {}
    exec(compile(source, "<optimizer>", "exec"), namespace)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.ReLU(), torch.nn.Linear(5, 1))
    x, y = torch.randn(8, 3), torch.randn(8, 1)
    opt = namespace["Momentum"](model.parameters())

    def closure():
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        return loss

    losses = [opt.step(closure).item() for _ in range(3)]
    return [p.detach().clone() for p in model.parameters()], losses


def test_the_rewritten_optimizer_trains_the_same():
    torch = pytest.importorskip("torch")
    before, losses_before = _trained(LEGACY_OPTIMIZER)
    after, losses_after = _trained(_fix(LEGACY_OPTIMIZER))
    assert losses_before == losses_after
    assert all(torch.equal(a, b) for a, b in zip(before, after))


def test_a_helper_gradfix_cannot_see_into_keeps_the_update_out_of_no_grad():
    """A call of another module's function in the update loop may do anything (build a graph
    the caller keeps): only the writes go under `no_grad`."""
    source = LEGACY_OPTIMIZER.replace("scale = self._scale(group, state[\"step\"])", "scale = projection(group, buf)")
    fixed = _fix(source)
    assert "@torch.no_grad()" not in fixed and "enable_grad" not in fixed
    assert "                with torch.no_grad():\n                    p.add_(buf, alpha=-scale)\n" in fixed


def test_an_update_that_stores_on_the_optimizer_keeps_it_out_of_no_grad():
    source = LEGACY_OPTIMIZER.replace("                buf = state[\"buf\"]\n", "                buf = state[\"buf\"]\n                self.last = grad * 2\n")
    fixed = _fix(source)
    assert "@torch.no_grad()" not in fixed


def test_an_update_loop_after_code_that_needs_grad_gets_one_with_around_it():
    source = LEGACY_OPTIMIZER.replace("        for group in self.param_groups:\n", "        norm = clip_norm(self.param_groups)\n        for group in self.param_groups:\n", 1)
    fixed = _fix(source)
    assert "@torch.no_grad()" not in fixed
    assert "        with torch.no_grad():\n            for group in self.param_groups:\n" in fixed
    assert "        norm = clip_norm(self.param_groups)\n        with" in fixed


def test_nested_loops_of_writes_get_one_with_around_the_outer_loop():
    source = textwrap.dedent(
        """\
        import numpy as np
        import torch


        def init_bilinear(weight, kernel):
            shape = weight.size()
            weight.data.fill_(0.0)
            for i in range(shape[0]):
                for j in range(shape[1]):
                    weight.data[i, j, :, :] = torch.from_numpy(kernel)
            return weight.mean()
        """
    )
    fixed = _fix(source)
    assert fixed.count("with torch.no_grad():") == 1
    assert "    with torch.no_grad():\n        weight.fill_(0.0)\n        for i in range(shape[0]):\n            for j in" in fixed


def test_an_init_loop_that_also_collects_the_weights_is_wrapped_whole():
    source = textwrap.dedent(
        """\
        import math
        import torch
        from torch import nn

        convs = []
        for m in net.modules():
            if isinstance(m, nn.Conv2d):
                n = m.kernel_size[0] * m.out_channels
                m.weight.data.normal_(0, math.sqrt(2.0 / n))
                convs.append(m.weight.data)
            elif isinstance(m, nn.BatchNorm2d):
                m.weight.data.fill_(1)
                m.bias.data.zero_()
        """
    )
    fixed = _fix(source)
    assert fixed.count("with torch.no_grad():") == 1 and "with torch.no_grad():\n    for m in net.modules():" in fixed
    assert "convs.append(m.weight.data)" in fixed  # a read, not a write: left as it is


def test_a_masked_write_into_a_grad_needs_no_with():
    source = textwrap.dedent(
        """\
        import torch


        def isinf(t):
            return t == float("inf")


        def finite_check(parameters):
            for p in parameters:
                bad = isinf(p.grad.data)
                p.grad.data[bad] = 0
        """
    )
    fixed = _fix(source)
    assert "no_grad" not in fixed and "                p.grad[bad] = 0\n".replace("        ", "", 1) in fixed


def test_a_size_loop_over_flat_parameters_is_decorated():
    source = textwrap.dedent(
        """\
        import numpy as np
        import torch


        def set_flat(model, flat):
            start = 0
            for param in model.parameters():
                size = int(np.prod(list(param.size())))
                param.data.copy_(flat[start : start + size].view(param.size()))
                start += size
            return model
        """
    )
    fixed = _fix(source)
    assert "@torch.no_grad()\ndef set_flat(model, flat):" in fixed and "param.copy_(flat[" in fixed


# torch imported only under the `__main__` guard: a decorator above it would raise NameError when
# the class is defined, and the block never runs when the module is imported.
MAIN_GUARD_IMPORT = """\
import math
import torch.nn as nn


class Backbone(nn.Module):
    def _init_weight(self):
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                m.weight.data.normal_(0, math.sqrt(2.0 / m.out_channels))
            elif isinstance(m, nn.BatchNorm2d):
                m.weight.data.fill_(1)
                m.bias.data.zero_()


if __name__ == "__main__":
    import torch
    print(Backbone())
"""


def test_an_import_under_the_main_guard_does_not_bind_torch_for_the_fix():
    fixed = _fix(MAIN_GUARD_IMPORT)
    assert fixed.startswith("import math\nimport torch\nimport torch.nn as nn\n")  # beside the torch import
    pytest.importorskip("torch")
    exec(compile(fixed, "<backbone>", "exec"), {"__name__": "backbone"})  # no NameError


# An evaluation adapter that a harness of another package calls: `run` saves the mode, switches
# to eval and gives the mode back; nothing in the file trains the model.
HARNESS_ADAPTER = """\
import torch


class Adapter:
    def __init__(self, model):
        self.model = model

    def score(self, batch):
        with torch.no_grad():
            return self.model(batch)

    def run(self, harness):
        was_training = self.model.training
        self.model.eval()
        results = harness.evaluate(self)
        if was_training:
            self.model.train()
        return results
"""


def test_giving_a_saved_mode_back_is_no_evidence_that_the_file_trains_the_model():
    settings = Settings(select=("GF104",))
    assert [f.code for f in check(HARNESS_ADAPTER, settings=settings)] == []
    trains = HARNESS_ADAPTER + "\n    def fit(self):\n        self.model.train()\n"
    assert [(f.code, f.line) for f in check(trains, settings=settings)] == [("GF104", 10)]


def test_an_attribute_the_class_binds_to_a_parameter_is_fixed_whatever_its_name():
    source = textwrap.dedent(
        """\
        import torch
        from torch import nn


        class NoisyLinear(nn.Module):
            def __init__(self, n):
                super().__init__()
                self.mu_W = nn.Parameter(torch.empty(n, n))
                self.register_parameter("sigma_g", nn.Parameter(torch.empty(n)))
                self.mu_bias = nn.Parameter(torch.empty(n))

            def reset(self, bound):
                self.mu_W.data.uniform_(-bound, bound)
                self.sigma_g.data.fill_(0.5)
                self.mu_bias.data.uniform_(-bound, bound)
        """
    )
    assert all(f.fix_title for f in check(source, settings=GF304))
    fixed = _fix(source)
    assert "    @torch.no_grad()\n    def reset(self, bound):\n        self.mu_W.uniform_(-bound, bound)\n        self.sigma_g.fill_(0.5)\n" in fixed


def test_a_write_to_the_optimizers_state_is_fixed_with_the_parameters():
    source = textwrap.dedent(
        """\
        import torch


        class Lookahead(torch.optim.Optimizer):
            def _update(self, group):
                for fast in group["params"]:
                    param_state = self.state[fast]
                    if "slow" not in param_state:
                        param_state["slow"] = torch.clone(fast.data).detach()
                    slow = param_state["slow"]
                    fast.data.mul_(0.5).add_(slow, alpha=0.5)
                    slow.data.copy_(fast)
        """
    )
    fixed = _fix(source)
    assert "    @torch.no_grad()\n    def _update(self, group):" in fixed
    assert "            fast.mul_(0.5).add_(slow, alpha=0.5)\n            slow.copy_(fast)\n" in fixed


INIT_BETWEEN_LAYERS = """\
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self, n_in, n_out):
        super().__init__()
        self.fc1 = nn.Linear(n_in, 50)
        self.fc1.weight.data.normal_(0, 0.1)  # small init
        self.out = nn.Linear(50, n_out)
        self.out.bias.data.fill_(0.5)
        self.out.weight.data.uniform_(-0.1, 0.1)
        self.head = nn.Linear(50, 1)
        self.head.bias.data.zero_()
"""


def test_a_lone_initialiser_between_layers_becomes_the_init_function():
    fixed = _fix(INIT_BETWEEN_LAYERS)
    assert fixed.count("no_grad") == 1  # two consecutive writes share one `with`
    assert "        nn.init.normal_(self.fc1.weight, 0, 0.1)  # small init\n" in fixed
    assert "        with torch.no_grad():\n            self.out.bias.fill_(0.5)\n            self.out.weight.uniform_(-0.1, 0.1)\n" in fixed
    assert "        nn.init.zeros_(self.head.bias)\n" in fixed


@pytest.mark.parametrize(
    "imports, prefix",
    [
        ("import torch\nfrom torch.nn import init\n", "init."),
        ("import torch\nimport torch.nn as tnn\n", "tnn.init."),
        ("import torch\n", "torch.nn.init."),
        ("import torch as T\n", "T.nn.init."),
    ],
)
def test_the_init_function_is_written_with_the_files_own_names(imports, prefix):
    source = imports + "\n\ndef reset(layer, std, x):\n    layer.weight.data.normal_(std=std)\n    return layer(x)\n"
    fixed = _fix(source)
    assert f"    {prefix}normal_(layer.weight, std=std)\n" in fixed


def test_a_chained_initialiser_keeps_the_with_and_a_shadowed_nn_is_not_written():
    chained = "import torch\n\n\ndef reset(w):\n    w.data.normal_(0, 1).clamp_(-2, 2)\n    return w * 2\n"
    assert "with torch.no_grad():\n        w.normal_(0, 1).clamp_(-2, 2)" in _fix(chained)
    shadowed = "import torch\nfrom torch import nn\n\n\ndef reset(w, nn):\n    w.data.zero_()\n    return nn(w)\n"
    assert "    torch.nn.init.zeros_(w)\n" in _fix(shadowed)  # `nn` is the parameter there


GF402 = Settings(select=("GF402",), unsafe_fixes=True)


def test_the_data_of_a_variable_drops_the_wrapper():
    source = "from torch.autograd import Variable\n\n\ndef weights(self):\n    return Variable(self.random_weights).data\n"
    fixed = fix(source, settings=GF402)
    assert "    return self.random_weights.data\n" in fixed and "Variable" not in fixed


# Batches from a loader wrapped by a progress bar and a timer, bound to a name first, and
# unwrapped element by element.
WRAPPED_LOADER = """\
from torch.autograd import Variable
from tqdm import tqdm


def train(model, data_loader, tools, cuda):
    progress = tqdm(tools.IteratorTimer(data_loader), ncols=100)
    for batch_idx, (data, target) in enumerate(progress):
        if cuda:
            data = [d.cuda(non_blocking=True) for d in data]
        data, target = [Variable(d) for d in data], [Variable(t) for t in target]
        model(data, target)
"""


def test_elements_of_a_wrapped_loaders_batch_drop_the_wrapper():
    findings = check(WRAPPED_LOADER, settings=GF402)
    assert [f.fix_title for f in findings] == ["Drop the wrapper: `d` (assumes the batch needs no grad)", "Drop the wrapper: `t` (assumes the batch needs no grad)"]
    fixed = fix(WRAPPED_LOADER, settings=GF402)
    assert "        data, target = [d for d in data], [t for t in target]\n" in fixed


def test_elements_of_a_fresh_list_read_again_keep_the_alias():
    source = "import torch\nfrom torch.autograd import Variable\n\n\ndef f(n):\n    xs = [torch.zeros(n), torch.ones(n)]\n    ys = [Variable(x) for x in xs]\n    return xs, ys\n"
    assert "ys = [x.detach() for x in xs]" in fix(source, settings=GF402)


def test_a_lone_initialiser_under_an_if_becomes_the_init_function_inside_it():
    source = textwrap.dedent(
        """\
        import torch
        from torch import nn


        class Constrained(nn.Module):
            def __init__(self, module, zero_bias, lr_mul):
                super().__init__()
                self.module = module
                if zero_bias:
                    self.module.bias.data.fill_(0)
                self.scale = lr_mul * 2
        """
    )
    fixed = _fix(source)
    assert "        if zero_bias:\n            nn.init.constant_(self.module.bias, 0)\n" in fixed and "no_grad" not in fixed


def test_a_forward_glued_to_the_next_by_torch_functions_gets_one_with():
    # a cache check: one forward, its output post-processed by torch functions, two more
    # forwards. The glue computes only on the outputs, so one block holds all three.
    source = textwrap.dedent("""\
        import torch
        import torch.nn.functional as F

        def check_cache(model, prompts):
            model.eval()
            logits, cache = model(prompts)
            picked = logits[:, -1].argmax(dim=-1, keepdim=True)
            prompts = torch.cat((prompts, picked), dim=-1)
            probs = F.softmax(logits, dim=-1)
            full = model(prompts)
            cached = model(prompts, cache=cache)
            assert torch.allclose(full, cached)
            print(probs.max())
        """)
    settings = Settings(select=("GF302",), unsafe_fixes=True)
    fixed = fix(source, settings=settings)
    assert fixed.count("with torch.no_grad():") == 1
    assert "    with torch.no_grad():\n        logits, cache = model(prompts)\n" in fixed
    assert "        cached = model(prompts, cache=cache)\n    assert" in fixed
    assert fix(fixed, settings=settings) == fixed


def test_building_a_module_between_forwards_is_no_glue():
    source = textwrap.dedent("""\
        import torch

        def compare(model, x):
            model.eval()
            a = model(x)
            head = torch.nn.Linear(4, 4)
            b = model(x)
            assert torch.equal(a, b), head
        """)
    fixed = fix(source, settings=Settings(select=("GF302",), unsafe_fixes=True))
    assert fixed.count("with torch.no_grad():") == 2
