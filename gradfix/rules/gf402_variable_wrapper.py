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
    noise = torch.randn(n, nz)
    z = Variable(noise)
    ```

    ## Use instead
    ```python
    hidden = torch.zeros(layers, bsz, nhid)
    hidden = hidden.detach()
    weights = torch.zeros(3, requires_grad=True)
    for data, target in train_loader:
        output = model(data)
    features = encoder(x).detach()
    noise = torch.randn(n, nz)
    z = noise
    ```

    ## Fix safety
    The fix writes what the call means today, in the form an expert writes:
    - the argument surely needs no grad (a fresh tensor from `torch.zeros/ones/empty/full/
      rand/randn/arange/tensor/from_numpy/...`, `torch.FloatTensor(...)`, `t.new(...)`,
      `t.new_zeros(...)`, a `.data`, `.cuda()/.to()/.float()/.view()/...` on one of those, or
      a value computed only from those and constants: an operator, a `torch.*` function or a
      tensor method other than `requires_grad_()`, as in `torch.atan2(a.data, b.data) * 2`):
      safe, the wrapper goes. Only the object identity differs, and nothing else can hold
      the fresh object;
    - `Variable(h.data)`: safe, `h.detach()` (same storage, no graph, as before);
      `Variable(h).detach()` and `Variable(h).data`: safe, the wrapper goes (what follows it
      already makes the detached alias);
    - `Variable(<constructor>(...), requires_grad=flag)`: safe, `<constructor>(...,
      requires_grad=flag)` where the constructor takes it, else `<fresh>.requires_grad_(flag)`;
    - a local name is followed to the assignments that may reach the call (one provenance
      query, `gradfix/analysis/provenance.py`): `x = torch.randn(n, 10); y = Variable(x)`
      becomes `y = x` when every assignment that reaches the call binds a fresh tensor, a
      `.data` or a `.detach()` (through `.cuda()`/`.float()`/... and `x += 1`; a global that
      only ever holds legacy tensor classes, `Tensor = torch.cuda.FloatTensor if cuda else
      torch.FloatTensor`, builds fresh tensors too), and nothing
      can tell the object from its detached alias: no `requires_grad_()`, no in-place update
      with an operand that may need grad, no handing it to an unknown call, container,
      attribute or closure, and no read of `x` after the call (`x = Variable(x)`, which
      rebinds it, is fine: the line then goes). A parameter, a global, a name rebound on some
      path by anything else (`x = enc(x)` in a branch, the next loop iteration, a `try`
      body), `model.init_hidden()` or any unknown call stays `x.detach()`;
    - a name a `for` loop takes from a data loader (`for data, target in train_loader:`,
      also through `tqdm(..)`/`enumerate(..)`, any wrapper handed the loader first and a name
      bound to one), directly, through assignments (`inputs, labels = batch`, `data =
      data.cuda()`), as the element of a comprehension over it (`[Variable(d) for d in data]`)
      or as a parameter that every call in the file hands a batch (`self.train_batch(opt,
      batch, label)` in the loop):
      **unsafe**, the wrapper goes on the assumption that the batch needs no grad (a custom
      collate could hand out tensors that do); a line that would then read `data, target =
      data, target` (or copy a list into itself, `targets = [t for t in targets]`, where
      the function only reads the list afterwards: no call that might append to it) is removed (one-line, no comment on the line, not alone in its block;
      blank lines and comments above it stay, above the next statement of its block or
      notebook cell), and one that must stay becomes `data = data.detach()`; an `else:`
      branch whose every line would go goes with them (`if cuda: x = Variable(x.cuda())
      else: x = Variable(x)` becomes `if cuda: x = x.cuda()`), unless a comment lives in it
      or its fixes differ in safety;
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
    uses_project = True  # `Variable` from `from utils import *`: what the project module imports
    options = (
        Option(
            "style",
            ("idiomatic", "exact"),
            "`idiomatic`: drop the wrapper where the value needs no grad, `h.detach()` for "
            "`Variable(h.data)`, `requires_grad=` in the constructor; `exact`: always `x.detach()`",
        ),
    )

    VALID = [
        Valid(
            """
            import torch
            y = x.detach()
            """
        ),
        Valid(
            """
            from tensorflow import Variable
            v = Variable(x)
            """
        ),
        Valid(
            """
            class Variable:
                def __init__(self, x):
                    self.x = x

            v = Variable(3)
            """
        ),
        Valid(
            """
            from torch.autograd import Variable

            class Variable:
                pass

            v = Variable(x)
            """
        ),
        Valid(
            """
            from torch.autograd import Variable

            def f(Variable, x):
                return Variable(x)
            """
        ),
        # GF404's
        Valid(
            """
            from torch.autograd import Variable
            ok = isinstance(x, Variable)
            """
        ),
    ]
    INVALID = [
        # A graph may hang on `batch` here: the exact alias.
        Invalid(
            """
            import torch
            from torch.autograd import Variable

            x = Variable(batch).cuda()  # to GPU
            """,
            """
            import torch

            x = batch.detach().cuda()  # to GPU
            """,
        ),
        # Computed only from grad-free tensors and constants: nothing to detach.
        Invalid(
            """
            import torch
            from torch.autograd import Variable

            def angle(a, b):
                return Variable(torch.atan2(a.data, b.data) * 2)
            """,
            """
            import torch

            def angle(a, b):
                return torch.atan2(a.data, b.data) * 2
            """,
        ),
        # Detached at once: the wrapper goes, one `.detach()` is enough.
        Invalid(
            """
            import torch
            from torch.autograd import Variable

            target = Variable(q_next.data).detach()
            """,
            """
            import torch

            target = q_next.detach()
            """,
        ),
        # Fresh tensors need no grad: the wrapper goes.
        Invalid(
            """
            import torch
            from torch.autograd import Variable

            def init_hidden(n):
                return Variable(torch.zeros(1, n)), Variable(torch.from_numpy(a).float().cuda())
            """,
            """
            import torch

            def init_hidden(n):
                return torch.zeros(1, n), torch.from_numpy(a).float().cuda()
            """,
            count=2,
        ),
        Invalid(
            """
            from torch.autograd import Variable

            def repackage(h):
                return Variable(h.data)
            """,
            """
            def repackage(h):
                return h.detach()
            """,
        ),
        Invalid(
            """
            import torch
            w = torch.autograd.Variable(torch.zeros(3), requires_grad=True)
            b = torch.autograd.Variable(torch.FloatTensor(3).zero_(), requires_grad=True)
            c = torch.autograd.Variable(torch.ones( 3 ), True)
            """,
            """
            import torch
            w = torch.zeros(3, requires_grad=True)
            b = torch.FloatTensor(3).zero_().requires_grad_()
            c = torch.ones( 3, requires_grad=True )
            """,
            count=3,
        ),
        Invalid(
            """
            import torch
            w = torch.autograd.Variable(torch.zeros(3), requires_grad=True)
            """,
            """
            import torch
            w = torch.zeros(3).detach().requires_grad_(True)
            """,
            options={"style": "exact"},
        ),
        # A batch from the loader: the wrapper goes (unsafe: it assumes the batch needs no grad),
        # and so does the line that would then assign the batch to itself.
        Invalid(
            """
            from torch.autograd import Variable

            def train(model, train_loader):
                for data, target in train_loader:
                    data, target = Variable(data), Variable(target)
                    model(data).sum().backward()
            """,
            """
            def train(model, train_loader):
                for data, target in train_loader:
                    model(data).sum().backward()
            """,
            count=2,
        ),
        # An expression of fresh tensors loses the wrapper; parentheses stay only where an
        # operator would bind otherwise.
        Invalid(
            """
            import torch
            from torch.autograd import Variable

            def gather_last(padded, lengths, size):
                idx = torch.LongTensor(lengths).view(-1, 1, 1)
                idx = Variable(idx.expand(padded.size(0), 1, size) - 1).cuda()
                offset = Variable(idx + 1)
                shifted = Variable(idx - 1) + 2 * Variable(idx + 1)
                return torch.gather(padded, 1, idx), offset, shifted
            """,
            """
            import torch

            def gather_last(padded, lengths, size):
                idx = torch.LongTensor(lengths).view(-1, 1, 1)
                idx = (idx.expand(padded.size(0), 1, size) - 1).cuda()
                offset = idx + 1
                shifted = idx - 1 + 2 * (idx + 1)
                return torch.gather(padded, 1, idx), offset, shifted
            """,
            count=4,
        ),
        # A fresh tensor scaled by a NumPy number needs no grad: no `.detach()` before the flag.
        Invalid(
            """
            import numpy as np
            import torch
            from torch.autograd import Variable

            def xavier_init(size):
                xavier_stddev = 1. / np.sqrt(size[0] / 2.)
                return Variable(torch.randn(*size) * xavier_stddev, requires_grad=True)
            """,
            """
            import numpy as np
            import torch

            def xavier_init(size):
                xavier_stddev = 1. / np.sqrt(size[0] / 2.)
                return (torch.randn(*size) * xavier_stddev).requires_grad_()
            """,
        ),
        # ...also when the statement spans lines
        Invalid(
            """
            from torch.autograd import Variable

            def validate(model, valid_loader):
                for data, relations in valid_loader:
                    data, relations = Variable(data, requires_grad=False), Variable(
                        relations, requires_grad=False)
                    print(model(data, relations).mean().item())
            """,
            """
            def validate(model, valid_loader):
                for data, relations in valid_loader:
                    print(model(data, relations).mean().item())
            """,
            count=2,
        ),
        # A name bound to a fresh tensor and not read again: the wrapper goes; an unknown
        # call (`model.init_hidden()`) may hand out a graph: `.detach()`.
        Invalid(
            """
            import torch
            from torch.autograd import Variable

            def sample(model, n):
                x = torch.randn(n, 10)
                y = Variable(x)
                h = model.init_hidden()
                z = Variable(h)
                return model(y, z)
            """,
            """
            import torch

            def sample(model, n):
                x = torch.randn(n, 10)
                y = x
                h = model.init_hidden()
                z = h.detach()
                return model(y, z)
            """,
            count=2,
        ),
        # `hidden = Variable(hidden)` of a fresh tensor: the line would read `hidden = hidden`.
        Invalid(
            """
            import torch
            from torch.autograd import Variable

            def init_hidden(bsz, nhid, cuda):
                hidden = torch.zeros(2, bsz, nhid)
                if cuda:
                    hidden = hidden.cuda()
                hidden = Variable(hidden)
                return hidden
            """,
            """
            import torch

            def init_hidden(bsz, nhid, cuda):
                hidden = torch.zeros(2, bsz, nhid)
                if cuda:
                    hidden = hidden.cuda()
                return hidden
            """,
        ),
        # Rebound on one path by an unknown call, or read again after the call: `.detach()`.
        Invalid(
            """
            import torch
            from torch.autograd import Variable

            def f(n, enc, warm):
                x = torch.zeros(n)
                if warm:
                    x = enc(x)
                y = torch.zeros(n)
                z = Variable(y)
                z.requires_grad_()
                return Variable(x), y, z
            """,
            """
            import torch

            def f(n, enc, warm):
                x = torch.zeros(n)
                if warm:
                    x = enc(x)
                y = torch.zeros(n)
                z = y.detach()
                z.requires_grad_()
                return x.detach(), y, z
            """,
            count=2,
        ),
        # A batch by name flow: unpacked from what the loader yields (unsafe, as above).
        Invalid(
            """
            from torch.autograd import Variable

            def train(model, train_loader):
                for batch in train_loader:
                    inputs, labels = batch
                    model(Variable(inputs.cuda())).sum().backward()
            """,
            """
            def train(model, train_loader):
                for batch in train_loader:
                    inputs, labels = batch
                    model(inputs.cuda()).sum().backward()
            """,
        ),
        # A block keeps a statement: where every line would go, none goes, and none reads
        # `data = data`: the exact alias stays.
        Invalid(
            """
            from torch.autograd import Variable
            def f(val_loader):
                for data, target in val_loader:
                    data = Variable(data)
                    target = Variable(target)
            """,
            """
            def f(val_loader):
                for data, target in val_loader:
                    data = data.detach()
                    target = target.detach()
            """,
            count=2,
        ),
        Invalid(
            """
            import torch.autograd as ag
            s = ag.Variable(a + b, requires_grad = trainable)
            """,
            """
            import torch.autograd as ag
            s = (a + b).detach().requires_grad_(trainable)
            """,
        ),
        Invalid(
            """
            from torch.autograd.variable import Variable
            w = Variable(x, 1)
            ok = isinstance(w, Variable)
            """,
            """
            from torch.autograd.variable import Variable
            w = x.detach().requires_grad_()
            ok = isinstance(w, Variable)
            """,
        ),
        Invalid(
            """
            from torch.autograd import Variable, grad

            def f(x):
                g = grad(Variable(x).sum(), x)
                return (Variable(x ** 2))
            """,
            """
            from torch.autograd import grad

            def f(x):
                g = grad(x.detach().sum(), x)
                return ((x ** 2).detach())
            """,
            count=2,
        ),
        Invalid(
            """
            from torch.autograd import Variable as V
            h = V(enc(
                2, 3
            ))
            """,
            """
            from torch.autograd import Variable as V
            h = enc(
                2, 3
            ).detach()
            """,
        ),
        Invalid(
            """
            from torch.autograd import Variable
            h = Variable(x
                         .float())
            """,
            """
            h = (x
                         .float()).detach()
            """,
        ),
        Invalid(
            """
            from torch.autograd import Variable
            v = Variable(x, **opts)
            """,
            None,
        ),
        Invalid(
            """
            from torch.autograd import Variable
            v = Variable(3)
            """,
            None,
        ),
        Invalid(
            """
            from torch.autograd import Variable
            v = Variable(torch.cat([a,  # left
                                    b]))
            """,
            """
            v = torch.cat([a,  # left
                                    b]).detach()
            """,
        ),
        Invalid(
            """
            from torch.autograd import Variable
            v = Variable(x,  # the input
                         requires_grad=True)
            """,
            None,
        ),
    ]

    def check(self, facts):
        exact = self.opts.get("style") == "exact"
        planned = []
        for found in variable_calls(facts):
            if found.volatile is not None and self.defers_to("GF401"):
                continue  # GF401's, while it runs
            text = facts.segment(found.call.func)
            if found.blocker is not None:
                yield self.report(facts, found.call, f"legacy `{text}(...)` returns a detached alias", no_fix=found.blocker)
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
