"""The provenance query (analysis/provenance.py) and the GF402 rewrites built on it: a name is
followed to the assignments that reach the call, conservatively."""

from __future__ import annotations

import ast
import textwrap

import pytest

from gradfix import Settings, fix
from gradfix.analysis.provenance import BATCH, COMPUTED, DATA, DETACHED, FRESH, origin, sole_holder
from gradfix.facts import build_facts


def _origin_of_last_variable_arg(code: str):
    src = textwrap.dedent(code).lstrip("\n")
    facts = build_facts(src)
    calls = [c for c in facts.calls if isinstance(c.func, ast.Name) and c.func.id == "Variable"]
    arg = calls[-1].args[0]
    found = origin(facts, arg)
    return (found.kind if found else None), facts, arg


HEADER = "import torch\nfrom torch.autograd import Variable\n"


@pytest.mark.parametrize(
    "body, kind",
    [
        ("x = torch.randn(n, 10)\ny = Variable(x)", FRESH),
        ("x = torch.zeros(3)\nif c:\n    x = x.cuda()\ny = Variable(x)", FRESH),
        ("if c:\n    x = torch.zeros(3)\nelse:\n    x = torch.ones(3)\ny = Variable(x)", FRESH),
        ("x = torch.zeros(3)\nif c:\n    x = f(x)\ny = Variable(x)", None),  # rebound in a branch
        ("x = torch.zeros(3)\nx += w\ny = Variable(x)", None),  # in place with an unknown operand
        ("x = torch.zeros(3)\nx += 1\ny = Variable(x)", FRESH),
        ("x = model.init_hidden()\ny = Variable(x)", None),
        ("y = Variable(n)", None),  # a parameter
        ("x = h.data\ny = Variable(x)", DATA),
        ("x = h.detach()\ny = Variable(x)", DETACHED),
        ("for x in xs:\n    pass\ny = Variable(x)", None),
        ("for batch in train_loader:\n    inputs, labels = batch\n    y = Variable(inputs)", BATCH),
        ("for data, target in train_loader:\n    data = data.cuda()\n    y = Variable(data)", BATCH),
        ("for data, target in train_loader:\n    data = prepare(data)\n    y = Variable(data)", None),
        ("x = torch.zeros(3)\nfor i in range(3):\n    y = Variable(x)\n    x = step(x)", None),  # rebound on the back edge
        ("try:\n    x = torch.zeros(3)\n    x = f(x)\nexcept E:\n    pass\ny = Variable(x)", None),
        ("with open(p) as x:\n    y = Variable(x)", None),
        ("global x\nx = torch.zeros(3)\ny = Variable(x)", None),
        ("x = torch.zeros(3)\ndef g():\n    nonlocal x\n    x = w\ny = Variable(x)", None),
        ("self.h = torch.zeros(3)\ny = Variable(self.h)", None),  # attribute targets are not followed
        ("if (x := torch.zeros(3)) is not None:\n    y = Variable(x)", FRESH),
        ("x = torch.zeros(3, requires_grad=True)\ny = Variable(x)", None),
        # computed only from grad-free tensors and constants (round 5: ShusenTang, tacotron2)
        ("y = Variable(torch.LongTensor([1, 2]) * 2)", COMPUTED),
        ("y = Variable(-h.data + 1.0)", COMPUTED),
        ("y = Variable(torch.atan2(h.data, h.data))", COMPUTED),
        ("y = Variable(torch.transpose(torch.zeros(2, 3), 0, 1))", COMPUTED),
        ("y = Variable(torch.cat([h.data, torch.ones(2)], dim=0))", COMPUTED),
        ("y = Variable(h.data.sum(1, keepdim=True))", COMPUTED),
        ("x = torch.zeros(3)\nx2 = x * 3\ny = Variable(x2)", COMPUTED),
        ("y = Variable(torch.zeros(2) * w)", None),  # an operand gradfix cannot follow
        ("y = Variable(h.data + w)", None),
        ("y = Variable(torch.transpose(w, 0, 1))", None),
        ("y = Variable(h.data.add(w))", None),
        ("y = Variable(h.data.requires_grad_())", None),  # may require grad afterwards
        ("y = Variable(torch.mul(h.data, 2, out=w))", None),
        ("y = Variable(torch.nn.functional.relu(h.data))", None),  # only `torch.*` itself
        ("y = Variable(torch.cat(parts))", None),
        ("for data, target in train_loader:\n    y = Variable(data * 2)", BATCH),
    ],
)
def test_origin_follows_reaching_assignments(body, kind):
    code = HEADER + "def f(n, c, h, w, xs, model, self):\n" + textwrap.indent(body, "    ") + "\n"
    assert _origin_of_last_variable_arg(code)[0] == kind


