"""Where GF302 and GF304 put their `no_grad` (one helper, analysis/insertion.plan_no_grad):
the same shapes get the same placement, and the conservative cases stay narrow."""

from __future__ import annotations

import textwrap

import pytest

from gradfix import Settings, check, fix


def _fix(code: str, rule: str, source_bytes: bool = False):
    settings = Settings(select=(rule,), unsafe_fixes=True)
    src = textwrap.dedent(code).lstrip("\n")
    fixed = fix(src, "<test>", settings)
    assert fix(fixed, "<test>", settings) == fixed, "not idempotent"
    compile(fixed, "<test>", "exec")
    return fixed


# The same shape for both rules: statements needing no_grad in the branches of an `if` inside
# a loop, and in two consecutive loops separated by logging.
SHAPES = {
    "GF304": (
        """
        import torch
        def f(model, log):
            for m in model.modules():
                if isinstance(m, torch.nn.Linear):
                    m.weight.data.zero_()
                elif isinstance(m, torch.nn.Conv2d):
                    m.bias.data.zero_()
            print("init")
            for p in model.parameters():
                p.data.mul_(2)
            log.write("done")
        """
    ),
    "GF302": (
        """
        import torch
        def f(model, xs, log):
            model.eval()
            for x in xs:
                if x.dim() == 2:
                    log.append(model(x))
                elif x.dim() == 3:
                    log.append(model(x[0]))
            print("half")
            for x in xs:
                log.append(model(x))
            log.write("done")
        """
    ),
}


@pytest.mark.parametrize("rule", sorted(SHAPES))
def test_one_with_around_if_branches_and_consecutive_loops(rule):
    fixed = _fix(SHAPES[rule], rule)
    assert fixed.count("no_grad()") == 1, fixed
    lines = fixed.splitlines()
    with_line = next(i for i, l in enumerate(lines) if "with torch.no_grad():" in l)
    assert lines[with_line + 1].strip().startswith("for ")
    printed = next(l for l in lines if 'print("' in l)
    assert printed.startswith(" " * 8 + "print"), fixed  # inside the one block
    assert lines[-1].strip() == 'log.write("done")' and lines[-1].startswith("    log")


@pytest.mark.parametrize("rule", sorted(SHAPES))
def test_decorated_when_the_whole_body_would_be_wrapped(rule):
    code = SHAPES[rule].replace('    log.write("done")\n', "")
    fixed = _fix(code, rule)
    assert fixed.count("no_grad()") == 1 and "@torch.no_grad()\ndef f(" in fixed, fixed


def test_gf304_loop_with_a_forward_pass_is_not_wrapped_whole():
    fixed = _fix(
        """
        import torch
        def train(model, loader, opt):
            for x in loader:
                loss = model(x).sum()
                if loss.item() > 10:
                    for p in model.parameters():
                        p.data.mul_(0.5)
                loss.backward()
                opt.step()
        """,
        "GF304",
    )
    assert "@torch.no_grad()" not in fixed
    body = fixed.split("for x in loader:\n", 1)[1]
    assert body.startswith("        loss = model(x).sum()\n        if loss.item() > 10:\n            with torch.no_grad():\n"), fixed


def test_gf304_writes_in_only_one_branch_next_to_a_forward_wrap_that_branch():
    fixed = _fix(
        """
        import torch
        def step(model, x, reset):
            if reset:
                model.weight.data.zero_()
                model.bias.data.zero_()
            else:
                y = model(x)
                y.sum().backward()
        """,
        "GF304",
    )
    assert "    if reset:\n        with torch.no_grad():\n            model.weight.zero_()\n            model.bias.zero_()\n    else:\n        y = model(x)\n" in fixed, fixed


def test_gf304_a_returned_tensor_computed_next_to_the_writes_keeps_the_function_undecorated():
    fixed = _fix(
        """
        import torch
        def shrink(w):
            w.data.mul_(0.5)
            return w * 2
        """,
        "GF304",
    )
    assert "@torch.no_grad()" not in fixed and "    with torch.no_grad():\n        w.mul_(0.5)\n    return w * 2\n" in fixed


