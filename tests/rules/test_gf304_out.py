"""GF304 on `out=` writes through `.data` (`torch.add(a, b, out=p.data)`): the spellings users
write, and what is left alone."""

from __future__ import annotations

import pytest

from gradfix import Settings, check, fix

SETTINGS = Settings(select=("GF304",), unsafe_fixes=True)


def _found(source):
    return [(f.line, bool(f.fix)) for f in check(source, settings=SETTINGS)]


@pytest.mark.parametrize(
    "imports, call",
    [
        ("import torch", "torch.mul(x, y, out=w.data)"),
        ("import torch as T", "T.mul(x, y, out=w.data)"),
        ("from torch import mul", "mul(x, y, out=w.data)"),
        ("import torch", "torch.special.expit(x, out=w.data)"),
        ("import torch", "torch.mul(x, y, out=w.data[0])"),
    ],
)
def test_an_out_write_through_data_is_fixed_under_no_grad(imports, call):
    source = f"{imports}\n\ndef mix(w, x, y, log):\n    {call}  # mixed\n    log.write('mixed')\n"
    assert _found(source) == [(4, True)]
    fixed = fix(source, settings=SETTINGS)
    # `import torch` goes right above the file's `from torch import ...`
    imports = f"import torch\n{imports}" if imports.startswith("from") else imports
    written = call.replace("w.data", "w")
    assert fixed == (
        f"{imports}\n\ndef mix(w, x, y, log):\n    with torch.no_grad():\n        {written}  # mixed\n    log.write('mixed')\n"
    ).replace("torch.no_grad", "T.no_grad" if imports == "import torch as T" else "torch.no_grad")


def test_crlf_and_a_keyword_spread_over_lines():
    source = "import torch\r\n\r\ndef clip(w):\r\n    torch.clamp(\r\n        w.data, -1, 1,\r\n        out=w.data)\r\n"
    fixed = fix(source, settings=SETTINGS)
    assert fixed == "import torch\r\n\r\n@torch.no_grad()\r\ndef clip(w):\r\n    torch.clamp(\r\n        w, -1, 1,\r\n        out=w)\r\n"


def test_an_ignore_comment_keeps_the_write():
    source = "import torch\n\ndef clip(w):\n    torch.clamp(w.data, -1, 1, out=w.data)  # gradfix: ignore[GF304]\n"
    assert _found(source) == []


@pytest.mark.parametrize(
    "call",
    [
        "torch.zeros(3, out=w.data)",
        "torch.randn(3, 4, out=w.data)",
        "torch.normal(0.0, 0.02, (3,), out=w.data)",
        "torch.fft.fftfreq(3, out=w.data)",
    ],
)
def test_a_factory_out_write_is_reported_without_a_fix_even_under_no_grad(call):
    source = f"import torch\n\ndef reinit(w):\n    {call}\n"
    [finding] = check(source, settings=SETTINGS)
    assert not finding.fix and finding.message == "in-place write through `.data` of `w` bypasses autograd's version checks"
    assert finding.no_fix == "a factory's `out=` on the tensor itself would clear its `requires_grad`"
    under = f"import torch\n\ndef reinit(w):\n    with torch.no_grad():\n        {call}\n"
    assert _found(under) == [(5, False)]


def test_under_no_grad_already_the_data_is_just_dropped():
    source = "import torch\n\ndef step(w, x):\n    with torch.no_grad():\n        torch.add(w.data, x, out=w.data)\n"
    fixed = fix(source, settings=SETTINGS)
    assert "torch.add(w.data, x, out=w)" in fixed  # only the written `.data`, as for in-place methods


@pytest.mark.parametrize(
    "body",
    [
        "np.add(a, b, out=weight.data)",  # NumPy's out=
        "torch.add(a, b, out=self.data)",  # an ordinary attribute
        "torch.add(a, b, out=weight)",  # no `.data`
        "y = torch.add(a, b, out=weight.data)",  # the result is bound: as `y = p.data.add_(1)`
        "torch.max(a, 0, out=(weight.data, idx))",  # a tuple of outputs
    ],
)
def test_left_alone(body):
    source = f"import numpy as np\nimport torch\n\nclass M:\n    def f(self, a, b, weight, idx):\n        {body}\n"
    assert _found(source) == []


def test_unknown_receiver_and_star_imported_torch():
    assert _found("import torch\n\ndef f(h, a):\n    torch.add(a, 1, out=h.data)\n") == [(4, False)]
    assert _found("from helpers import *\n\ndef f(w, a):\n    torch.add(a, 1, out=w.data)\n") == []


def test_an_out_write_followed_by_in_place_methods():
    """`torch.randn(n, out=p.data).mul_(s)` (a factory: no fix) and `torch.add(.., out=p.data).clamp_(..)`."""
    source = (
        "import torch\n\n"
        "def reset(model, sigma):\n    for p in model.parameters():\n        torch.randn(p.size(), out=p.data).mul_(sigma)\n\n"
        "def step(model, v):\n    for p, q in zip(model.parameters(), v):\n        torch.add(p.data, q, out=p.data).clamp_(-1, 1)\n"
    )
    assert _found(source) == [(5, False), (9, True)]
    assert "        torch.add(p, q, out=p).clamp_(-1, 1)\n" in fix(source, settings=SETTINGS)
