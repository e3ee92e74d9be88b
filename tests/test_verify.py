"""The verification harness: contracts, comparison, scenarios, and real before/after runs.

``-m verify`` selects the tests that run fixture models in fresh processes (CPU; CUDA when
present). The rest are fast unit tests of the pieces.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from gradfix.model import FixSafety  # noqa: E402
from gradfix.rules import all_rules, rule_by_code  # noqa: E402
from gradfix.verify import contract as C  # noqa: E402
from gradfix.verify.compare import Comparator  # noqa: E402
from gradfix.verify.harness import MISMATCH, NOT_FIRED, SKIPPED, judge, style_options, verify  # noqa: E402
from gradfix.verify.scenario import Scenario, ScenarioError, discover, read_scenario  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
SCENARIOS = discover([FIXTURES])
RULES_MD = Path("/work/shared/rules.md")
CATALOGUE = sorted(set(re.findall(r"^\| (GF\d{3}) \|", RULES_MD.read_text(), re.M))) if RULES_MD.exists() else []


# ---------------------------------------------------------------------------------------------
# unit tests (no processes)
# ---------------------------------------------------------------------------------------------
def _obs(calls=(), exception=None, grads=None, state=None, files=None):
    calls = [
        {
            "index": i,
            "name": c.get("name", "step"),
            "returned": c.get("returned", {}),
            "requires_grad": c.get("requires_grad", {}),
            "inference": {},
            "numbers": {},
            "grad_enabled": c.get("grad_enabled", True),
            "inference_mode": False,
            "training": c.get("training", {"model": True}),
            "state": c.get("state", {}),
            "forwards": c.get("forwards", ()),
        }
        for i, c in enumerate(calls)
    ]
    return {
        "calls": calls,
        "initial_state": state or {},
        "final_state": state or {},
        "grads": grads or {},
        "files": files or {},
        "exception": exception,
        "grad_enabled_end": True,
    }


SAFE_RULE = type("SafeRule", (), {"fix_safety": FixSafety.SAFE, "contract": None})
UNSAFE_RULE = type("UnsafeRule", (), {"fix_safety": FixSafety.UNSAFE, "contract": None})
DUMMY = Scenario(Path("x.py"), "GF999", "equivalent")


def test_safe_fix_defaults_to_equivalent_contract():
    assert C.resolve(SAFE_RULE) is C.EQUIVALENT
    assert C.resolve(UNSAFE_RULE) is None
    assert isinstance(C.resolve(type("Diag", (), {"fix_safety": None, "contract": None})), C.Diagnosis)


def test_contract_per_style_and_callable():
    a, b = C.Contract("a"), C.Contract("b")
    rule = type("R", (), {"fix_safety": FixSafety.UNSAFE, "contract": staticmethod(lambda: {"x": a, "y": b})})
    assert C.resolve(rule, {"style": "y"}) is b
    assert C.resolve(rule, {"style": "x"}) is a


def test_comparator_is_bitwise_on_cpu_and_tolerant_on_cuda():
    x = torch.tensor([1.0, 2.0])
    y = x + 1e-7
    assert Comparator("cpu").why(x, x.clone()) is None
    assert Comparator("cpu").why(x, y) is not None
    assert Comparator("cuda").why(x, y) is None
    assert Comparator("cpu").why(x, x.double()) is not None  # dtype matters
    assert Comparator("cpu").why(torch.tensor([float("nan")]), torch.tensor([float("nan")])) is None
    assert Comparator("cpu").why(b"abc", b"abd") is not None


def test_equal_runs_are_equivalent_and_any_difference_is_a_mismatch():
    t = torch.ones(3)
    before = _obs([{"returned": {"": t}}])
    assert judge(DUMMY, SAFE_RULE, {}, before, _obs([{"returned": {"": t.clone()}}]), "cpu").verdict == "equivalent"
    for after in (
        _obs([{"returned": {"": t * 2}}]),
        _obs([{"returned": {"": t}, "grad_enabled": False}]),
        _obs([{"returned": {"": t}, "training": {"model": False}}]),
        _obs([{"returned": {"": t}}], exception={"type": "RuntimeError", "message": "x", "call": "step"}),
        _obs([{"returned": {"": t}}], files={"ckpt.pt": b"1"}),
        _obs([{"returned": {"": t}}], grads={"model.w": None}),
    ):
        verdict = judge(DUMMY, SAFE_RULE, {}, before, after, "cpu")
        assert verdict.verdict == MISMATCH, after
        assert "first differing observable" in verdict.detail


def test_unsafe_contract_allows_only_declared_differences():
    rule = type("R", (), {"fix_safety": FixSafety.UNSAFE, "contract": C.Contract("no graph", ("*.requires_grad",))})
    t = torch.ones(2)
    before = _obs([{"returned": {"": t}, "requires_grad": {"": True}}])
    ok = judge(DUMMY, rule, {}, before, _obs([{"returned": {"": t}, "requires_grad": {"": False}}]), "cpu")
    assert ok.verdict == C.INTENDED_VERDICT
    bad = judge(DUMMY, rule, {}, before, _obs([{"returned": {"": t + 1}, "requires_grad": {"": False}}]), "cpu")
    assert bad.verdict == MISMATCH and "returned" in bad.detail


def test_downstream_differences_follow_the_intended_change_but_kept_ones_do_not():
    contract = C.Contract("leak", ("*: grad mode after",), (C.GradModeKept(),), downstream=True, keep=("*: training *",))
    rule = type("R", (), {"fix_safety": FixSafety.UNSAFE, "contract": contract})
    before = _obs([{"grad_enabled": False}, {"returned": {"": torch.zeros(1)}}])
    after = _obs([{}, {"returned": {"": torch.ones(1)}}])
    assert judge(DUMMY, rule, {}, before, after, "cpu").verdict == C.INTENDED_VERDICT
    after_bad = _obs([{}, {"returned": {"": torch.ones(1)}, "training": {"model": False}}])
    assert judge(DUMMY, rule, {}, before, after_bad, "cpu").verdict == MISMATCH
    still_leaks = _obs([{"grad_enabled": False}, {"returned": {"": torch.zeros(1)}, "grad_enabled": False}])
    verdict = judge(DUMMY, rule, {}, before, still_leaks, "cpu")
    assert verdict.verdict == MISMATCH and "leaves" not in verdict.detail or "left grad mode" in verdict.detail


def test_expectations_about_grads_and_exceptions():
    roles = {"frozen": "model.enc", "trainable": "model.dec"}
    scenario = Scenario(Path("x.py"), "GF999", "intended change confirmed", roles)
    contract = C.Contract(
        "train dec only",
        ("exception",),
        (C.ExceptionFixed("RuntimeError", "does not require grad"), C.Grads("trainable", True), C.Grads("frozen", False)),
        downstream=True,
    )
    rule = type("R", (), {"fix_safety": FixSafety.UNSAFE, "contract": contract})
    raised = {"type": "RuntimeError", "message": "element 0 of tensors does not require grad", "call": "step"}
    before = _obs([], exception=raised, grads={"model.enc.w": None, "model.dec.w": None})
    good = _obs([{}], grads={"model.enc.w": None, "model.dec.w": torch.ones(2)})
    assert judge(scenario, rule, {}, before, good, "cpu").verdict == C.INTENDED_VERDICT
    leaks_into_frozen = _obs([{}], grads={"model.enc.w": torch.ones(2), "model.dec.w": torch.ones(2)})
    verdict = judge(scenario, rule, {}, before, leaks_into_frozen, "cpu")
    assert verdict.verdict == MISMATCH and "model.enc.w" in verdict.detail


def test_scenario_declaration_is_read_without_running(tmp_path):
    path = tmp_path / "s.py"
    path.write_text('GRADFIX_VERIFY = {"rule": "gf203", "roles": {"eval": "f"}}\ndef gradfix_scenario(probe):\n    pass\n')
    scenario = read_scenario(path)
    assert scenario.rule == "GF203" and scenario.expect == "equivalent" and scenario.roles == {"eval": "f"}
    (tmp_path / "plain.py").write_text("x = 1\n")
    assert [s.path.name for s in discover([tmp_path])] == ["s.py"]
    path.write_text('GRADFIX_VERIFY = {"rule": "GF203"}\n')
    with pytest.raises(ScenarioError):
        read_scenario(path)


def test_style_options_cover_every_option_value():
    for rule in all_rules():
        combos = style_options(rule, Scenario(Path("x.py"), rule.code, "equivalent"))
        for option in rule.options:
            assert {c[option.name] for c in combos} == set(option.choices)


def test_every_rule_has_a_shipped_scenario():
    covered = {s.rule for s in SCENARIOS}
    missing = [r.code for r in all_rules() if r.code not in covered]
    assert not missing, f"rules without a fixture scenario: {missing}"


def test_shipped_scenarios_cover_the_catalogue():
    if not CATALOGUE:
        pytest.skip("rules.md not available")
    assert set(CATALOGUE) <= {s.rule for s in SCENARIOS}


def test_unsafe_rules_declare_a_contract():
    for rule in all_rules():
        if rule.fix_safety is FixSafety.UNSAFE:
            assert C.resolve(rule) is not None or all(C.resolve(rule, o) for o in style_options(rule, Scenario(Path("x"), rule.code, "")))


def test_a_scenario_where_the_rule_does_not_fire_fails(tmp_path):
    path = tmp_path / "quiet.py"
    path.write_text(
        'import torch\nGRADFIX_VERIFY = {"rule": "GF101"}\n\n'
        "def evaluate(model, x):\n    with torch.no_grad():\n        return model(x)\n\n"
        "def gradfix_scenario(probe):\n    probe.call(evaluate, torch.nn.Linear(2, 2), torch.ones(1, 2))\n"
    )
    cases = verify(discover([path]), ["cpu"])
    assert [c.verdict for c in cases] == [NOT_FIRED]
    assert "verifies nothing" in cases[0].detail


def test_cli_without_torch_says_how_to_install(monkeypatch, capsys):
    import gradfix.verify as verify_pkg

    monkeypatch.setattr(verify_pkg, "torch_available", lambda: False)
    assert verify_pkg.run([FIXTURES]) == 2
    assert "install gradfix[verify]" in capsys.readouterr().err


def test_cli_rejects_bad_arguments(tmp_path):
    def run(*args):
        return subprocess.run([sys.executable, "-m", "gradfix", "verify", *args], capture_output=True, text=True, cwd=ROOT)

    assert run("--device", "tpu").returncode == 2
    assert run(str(tmp_path / "missing")).returncode == 2
    if not torch.cuda.is_available():
        result = run("--device", "cuda", str(FIXTURES / "gf101_mlp_eval_no_call.py"))
        assert result.returncode == 2 and "cuda" in result.stderr.lower()


# ---------------------------------------------------------------------------------------------
# real runs: every shipped scenario before/after on CPU, and planted bad fixes
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cpu_cases():
    return verify(SCENARIOS, ["cpu"])


def _ids(case):
    return f"{case.scenario.name}[{case.style}]"


@pytest.mark.verify
@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_shipped_scenario_verifies_on_cpu(scenario, cpu_cases):
    cases = [c for c in cpu_cases if c.scenario == scenario]
    assert cases
    for case in cases:
        if case.verdict == SKIPPED:
            pytest.skip(case.detail)
        assert case.verdict == scenario.expect, f"{_ids(case)}: {case.verdict}: {case.detail}"
        assert case.before is not None and case.before["peak_bytes"] is not None


def _plant(replacements):
    """A deliberately broken 'fix': textual edits of the original instead of gradfix's fix."""

    def broken(source: bytes, code: str, options) -> bytes:
        new = source
        for old, repl in replacements.get(code, ()):
            assert old in new, old
            new = new.replace(old, repl)
        return new

    return broken