def test_comments_blank_lines_and_crlf_are_kept_when_a_loop_goes_in_whole():
    src = (
        "import torch\r\n\r\n"
        "def init(model, log):\r\n"
        "    # weights first\r\n"
        "    for m in model.modules():  # every module\r\n"
        "        if isinstance(m, torch.nn.Linear):\r\n"
        "\r\n"
        "            m.weight.data.zero_()  # zero\r\n"
        "        # nothing else\r\n"
        "    log.write('x')\r\n"
    )
    settings = Settings(select=("GF304",), unsafe_fixes=True)
    fixed = fix(src, "<test>", settings)
    assert fixed == (
        "import torch\r\n\r\n"
        "def init(model, log):\r\n"
        "    # weights first\r\n"
        "    with torch.no_grad():\r\n"
        "        for m in model.modules():  # every module\r\n"
        "            if isinstance(m, torch.nn.Linear):\r\n"
        "\r\n"
        "                m.weight.zero_()  # zero\r\n"
        "            # nothing else\r\n"
        "    log.write('x')\r\n"
    )
    assert fix(fixed, "<test>", settings) == fixed


def test_gf304_one_finding_per_block():
    code = textwrap.dedent(SHAPES["GF304"]).lstrip("\n")
    findings = [f for f in check(code, "<test>", Settings(select=("GF304",), unsafe_fixes=True))]
    assert len(findings) == 1 and "3 writes" in findings[0].message


def test_a_block_never_spans_two_notebook_cells(tmp_path, capsys, monkeypatch):
    """Writes in two cells with only an assignment between them: one `with` per cell (a block
    across cells cannot be mapped back), and both are fixed."""
    import json

    from gradfix.cli import main

    cells = [
        "import torch\nmodel = torch.nn.Embedding(4, 2)\nmodel.weight.data.copy_(torch.ones(4, 2))",
        "UNK = 0\nmodel.weight.data[UNK] = torch.zeros(2)",
    ]
    document = {
        "cells": [{"cell_type": "code", "execution_count": None, "id": f"c{i}", "metadata": {}, "outputs": [], "source": s} for i, s in enumerate(cells)],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    path = tmp_path / "nb.ipynb"
    path.write_text(json.dumps(document))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit):
        main(["check", "--apply", "--unsafe-fixes", "--select", "GF304", "nb.ipynb"])
    capsys.readouterr()
    sources = [c["source"] for c in json.loads(path.read_text())["cells"]]
    assert sources == [
        "import torch\nmodel = torch.nn.Embedding(4, 2)\nwith torch.no_grad():\n    model.weight.copy_(torch.ones(4, 2))",
        "UNK = 0\nwith torch.no_grad():\n    model.weight[UNK] = torch.zeros(2)",
    ]


def test_an_elif_is_never_wrapped_on_its_own():
    """Where the `if` cannot go in whole (a value it computes is read after the loop), each
    branch gets its own block: an `elif` moved into a `with` would become a separate `if`."""
    fixed = _fix(
        """
        import torch
        def init(model, log):
            for m in model.modules():
                if isinstance(m, torch.nn.Conv2d):
                    n = m.kernel_size[0]
                    m.weight.data.mul_(1.0 / n)
                elif isinstance(m, torch.nn.BatchNorm2d):
                    m.weight.data.add_(1)
                elif isinstance(m, torch.nn.Linear):
                    m.bias.data.sub_(1)
            log(n)
        """,
        "GF304",
    )
    assert fixed.count("        elif isinstance(") == 2 and fixed.count("with torch.no_grad():") == 3, fixed


