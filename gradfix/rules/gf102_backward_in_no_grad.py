"""GF102 backward-in-no-grad: a query over the grad-mode data flow (gradfix/analysis/gradflow.py)."""

from __future__ import annotations

from gradfix.analysis.gradflow import analyses, overbroad_block_feeds, short_code
from gradfix.rule import GRAD_DISABLING, Invalid, Rule, Valid

_WHY = {
    "backward": "backward() raises RuntimeError",
    "autograd.backward": "autograd.backward() raises RuntimeError",
    "autograd.grad": "autograd.grad() raises RuntimeError",
    "retain_grad": "retain_grad() raises RuntimeError",
}


class BackwardInNoGrad(Rule):
    """
    ## What it does
    Finds `.backward()`, `torch.autograd.grad(...)`, `torch.autograd.backward(...)` and
    `.retain_grad()` applied to a tensor that was computed inside a grad-disabled region
    (`with torch.no_grad()`, `inference_mode()`, `set_grad_enabled(False)`, or a function
    decorated with one of them), following names through assignments within the function and
    across the file's functions: a helper that returns a tensor built under `no_grad`, and a
    helper that calls `.backward()` on its argument (or on what it computes from it), as in
    loops where the forward runs in one function and the backward in another. Also seen:
    `accelerator.backward(loss)`, `self.manual_backward(loss)`, `scaler.scale(loss).backward()`,
    and the loss a LightningModule's `training_step` returns (Lightning backpropagates it).
    A backward in a `try` whose handler names `RuntimeError` is code that expects the error
    (a tutorial showing it, a probe): not reported.

    ## Why is this bad?
    Nothing computed under `no_grad` records a graph: the tensor has no `grad_fn`, so
    `backward()` raises `RuntimeError: element 0 of tensors does not require grad and does
    not have a grad_fn`, and `retain_grad()` raises `can't retain_grad on Tensor that has
    requires_grad=False` (both pinned in `tests/facts/test_gf102_facts.py`).

    Calling `loss.backward()` *inside* a `no_grad` block on a graph built before the block is
    fine and is not reported; neither is a name re-assigned from a grad-enabled computation
    before it is differentiated. The rule fires only when every path to the call leaves the
    tensor grad-free; values from function parameters or opaque calls are assumed to carry
    history. Also silent: criteria that may hold parameters (a class with weights such as a
    center loss, a loss helper that runs a model of its own), getters that hand back an
    existing parameter under `no_grad` (`model.get_parameter("w")`), and in-place methods
    (`x = x.clamp_(0, 1)` keeps `x`'s history).

    ## Example
    ```python
    @torch.no_grad()
    def probe(model, x):
        h = model.encoder(x)
        h.retain_grad()
    ```

    ## Use instead
    ```python
    def probe(model, x):
        h = model.encoder(x)
        h.retain_grad()
    ```

    ## Fix safety
    No fix: whether the region or the differentiation is the mistake is a design decision.
    The message names the region's line. A `.backward()` fed by a grad-disabled `with` block
    is reported by GF103 (overbroad-no-grad), which can rewrite it; GF102 leaves it to GF103
    when GF103 is enabled, and reports it itself when GF103 is not.
    """

    code = "GF102"
    name = "backward-in-no-grad"
    summary = "Differentiating a tensor computed under no_grad"
    fix_safety = None
    triggers = ("backward", "retain_grad", "autograd", "training_step")
    requires = (GRAD_DISABLING,)  # a tensor computed under no_grad: a region of this file

    VALID = [
        # A helper that returns a tensor built with grad on; the backward runs in another helper.
        Valid(
            "import torch\ndef forward_pass(model, x):\n    with torch.no_grad():\n        x = x.float()\n    return model(x)\n\n"
            "def backward_pass(loss, opt):\n    loss.backward()\n    opt.step()\n\n"
            "def train(model, loader, crit, opt):\n    for x, y in loader:\n        backward_pass(crit(forward_pass(model, x), y), opt)\n"
        ),
        # A graph built before the block may be differentiated inside it.
        Valid("import torch\ndef step(model, x, opt):\n    loss = model(x).sum()\n    with torch.no_grad():\n        loss.backward()\n        opt.step()\n"),
        # Re-assigned from a grad-enabled computation before the backward.
        Valid(
            "import torch\ndef f(model, x):\n    with torch.no_grad():\n        h = model(x)\n    h = model(x)\n    h.retain_grad()\n"
        ),
        # Made a leaf that requires grad again.
        Valid("import torch\ndef f(model, x):\n    with torch.no_grad():\n        h = model(x)\n    h.requires_grad_()\n    h.retain_grad()\n"),
        # An enable_grad block inside no_grad records a graph.
        Valid(
            "import torch\n@torch.no_grad()\ndef f(model, x):\n    with torch.enable_grad():\n        out = model(x)\n"
            "        g = torch.autograd.grad(out.sum(), x)\n"
        ),
        # Only one branch computes under no_grad.
        Valid(
            "import torch\ndef f(model, x, frozen):\n    if frozen:\n        with torch.no_grad():\n            h = model(x)\n"
            "    else:\n        h = model(x)\n    h.retain_grad()\n"
        ),
        # A conditional region is not a grad-disabled one.
        Valid("import torch\n@torch.set_grad_enabled(mode)\ndef f(model, x):\n    h = model(x)\n    h.retain_grad()\n"),
        # A local `torch` that is not the module.
        Valid("def f(torch, model, x):\n    with torch.no_grad():\n        h = model(x)\n    h.retain_grad()\n"),
        # Views of a tensor that requires grad still require grad under no_grad.
        Valid("import torch\n@torch.no_grad()\ndef f(w):\n    v = w.view(-1)\n    v.retain_grad()\n"),
        # The toggle hack (GF202) switches grad back on inside the block: not analysed.
        Valid(
            "import torch as T\ndef saliency(model, x):\n    with T.no_grad():\n        T.set_grad_enabled(True)\n"
            "        score = model(x).max()\n        g = T.autograd.grad(score, x)\n        T.set_grad_enabled(False)\n"
        ),
        # A helper of this file that enables grad itself.
        Valid(
            "import torch\n@torch.enable_grad()\ndef loss_of(model, x):\n    return model(x).sum()\n"
            "def step(model, x):\n    with torch.no_grad():\n        loss = loss_of(model, x)\n    loss.retain_grad()\n"
        ),
        # A criterion that holds parameters (learned class centres) gives its loss a grad_fn
        # even on frozen features.
        Valid(
            "import torch\ndef probe(model, center_loss, x, y):\n    with torch.no_grad():\n        feats = model(x)\n"
            "    return torch.autograd.grad(center_loss(feats, y), center_loss.centers)\n"
        ),
        Valid(
            "import torch\nfrom losses import CenterLoss\ncrit = CenterLoss(10, 2)\ndef probe(model, x, y):\n    with torch.no_grad():\n"
            "        feats = model(x)\n    return torch.autograd.grad(crit(feats, y), crit.centers)\n"
        ),
        # An in-place method returns its receiver: a leaf that requires grad stays one.
        Valid(
            "import torch\ndef fit_image(img, target_net, ref):\n    img.requires_grad_(True)\n    with torch.no_grad():\n"
            "        target = target_net(ref)\n        img = img.clamp_(0, 1)\n    loss = ((img - target) ** 2).sum()\n    loss.backward()\n"
        ),
        # A getter under no_grad hands back an existing parameter, which requires grad.
        Valid(
            "import torch\ndef reg_step(model, opt):\n    with torch.no_grad():\n        w = model.get_weight()\n"
            "        b = model.get_parameter('bias')\n    penalty = (w ** 2).sum() + b.abs().sum()\n    penalty.backward()\n"
        ),
        # A leaf created with requires_grad=True under no_grad requires grad.
        Valid("import torch\n@torch.no_grad()\ndef f():\n    w = torch.zeros(3, requires_grad=True)\n    w.retain_grad()\n"),
    ]
    INVALID = [
        # The forward in one function, the backward in another (a training step helper).
        Invalid(
            "import torch\n@torch.no_grad()\ndef forward_pass(model, x):\n    return model(x)\n\n"
            "def backward_pass(loss, opt):\n    loss.backward()\n    opt.step()\n\n"
            "def train(model, loader, crit, opt):\n    for x, y in loader:\n        out = forward_pass(model, x)\n"
            "        backward_pass(crit(out, y), opt)\n",
            None,
        ),
        Invalid(
            "import torch\n@torch.no_grad()\ndef probe(model, x):\n    h = model.encoder(x)\n    h.retain_grad()\n",
            None,
        ),
        Invalid(
            "import torch as T\ndef saliency(model, x):\n    with T.no_grad():\n        score = model(x).max()\n"
            "    return T.autograd.grad(score, x)\n",
            None,
        ),
        Invalid(
            "from torch.autograd.grad_mode import no_grad\n@no_grad()\ndef step(model, x, y, crit):\n"
            "    loss = crit(model(x), y)\n    loss.backward()\n",
            None,
        ),
        Invalid(
            "import torch\ndef f(model, x):\n    with torch.inference_mode():\n        h = model(x)\n    h = h * 2\n    h.retain_grad()\n",
            None,
        ),
        Invalid(
            "import torch\ndef f(model, loader):\n    for x, y in loader:\n        with torch.set_grad_enabled(False):\n"
            "            feats = model(x)\n        torch.autograd.backward([feats.sum()])\n",
            None,
        ),
    ]

    def check(self, facts):
        for analysis in analyses(facts):
            for site in analysis.sites:
                if not site.status or (self.defers_to("GF103") and overbroad_block_feeds(facts, site)):
                    continue
                regions = sorted((r for r in facts.regions if r.owner in site.status and r.disables), key=lambda r: r.expr.lineno)
                api = (regions[0].api or "no_grad").rpartition(".")[2] if regions else "no_grad"
                where = f"line{'s' if len(regions) > 1 else ''} {', '.join(str(r.expr.lineno) for r in regions)}"
                tensor = short_code(facts, site.tensor, 30)
                what = f"`{tensor}` was computed under {api} ({where}), so it has no grad_fn"
                if site.via is not None:
                    callee = short_code(facts, site.call.func, 30)
                    what = f"`{tensor}` was computed under {api} ({where}); `{callee}()` differentiates it at line {site.origin.call.lineno}"
                yield self.report(facts, site.call, f"{what}: {_WHY[site.kind]}", fix=False, anchors=[site.stmt])

    @staticmethod
    def contract():
        # gradfix verify: no fix; running the original must show the RuntimeError reported.
        from gradfix.verify.contract import Diagnosis, Raises

        return Diagnosis(
            "the original raises the RuntimeError the diagnostic names",
            (Raises("RuntimeError", "does not require grad|retain_grad|Inference tensors"),),
        )
