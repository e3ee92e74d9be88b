"""GF402 variable-wrapper."""

from __future__ import annotations

from gradfix.analysis.variable import fix_variable_call, flag_text, receiver_text, variable_calls
from gradfix.model import FixSafety
from gradfix.rule import Invalid, Rule, Valid


class VariableWrapper(Rule):
    """
    ## What it does
    Finds `Variable(x)` and `Variable(x, requires_grad=flag)` (`torch.autograd.Variable`,
    however imported), the wrapper every tensor needed before PyTorch 0.4.

    ## Why is this bad?
    Since 0.4, tensors and variables are one type and `Variable` is kept only for old code.
    It is not a no-op: `Variable(x)` returns a **new** tensor that shares `x`'s storage but
    is cut from the graph (`requires_grad=False`, no `grad_fn`), i.e. `x.detach()`
    (pinned in `tests/facts/test_gf402_facts.py`). Code that reads as "wrap the tensor"
    silently stops gradients, and the wrapper hides that.

    ## Example
    ```python
    from torch.autograd import Variable

    inputs = Variable(batch).cuda()
    weights = Variable(torch.zeros(3), requires_grad=True)
    ```

    ## Use instead
    ```python
    inputs = batch.detach().cuda()
    weights = torch.zeros(3).detach().requires_grad_(True)
    ```
    When you did not mean to cut the graph (input batches usually have none), drop the
    `.detach()` by hand.

    ## Fix safety
    Safe: `x.detach()` is exactly what `Variable(x)` returns today, and
    `x.detach().requires_grad_(flag)` what `Variable(x, requires_grad=flag)` returns (a
    leaf that receives gradients). Non-atomic arguments are parenthesized. A literal `1`/`0`
    flag becomes `True`/`False` (`requires_grad_` takes only a bool; a flag variable that
    holds an int would now raise `TypeError` at that line). The import of `Variable` is
    removed once no use is left (not in an `__init__.py`, which may re-export it; not when
    it is imported under another name or inside a `try` fallback; not when a file next to this
    one or one folder up does `from <this module> import *` or imports `Variable` from it,
    unless `__all__` leaves `Variable` out: 2017 scripts took `Variable` that way). Calls
    with `**kwargs`, the old `_grad_fn=`/`name=` arguments or no tensor are reported without
    a fix; `volatile=` calls are GF401's.
    """

    code = "GF402"
    name = "variable-wrapper"
    summary = "Legacy `Variable(x)` wrapper: it returns `x.detach()`"
    fix_safety = FixSafety.SAFE
    triggers = ("Variable",)

    VALID = [
        Valid("import torch\ny = x.detach()\n"),
        Valid("from tensorflow import Variable\nv = Variable(x)\n"),
        Valid("class Variable:\n    def __init__(self, x):\n        self.x = x\n\nv = Variable(3)\n"),
        Valid(
            "from torch.autograd import Variable\n\nclass Variable:\n    pass\n\nv = Variable(x)\n"
        ),
        Valid("from torch.autograd import Variable\n\ndef f(Variable, x):\n    return Variable(x)\n"),
        Valid("from torch.autograd import Variable\nok = isinstance(x, Variable)\n"),
        # volatile= is GF401's
        Valid("from torch.autograd import Variable\nv = Variable(x, volatile=True)\n"),
    ]
    INVALID = [
        Invalid(
            "import torch\nfrom torch.autograd import Variable\n\nx = Variable(batch).cuda()  # to GPU\n",
            "import torch\n\nx = batch.detach().cuda()  # to GPU\n",
        ),
        Invalid(
            "import torch\nw = torch.autograd.Variable(torch.zeros(3), requires_grad=True)\n",
            "import torch\nw = torch.zeros(3).detach().requires_grad_(True)\n",
        ),
        Invalid(
            "import torch.autograd as ag\ns = ag.Variable(a + b, requires_grad = trainable)\n",
            "import torch.autograd as ag\ns = (a + b).detach().requires_grad_(trainable)\n",
        ),
        Invalid(
            "from torch.autograd.variable import Variable\nw = Variable(x, 1)\nok = isinstance(w, Variable)\n",
            "from torch.autograd.variable import Variable\nw = x.detach().requires_grad_(True)\nok = isinstance(w, Variable)\n",
        ),
        Invalid(
            "from torch.autograd import Variable, grad\n\ndef f(x):\n    g = grad(Variable(x).sum(), x)\n    return (Variable(x ** 2))\n",
            "from torch.autograd import grad\n\ndef f(x):\n    g = grad(x.detach().sum(), x)\n    return ((x ** 2).detach())\n",
            count=2,
        ),
        Invalid(
            "from torch.autograd import Variable as V\nh = V(torch.zeros(\n    2, 3\n))\n",
            "from torch.autograd import Variable as V\nh = torch.zeros(\n    2, 3\n).detach()\n",
        ),
        Invalid(
            "from torch.autograd import Variable\nh = Variable(x\n             .float())\n",
            "h = (x\n             .float()).detach()\n",
        ),
        Invalid("from torch.autograd import Variable\nv = Variable(x, **opts)\n", None),
        Invalid("from torch.autograd import Variable\nv = Variable(3)\n", None),
        Invalid(
            "from torch.autograd import Variable\nv = Variable(torch.cat([a,  # left\n                        b]))\n",
            "v = torch.cat([a,  # left\n                        b]).detach()\n",
        ),
        Invalid("from torch.autograd import Variable\nv = Variable(x,  # the input\n             requires_grad=True)\n", None),
    ]

    def check(self, facts):
        for found in variable_calls(facts):
            if found.volatile is not None:
                continue  # GF401
            text = facts.segment(found.call.func)
            if found.blocker is not None:
                yield self.report(
                    facts,
                    found.call,
                    f"`{text}(...)` is a legacy wrapper that returns a detached copy; "
                    f"not rewritten because {found.blocker}",
                    fix=False,
                )
                continue
            data = receiver_text(facts, found.data)
            if found.requires_grad is None:
                wanted = f"{data}.detach()"
            else:
                wanted = f"{data}.detach().requires_grad_({flag_text(facts, found.requires_grad)})"
            yield self.report(
                facts,
                found.call,
                f"legacy `{text}(...)`: since PyTorch 0.4 it returns a detached alias of its "
                f"argument (no graph); write `{wanted}`",
                data=(found.requires_grad is not None, found.import_module),
            )

    def fix(self, finding, ctx):
        return fix_variable_call(finding, ctx)