PLANTED = {
    # "Variable(x) is x": keeps the previous segment's graph -> backward through it again
    "GF402": [(b"return Variable(h.data)", b"return h")],
    # set_grad_enabled(False) -> enable_grad(): validation records graphs
    "GF205": [(b"with torch.set_grad_enabled(False):", b"with torch.enable_grad():")],
    # GF103 "fix" that drops no_grad without detaching: the frozen encoder trains
    "GF103": [
        (b"    with torch.no_grad():\n        z = model.encoder(batch)\n        recon = model.decoder(z)\n",
         b"    z = model.encoder(batch)\n    recon = model.decoder(z)\n"),
    ],
}


@pytest.mark.verify
def test_planted_wrong_rewrites_are_caught():
    names = {"GF402": "gf402_lm_repackage_hidden", "GF205": "gf205_set_grad_enabled_literal", "GF103": "gf103_frozen_encoder"}
    scenarios = [s for s in SCENARIOS if s.name in names.values() and rule_by_code(s.rule)]
    if not scenarios:
        pytest.skip("the planted rules are not implemented")
    cases = verify(scenarios, ["cpu"], broken_fix=_plant(PLANTED))
    assert cases
    for case in cases:
        assert case.verdict == MISMATCH, f"{_ids(case)} passed a broken fix: {case.verdict} {case.detail}"
    details = {c.scenario.rule: c.detail for c in cases}
    if "GF103" in details:
        assert "model.encoder" in details["GF103"]


