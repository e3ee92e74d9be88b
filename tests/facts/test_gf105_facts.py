"""PyTorch facts GF105 (train-without-train-mode) relies on, and the GF104+GF105 interplay
checked by running the rewritten code on real torch (CPU)."""

from pathlib import Path

import pytest

from gradfix import Settings, check, fix

torch = pytest.importorskip("torch")
nn = torch.nn


def test_training_after_eval_runs_in_eval_mode():
    """`.eval()` sticks: backward + step work, but dropout is off and BN stats are frozen."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Dropout(0.5), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model.eval()
    stats = model[1].running_mean.clone()
    x = torch.randn(16, 4)
    a = model(x)
    a.sum().backward()
    opt.step()
    assert not model.training
    assert torch.equal(model[1].running_mean, stats)  # frozen, not updated
    with torch.no_grad():
        assert torch.equal(model(x), model(x))  # dropout off
    model.train()
    model(x)
    assert not torch.equal(model[1].running_mean, stats)  # train() resumes updates
    with torch.no_grad():
        assert not torch.equal(model(x), model(x))  # dropout back on


# A file both rules fire on: evaluate() lacks eval(), fit() never calls train() in its loop.
SCRIPT = '''\
import torch
import torch.nn as nn

MODES = []


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Dropout(0.3), nn.Linear(8, 2))

    def forward(self, x):
        return self.body(x)


def evaluate(model, data):
    with torch.no_grad():
        return sum((model(x).argmax(1) == y).sum().item() for x, y in data)


def train_one_epoch(model, data, optimizer):
    for x, y in data:
        optimizer.zero_grad()
        MODES.append(("step", model.training))
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()


def fit(model, data, optimizer, epochs):
    for epoch in range(epochs):
        for x, y in data:
            optimizer.zero_grad()
            MODES.append(("fit", model.training))
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
        MODES.append(("eval", evaluate(model, data)))


def main():
    torch.manual_seed(0)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data = [(torch.randn(8, 4), torch.randint(0, 2, (8,))) for _ in range(2)]
    fit(model, data, optimizer, epochs=3)
    for _ in range(2):
        train_one_epoch(model, data, optimizer)
        evaluate(model, data)
    model.train()
'''


def _run(source: str) -> list:
    namespace: dict = {"__name__": "gradfix_interplay"}
    exec(compile(source, "<interplay>", "exec"), namespace)
    namespace["main"]()
    return namespace["MODES"]


def _both(style: str = "insert") -> Settings:
    return Settings(select=("GF104", "GF105"), unsafe_fixes=True, rule_options={"GF104": {"style": style}})


def test_interplay_script_really_evaluates_in_train_mode_today():
    steps = [training for kind, training in _run(SCRIPT) if kind in ("step", "fit")]
    assert steps and all(steps)  # nothing ever calls eval(): the GF104 bug


@pytest.mark.parametrize("style", ["insert", "restore"])
def test_gf104_and_gf105_together_train_every_step_in_train_mode(style):
    # GF105 reports what the file does: there is no `.eval()` in it yet. Once GF104's fix puts
    # one in (insert style), the next pass of the same run reports and fixes the training loops.
    codes = sorted(f.code for f in check(SCRIPT, settings=_both(style)))
    assert codes == ["GF104"]
    fixed = fix(SCRIPT, settings=_both(style))
    if style == "insert":
        assert "model.train()" in fixed
    assert fix(fixed, settings=_both(style)) == fixed  # idempotent
    assert "model.eval()" in fixed
    modes = _run(fixed)
    steps = [training for kind, training in modes if kind in ("step", "fit")]
    assert len(steps) == 3 * 2 + 2 * 2
    assert all(steps), "a training step ran in eval mode after the fixes"


def test_gf104_alone_would_train_later_epochs_in_eval_mode():
    """Why GF105 is the companion: GF104's insert fix by itself leaks eval mode into epoch 2."""
    fixed = fix(SCRIPT, settings=Settings(select=("GF104",), unsafe_fixes=True))
    steps = [training for kind, training in _run(fixed) if kind in ("step", "fit")]
    assert steps[:2] == [True, True]  # epoch 1
    assert not all(steps)


