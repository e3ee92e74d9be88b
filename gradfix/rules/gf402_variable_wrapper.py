"""GF402 variable-wrapper."""

from __future__ import annotations

from gradfix.analysis.variable import fix_variable_call, plan_rewrite, raises_value_error, report_rewrites, variable_calls
from gradfix.model import FixSafety
from gradfix.rule import Invalid, Option, Rule, Valid


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

    hidden = Variable(torch.zeros(layers, bsz, nhid))
    hidden = Variable(hidden.data)
    weights = Variable(torch.zeros(3), requires_grad=True)
    for data, target in train_loader:
        data, target = Variable(data), Variable(target)
        output = model(data)
    features = Variable(encoder(x))
    ```

    ## Use instead
    ```python
    hidden = torch.zeros(layers, bsz, nhid)
    hidden = hidden.detach()
    weights = torch.zeros(3, requires_grad=True)
    for data, target in train_loader:
        output = model(data)
    features = encoder(x).detach()
    ```

    ## Fix safety
    The fix writes what the call means today, in the form an expert writes:
    - the argument surely needs no grad (a fresh tensor from `torch.zeros/ones/empty/full/
      rand/randn/arange/tensor/from_numpy/...`, `torch.FloatTensor(...)`, `t.new(...)`,
      `t.new_zeros(...)`, a `.data`, or `.cuda()/.to()/.float()/.view()/...` on one of those):
      safe, the wrapper goes. Only the object identity differs, and nothing else can hold
      the fresh object;
    - `Variable(h.data)`: safe, `h.detach()` (same storage, no graph, as before);
    - `Variable(<constructor>(...), requires_grad=flag)`: safe, `<constructor>(...,
      requires_grad=flag)` where the constructor takes it, else `<fresh>.requires_grad_(flag)`;
    - a name a `for` loop takes from a data loader (`for data, target in train_loader:`),
      not rebound in the loop: **unsafe**, the wrapper goes on the assumption that the batch
      needs no grad (a custom collate could hand out tensors that do); a line that would then
      read `data, target = data, target` is removed (one-line, without comments, not alone
      in its block);
    - anything else: safe, `x.detach()` (`x.detach().requires_grad_(flag)`), exactly what
      `Variable` returns today. Non-atomic arguments are parenthesized.
    With `style = "exact"` (option of GF402) every call becomes `x.detach()`
    (`.requires_grad_(flag)` appended as written). A literal `1`/`0` flag becomes
    `True`/`False` (`requires_grad_` takes only a bool; a flag variable that holds an int would
    now raise `TypeError` at that line). The import of `Variable` is removed once no use is
    left (not in an `__init__.py`, which may re-export it; not when it is imported under
    another name or inside a `try` fallback; not when a file next to this one or one folder up
    does `from <this module> import *` or imports `Variable` from it, unless `__all__` leaves
    `Variable` out: 2017 scripts took `Variable` that way). Calls with `**kwargs`, the old
    `_grad_fn=`/`name=` arguments or no tensor are reported without a fix; `volatile=` calls
    are GF401's while GF401 is enabled (with GF401 ignored they are rewritten here the same
    way, and reported without a fix where `volatile` and `requires_grad` may both be true).
    """

    code = "GF402"
    name = "variable-wrapper"
    summary = "Legacy `Variable(x)` wrapper: it returns `x.detach()`"
    fix_safety = FixSafety.SAFE
    triggers = ("Variable",)
    options = (
        Option(
            "style",
            ("idiomatic", "exact"),
            "`idiomatic`: drop the wrapper where the value needs no grad, `h.detach()` for "
            "`Variable(h.data)`, `requires_grad=` in the constructor; `exact`: always `x.detach()`",
        ),
    )

    VALID = [
        Valid("import torch\ny = x.detach()\n"),
        Valid("from tensorflow import Variable\nv = Variable(x)\n"),
        Valid("class Variable:\n    def __init__(self, x):\n        self.x = x\n\nv = Variable(3)\n"),
        Valid(
            "from torch.autograd import Variable\n\nclass Variable:\n    pass\n\nv = Variable(x)\n"
        ),
        Valid("from torch.autograd import Variable\n\ndef f(Variable, x):\n    return Variable(x)\n"),
        # GF404's
        Valid("from torch.autograd import Variable\nok = isinstance(x, Variable)\n"),
    ]
    INVALID = [
        # A graph may hang on `batch` here: the exact alias.
        Invalid(
            "import torch\nfrom torch.autograd import Variable\n\nx = Variable(batch).cuda()  # to GPU\n",
            "import torch\n\nx = batch.detach().cuda()  # to GPU\n",
        ),
        # Fresh tensors need no grad: the wrapper goes.
        Invalid(
            "import torch\nfrom torch.autograd import Variable\n\ndef init_hidden(n):\n"
            "    return Variable(torch.zeros(1, n)), Variable(torch.from_numpy(a).float().cuda())\n",
            "import torch\n\ndef init_hidden(n):\n"
            "    return torch.zeros(1, n), torch.from_numpy(a).float().cuda()\n",
            count=2,
        ),
        Invalid(
            "from torch.autograd import Variable\n\ndef repackage(h):\n    return Variable(h.data)\n",
            "def repackage(h):\n    return h.detach()\n",
        ),
        Invalid(
            "import torch\nw = torch.autograd.Variable(torch.zeros(3), requires_grad=True)\n"
            "b = torch.autograd.Variable(torch.FloatTensor(3).zero_(), requires_grad=True)\n"
            "c = torch.autograd.Variable(torch.ones( 3 ), True)\n",
            "import torch\nw = torch.zeros(3, requires_grad=True)\n"
            "b = torch.FloatTensor(3).zero_().requires_grad_()\n"
            "c = torch.ones( 3, requires_grad=True )\n",
            count=3,
        ),
        Invalid(
            "import torch\nw = torch.autograd.Variable(torch.zeros(3), requires_grad=True)\n",
            "import torch\nw = torch.zeros(3).detach().requires_grad_(True)\n",
            options={"style": "exact"},
        ),
        # A batch from the loader: the wrapper goes (unsafe: it assumes the batch needs no grad),
        # and so does the line that would then assign the batch to itself.
        Invalid(
            "from torch.autograd import Variable\n\ndef train(model, train_loader):\n"
            "    for data, target in train_loader:\n        data, target = Variable(data), Variable(target)\n"
            "        model(data).sum().backward()\n",
            "def train(model, train_loader):\n"
            "    for data, target in train_loader:\n"
            "        model(data).sum().backward()\n",
            count=2,
        ),
        # A block keeps a statement: where every line would go, none goes.
        Invalid(
            "from torch.autograd import Variable\ndef f(val_loader):\n    for data, target in val_loader:\n"
            "        data = Variable(data)\n        target = Variable(target)\n",
            "def f(val_loader):\n    for data, target in val_loader:\n        data = data\n        target = target\n",
            count=2,
        ),
        Invalid(
            "import torch.autograd as ag\ns = ag.Variable(a + b, requires_grad = trainable)\n",
            "import torch.autograd as ag\ns = (a + b).detach().requires_grad_(trainable)\n",
        ),
        Invalid(
            "from torch.autograd.variable import Variable\nw = Variable(x, 1)\nok = isinstance(w, Variable)\n",
            "from torch.autograd.variable import Variable\nw = x.detach().requires_grad_()\nok = isinstance(w, Variable)\n",
        ),
        Invalid(
            "from torch.autograd import Variable, grad\n\ndef f(x):\n    g = grad(Variable(x).sum(), x)\n    return (Variable(x ** 2))\n",
            "from torch.autograd import grad\n\ndef f(x):\n    g = grad(x.detach().sum(), x)\n    return ((x ** 2).detach())\n",
            count=2,
        ),
        Invalid(
            "from torch.autograd import Variable as V\nh = V(enc(\n    2, 3\n))\n",
            "from torch.autograd import Variable as V\nh = enc(\n    2, 3\n).detach()\n",
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
        exact = self.opts.get("style") == "exact"
        planned = []
        for found in variable_calls(facts):
            if found.volatile is not None and self.defers_to("GF401"):
                continue  # GF401's, while it runs
            text = facts.segment(found.call.func)
            if found.blocker is not None:
                yield self.report(
                    facts, found.call, f"legacy `{text}(...)` returns a detached alias; not rewritten: {found.blocker}", fix=False
                )
                continue
            if raises_value_error(found):
                yield self.report(
                    facts, found.call, f"legacy `{text}(...)` with `volatile` and `requires_grad` may raise ValueError", fix=False
                )
                continue
            plan = plan_rewrite(facts, found, exact)
            message = f"legacy `{text}(...)` of {plan.evidence or 'a tensor'}: since PyTorch 0.4 it returns a detached alias"
            planned.append((found, plan, message))
        yield from report_rewrites(self, facts, planned, exact)

    def fix(self, finding, ctx):
        return fix_variable_call(finding, ctx)