def test_module_level_names_used_by_a_function_are_unknown():
    code = HEADER + "x = torch.zeros(3)\ndef g():\n    x.requires_grad_()\ny = Variable(x)\n"
    assert _origin_of_last_variable_arg(code)[0] is None
    code = HEADER + "x = torch.zeros(3)\ny = Variable(x)\n"
    assert _origin_of_last_variable_arg(code)[0] == FRESH


@pytest.mark.parametrize(
    "body, holder",
    [
        ("x = torch.zeros(3)\ny = Variable(x)\nreturn y", True),
        ("x = torch.zeros(3)\nx.normal_(0, 1)\ny = Variable(x)\nreturn y", True),
        ("x = torch.zeros(3)\nprint(x.shape)\ny = Variable(x)\nreturn y", True),
        ("x = torch.zeros(3)\ny = Variable(x)\nreturn y, x", False),  # read again after the call
        ("x = torch.zeros(3)\nx.requires_grad_()\ny = Variable(x)", False),
        ("x = torch.zeros(3)\nx.add_(w)\ny = Variable(x)", False),  # w may carry a graph
        ("x = torch.zeros(3)\nself.buf = x\ny = Variable(x)", False),  # handed on
        ("x = torch.zeros(3)\nkeep(x)\ny = Variable(x)", False),
        ("x = torch.zeros(3)\ng = lambda: x\ny = Variable(x)", False),  # a closure sees it
        ("x = torch.zeros(3)\nfor i in range(2):\n    y = Variable(x)", False),  # the next iteration reads it
        ("x = torch.zeros(3)\nfor i in range(2):\n    x = torch.zeros(3)\n    y = Variable(x)", True),
    ],
)
def test_sole_holder(body, holder):
    code = HEADER + "def f(w, self, keep):\n" + textwrap.indent(body, "    ") + "\n"
    kind, facts, arg = _origin_of_last_variable_arg(code)
    assert kind == FRESH
    assert sole_holder(facts, arg) is holder


def _fix402(code: str, unsafe_fixes: bool = False) -> str:
    settings = Settings(select=("GF402",), unsafe_fixes=unsafe_fixes)
    src = textwrap.dedent(code).lstrip("\n")
    fixed = fix(src, "<test>", settings)
    compile(fixed, "<test>", "exec")
    assert fix(fixed, "<test>", settings) == fixed
    return fixed


def test_gf402_drops_the_wrapper_of_a_fresh_name_and_keeps_detach_for_unknown_calls():
    fixed = _fix402(
        """
        import torch
        from torch.autograd import Variable

        def sample(model, n):
            x = torch.randn(n, 10)
            y = Variable(x)
            h = model.init_hidden()
            z = Variable(h)
            return model(y, z)
        """
    )
    assert "    y = x\n" in fixed and "    z = h.detach()\n" in fixed and "Variable" not in fixed


def test_gf402_self_rebinding_of_a_fresh_name_removes_the_line():
    fixed = _fix402(
        """
        import torch
        from torch.autograd import Variable

        def init_hidden(bsz, n):
            hidden = torch.zeros(1, bsz, n)
            if torch.cuda.is_available():
                hidden = hidden.cuda()
            hidden = Variable(hidden)
            return hidden
        """
    )
    assert "hidden = hidden\n" not in fixed and "Variable" not in fixed
    assert fixed.endswith("        hidden = hidden.cuda()\n    return hidden\n")


def test_gf402_a_name_read_after_the_call_keeps_detach():
    fixed = _fix402(
        """
        import torch
        from torch.autograd import Variable

        def f(n):
            x = torch.zeros(n)
            y = Variable(x)
            y.requires_grad_()
            return x, y
        """
    )
    assert "    y = x.detach()\n" in fixed