def test_cli_apply_with_both_rules(tmp_path: Path):
    from gradfix.cli import main

    path = tmp_path / "script.py"
    path.write_text(SCRIPT)
    with pytest.raises(SystemExit):
        main([str(path), "--select", "GF104,GF105", "--apply", "--unsafe-fixes"])
    fixed = path.read_text()
    assert fixed != SCRIPT
    steps = [training for kind, training in _run(fixed) if kind in ("step", "fit")]
    assert steps and all(steps)


def test_a_freshly_built_module_is_in_training_mode():
    """Held-out review: a module a function builds itself (`net = nn.Sequential(...).to(dev)`)
    starts in training mode, so a training loop right after it needs no `.train()`."""
    net = nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2), nn.Dropout()).to("cpu")
    assert net.training and all(m.training for m in net.modules())
    other = nn.Sequential(nn.Linear(2, 2))
    other.eval()
    assert net.training  # another object named `net` elsewhere does not share the mode


def test_gf105_reports_the_real_eval_call_whatever_gf104_does():
    """GF105 names a `.eval()` that is in the file, with GF104 on or off."""
    with_eval = SCRIPT.replace("def evaluate(model, data):\n", "def evaluate(model, data):\n    model.eval()\n")
    line = next(i for i, text in enumerate(with_eval.splitlines(), 1) if "model.eval()" in text)
    for settings in (Settings(select=("GF105",)), Settings(select=("GF104", "GF105")), Settings(select=("GF105",), ignore=("GF104",))):
        found = [f for f in check(with_eval, settings=settings) if f.code == "GF105"]
        assert len(found) == 2 and all(f"line {line}" in f.message for f in found)
    assert [f.code for f in check(SCRIPT, settings=Settings(select=("GF105",)))] == []


# -- findings, fixes and the shapes without a fix (mutation testing) -----------------------------

_EVAL_HELPER = "\ndef evaluate(model, x):\n    model.eval()\n    with torch.no_grad():\n        return model(x)\n"


def _gf105(code):
    settings = Settings(select=("GF105",), unsafe_fixes=True)
    found = [(f.span.line, f.span.col, f.message, f.fix_title or f.no_fix and f"no fix: {f.no_fix}") for f in check(code, settings=settings)]
    return found, fix(code, settings=settings)


_NO_PLACE = "no fix: no single place for `.train()`"


@pytest.mark.parametrize(
    "code, where, line",
    [
        (
            "import torch" + _EVAL_HELPER + "model = Net()\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\nfor x in loader:\n"
            "    model(x).sum().backward()\n    opt.step()\nevaluate(model, x)\nfor x in loader:\n    model(x).sum().backward()\n    opt.step()\n",
            "this loop", 9,
        ),
        (
            "import torch" + _EVAL_HELPER + "def fit(model, loader, opt, x):\n    for x in loader:\n        model(x).sum().backward()\n"
            "        opt.step()\n    evaluate(model, x)\n    for x in loader:\n        model(x).sum().backward()\n        opt.step()\n",
            "`fit`", 8,
        ),
    ],
    ids=["module_level", "function"],
)
def test_two_training_loops_around_an_evaluation_have_no_single_place_for_train(code, where, line):
    found, fixed = _gf105(code)
    assert found == [(line, 4 if where == "this loop" else 8, f"{where} may train `model` in eval mode: `model.eval()` (line 3) is not undone before every step", _NO_PLACE)]
    assert fixed == code


_IN_EPOCH_LOOP = "Insert `model.train()` at the start of the epoch loop's body"


def test_an_lbfgs_closure_trains_inside_optimizer_step():
    code = (
        "import torch\ndef fit(model, x, opt):\n    for epoch in range(3):\n        def closure():\n            opt.zero_grad()\n"
        "            loss = model(x).sum()\n            loss.backward()\n            return loss\n        opt.step(closure)\n"
        "        evaluate(model, x)\n" + _EVAL_HELPER
    )
    found, fixed = _gf105(code)
    assert found == [(9, 8, "`fit` may train `model` in eval mode: `model.eval()` (line 13) is not undone before every step", _IN_EPOCH_LOOP)]
    assert fixed == code.replace("    for epoch in range(3):\n", "    for epoch in range(3):\n        model.train()\n")