def test_a_name_bound_again_in_the_loop_but_read_only_before_it_does_not_block_the_loop():
    """The ResNet `__init__`: `n = (depth - 2) // 6` is read before the init loop rebinds `n`;
    no read outside the loop sees the loop's value."""
    fixed = _fix(
        """
        import math
        import torch
        import torch.nn as nn
        class ResNet(nn.Module):
            def __init__(self, depth):
                super().__init__()
                n = (depth - 2) // 6
                self.layer1 = self._make_layer(16, n)
                for m in self.modules():
                    if isinstance(m, nn.Conv2d):
                        n = m.kernel_size[0] * m.kernel_size[1] * m.out_channels
                        m.weight.data.normal_(0, math.sqrt(2. / n))
                    elif isinstance(m, nn.BatchNorm2d):
                        m.weight.data.fill_(1)
        """,
        "GF304",
    )
    assert fixed.count("with torch.no_grad():") == 1 and "        with torch.no_grad():\n            for m in self.modules():\n" in fixed, fixed


def test_torch_init_calls_join_the_block():
    """`nn.init.*` already runs under no_grad: a loop of them and `.data` writes is decorated."""
    fixed = _fix(
        """
        import torch
        import torch.nn as nn
        def initialize_weights(*models):
            for model in models:
                for module in model.modules():
                    if isinstance(module, nn.Conv2d) or isinstance(module, nn.Linear):
                        nn.init.kaiming_normal_(module.weight)
                        if module.bias is not None:
                            module.bias.data.zero_()
                    elif isinstance(module, nn.BatchNorm2d):
                        module.weight.data.fill_(1)
        """,
        "GF304",
    )
    assert fixed.count("no_grad()") == 1 and "@torch.no_grad()\ndef initialize_weights" in fixed, fixed


def test_a_flag_set_in_the_loop_and_read_after_it_does_not_block_the_loop():
    """opacus' KF optimizer: `has_kf_d_t = False` is no tensor; the loop goes in whole."""
    fixed = _fix(
        """
        import torch
        def perturb(self, closure):
            found = True
            for p in self.params:
                state = self.state[p]
                if "d" not in state:
                    found = False
                    continue
                p.data.add_(state["d"], alpha=0.5)
            with torch.enable_grad():
                loss = closure()
            return loss if found else None
        """,
        "GF304",
    )
    assert "    with torch.no_grad():\n        for p in self.params:\n" in fixed, fixed


def test_gf304_a_setup_section_with_fresh_tensors_and_int_offsets_gets_one_with():
    """round5a's most common awkward shape: writes interleaved with fresh constructors, an
    integer offset and an `if bias:` branch of writes. One `with` holds the section, and what it
    binds (`bias`, `ptr`: the same values under `no_grad`) may be read after it."""
    fixed = _fix(
        """
        import torch as T
        def test_linear(layer, x, weights, has_bias):
            ptr = 0
            w = T.randn(2, 3)
            layer.weight.data.copy_(w)  # first
            ptr += layer.weight.numel()
            bias = T.zeros(2)
            if has_bias:
                layer.bias.data.copy_(bias)
            out = layer(x)
            assert T.allclose(out, x @ w.t() + bias), ptr
        """,
        "GF304",
    )
    assert fixed.count("no_grad") == 1
    assert "    with T.no_grad():\n        layer.weight.copy_(w)  # first\n        ptr += layer.weight.numel()\n" in fixed
    assert "        if has_bias:\n            layer.bias.copy_(bias)\n    out = layer(x)\n" in fixed


@pytest.mark.parametrize(
    "between",
    [
        "b = torch.randn(2, requires_grad=True)",  # a leaf that will be trained
        "b = layer.weight * 2",  # a tensor with history, read after
        "total += loss",  # not an integer offset
        "n += k",  # `k` is a parameter: a caller may pass a tensor
    ],
)
def test_gf304_statements_that_are_not_neutral_still_split_the_with(between):
    fixed = _fix(
        f"""
        import torch
        def f(layer, loss, k, total, n):
            layer.weight.data.mul_(0.5)
            {between}
            layer.bias.data.add_(1.0)
            return b if False else (total, n)
        """,
        "GF304",
    )
    assert fixed.count("with torch.no_grad():") == 2