def test_gf402_a_name_rebound_in_a_branch_keeps_detach():
    fixed = _fix402(
        """
        import torch
        from torch.autograd import Variable

        def f(n, enc, warm):
            x = torch.zeros(n)
            if warm:
                x = enc(x)
            return Variable(x)
        """
    )
    assert "    return x.detach()\n" in fixed


def test_gf402_crlf_and_comments_kept():
    src = "import torch\r\nfrom torch.autograd import Variable\r\n\r\ndef f(n):\r\n    x = torch.zeros(n)  # fresh\r\n    # wrap\r\n    y = Variable(x)  # legacy\r\n    return y\r\n"
    fixed = fix(src, "<test>", Settings(select=("GF402",)))
    assert fixed == "import torch\r\n\r\ndef f(n):\r\n    x = torch.zeros(n)  # fresh\r\n    # wrap\r\n    y = x  # legacy\r\n    return y\r\n"


def test_module_level_name_shadowed_by_a_function_parameter_is_still_followed():
    code = HEADER + "class Net:\n    def forward(self, x):\n        return x * 2\nx = torch.zeros(3)\ny = Variable(x)\n"
    assert _origin_of_last_variable_arg(code)[0] == FRESH


@pytest.mark.parametrize(
    "inner, followed",
    [
        ("f = lambda x: x + 1\n", True),  # the lambda's own parameter
        ("def g():\n    def h(x):\n        return x\n    return h\n", True),  # bound in h
        ("def g():\n    x = 1\n    def h():\n        return x\n    return h\n", True),  # g's own x
        ("def g():\n    def h():\n        return x\n    return h\n", False),  # the module's x
        ("def g():\n    x = 1\n    def h():\n        nonlocal x\n        x = 2\n", True),
        ("def g():\n    global x\n    x = torch.ones(3)\n", False),
    ],
)
def test_module_level_name_bound_by_an_inner_function_is_still_followed(inner, followed):
    code = HEADER + "x = torch.zeros(3)\n" + inner + "g()\ny = Variable(x)\n"
    assert _origin_of_last_variable_arg(code)[0] == (FRESH if followed else None)


def test_gf402_a_self_assignment_under_a_comment_is_not_removed_with_its_comment():
    fixed = _fix402(
        """
        import torch
        from torch.autograd import Variable

        im_data = torch.FloatTensor(1)
        im_info = torch.FloatTensor(1)

        # make variable
        im_data = Variable(im_data)
        im_info = Variable(im_info)
        print(im_data, im_info)
        """
    )
    assert fixed.endswith("\n# make variable\nim_data = im_data.detach()\nprint(im_data, im_info)\n"), fixed


def test_gf402_a_self_assignment_under_a_blank_line_goes_and_the_blank_line_stays():
    """round 5 (chenyuntc ch11): a blank line above `a = Variable(a)` used to leave `a = a`."""
    fixed = _fix402(
        """
        from torch.autograd import Variable


        def step(model, loader):
            for data in loader:
                a, b = data

                a = Variable(a)
                b = Variable(b)
                model(a, b).backward()
        """,
        unsafe_fixes=True,
    )
    assert fixed.endswith("        a, b = data\n\n        model(a, b).backward()\n"), fixed


def test_gf402_a_batch_self_assignment_that_must_stay_becomes_the_exact_alias_not_x_equals_x():
    code = """
        import torch
        from torch.autograd import Variable


        def step(model, loader):
            for data in loader:
                a, b = data
                # wrap the batch
                a = Variable(a)
                model(a, b).backward()

        def last(loader):
            for x in loader:
                print(x)

                x = Variable(x)

        a = torch.zeros(3)
        b = torch.ones(3)
        with torch.no_grad():
            a = Variable(a)
            b = Variable(b)
        """
    fixed = _fix402(code, unsafe_fixes=True)
    assert fixed.endswith("with torch.no_grad():\n    a = a.detach()\n    b = b.detach()\n"), fixed  # the block keeps them
    assert "        # wrap the batch\n        a = a.detach()\n" in fixed, fixed
    assert "        print(x)\n\n        x = x.detach()\n" in fixed, fixed