def test_an_explicit_forward_call_is_a_use_of_the_module():
    code = (
        "import torch\ndef fit(model, loader, opt, x):\n    for epoch in range(3):\n        for xb in loader:\n"
        "            model.forward(xb).sum().backward()\n            opt.step()\n        evaluate(model, x)\n" + _EVAL_HELPER
    )
    found, fixed = _gf105(code)
    assert found == [(5, 12, "`fit` may train `model` in eval mode: `model.eval()` (line 10) is not undone before every step", _IN_EPOCH_LOOP)]
    assert fixed == code.replace("    for epoch in range(3):\n", "    for epoch in range(3):\n        model.train()\n")


def test_a_caller_that_sets_train_mode_before_each_call_owns_the_mode():
    code = (
        "import torch\ndef train_epoch(model, loader, opt):\n    for x in loader:\n        model(x).sum().backward()\n        opt.step()\n"
        + _EVAL_HELPER
        + "def main(model, loader, opt, x):\n    for epoch in range(3):\n        model.train()\n        train_epoch(model, loader, opt)\n"
        "        evaluate(model, x)\n"
    )
    assert _gf105(code) == ([], code)


def test_the_verify_contract_wants_every_forward_in_training_mode():
    from gradfix.rules import rule_by_code
    from gradfix.verify.contract import Contract, ForwardMode, resolve

    contract = resolve(rule_by_code("GF105"))
    assert isinstance(contract, Contract)
    assert ForwardMode("train", "training", True) in contract.expect
    # Inserting `.train()` may change forwards and training flags, never whether the code raises
    # or the grad mode it leaves behind.
    assert set(contract.keep) == {"*: grad mode after", "exception"}


def test_no_train_call_is_planned_before_the_module_exists():
    # The function's start is the only place for `net.train()`, but `net` is built there.
    code = (
        "import torch\ndef fit(loader, x):\n    net = Net()\n    opt = torch.optim.SGD(net.parameters(), lr=0.1)\n    for xb in loader:\n"
        "        net(xb).sum().backward()\n        opt.step()\n    net.eval()\n    print(net(x))\n    for xb in loader:\n"
        "        net(xb).sum().backward()\n        opt.step()\n"
    )
    assert _gf105(code) == (
        # reported at the step that runs in eval mode: the second loop's
        [(11, 8, "`fit` may train `net` in eval mode: `net.eval()` (line 8) is not undone before every step", _NO_PLACE)],
        code,
    )


def test_a_run_on_a_folder_asks_the_project_whether_the_module_is_mode_free(tmp_path: Path, capsys):
    # `Net` (models.py) holds only a Linear: eval mode changes nothing for it. GF105 needs the
    # project index to see that; the index is built because the rule says it uses one.
    from gradfix.cli import main

    (tmp_path / "models.py").write_text(
        "import torch.nn as nn\n\nclass Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.fc = nn.Linear(2, 2)\n\n    def forward(self, x):\n        return self.fc(x)\n"
    )
    (tmp_path / "train.py").write_text(
        "import torch\nfrom models import Net\n" + _EVAL_HELPER + "\ndef fit(loader, x):\n    model = Net()\n"
        "    opt = torch.optim.SGD(model.parameters(), lr=0.1)\n    for epoch in range(3):\n        for xb in loader:\n"
        "            model(xb).sum().backward()\n            opt.step()\n        evaluate(model, x)\n"
    )
    with pytest.raises(SystemExit) as done:
        main([str(tmp_path), "--select", "GF105"])
    assert done.value.code == 0 and "GF105" not in capsys.readouterr().out
    # The file alone: `Net` is unknown, so it may hold dropout or batch norm.
    with pytest.raises(SystemExit) as done:
        main([str(tmp_path / "train.py"), "--select", "GF105"])
    assert done.value.code == 1 and "GF105 [unsafe] `fit` may train `model` in eval mode" in capsys.readouterr().out