@pytest.mark.verify
@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA is not available on this machine")
def test_shipped_scenarios_verify_on_cuda():
    cases = verify(SCENARIOS, ["cuda"])
    bad = [f"{_ids(c)}: {c.verdict}: {c.detail}" for c in cases if c.failed or (c.ok and c.verdict not in (SKIPPED, c.scenario.expect))]
    assert not bad, "\n".join(bad)


@pytest.mark.verify
def test_cli_runs_user_scenarios_in_spawned_processes_and_exits_1_on_mismatch(tmp_path):
    """The subprocess path (no fork server), JSON output, and exit 1 on a wrong declaration."""
    import json
    import os

    source = (FIXTURES / "gf203_checkpoint_in_no_grad.py").read_text()
    (tmp_path / "ok.py").write_text(source)
    (tmp_path / "wrong.py").write_text(source.replace('"expect": "equivalent"', '"expect": "intended"'))
    env = dict(os.environ, GRADFIX_VERIFY_SPAWN="1")
    result = subprocess.run(
        [sys.executable, "-m", "gradfix", "verify", str(tmp_path), "--format", "json"],
        capture_output=True, text=True, cwd=ROOT, env=env,
    )
    if rule_by_code("GF203") is None:
        pytest.skip("GF203 is not implemented")
    report = json.loads(result.stdout)
    verdicts = {Path(r["scenario"]).name: r["verdict"] for r in report["results"]}
    assert verdicts == {"ok.py": "equivalent", "wrong.py": MISMATCH}, result.stderr
    assert result.returncode == 1
    assert all(r["peak_bytes_before"] is not None for r in report["results"])


def test_linting_and_contracts_never_import_torch():
    code = (
        "import sys\n"
        "import gradfix.cli, gradfix.verify, gradfix.verify.contract, gradfix.verify.scenario\n"
        "from gradfix.rules import all_rules\n"
        "from gradfix.verify.contract import resolve\n"
        "for rule in all_rules():\n"
        "    for style in [o for opt in rule.options for o in opt.choices] or [None]:\n"
        "        resolve(rule, {'style': style} if style else {})\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr


@pytest.mark.verify
def test_a_broken_scenario_is_an_error_not_a_pass(tmp_path):
    path = tmp_path / "typo.py"
    path.write_text(
        'import torch\nGRADFIX_VERIFY = {"rule": "GF101", "expect": "intended"}\n\n'
        "def evaluate(model, x):\n    with torch.no_grad:\n        return model(x)\n\n"
        "def gradfix_scenario(probe):\n    modle = torch.nn.Linear(2, 2)\n    probe.call(evaluate, model, torch.ones(1, 2))\n"
    )
    cases = verify(discover([path]), ["cpu"])
    assert [c.verdict for c in cases] == ["ERROR"]
    assert "outside probe.call" in cases[0].detail and "NameError" in cases[0].detail
