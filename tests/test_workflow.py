"""Adoption workflows: verified migration (--verify-cmd) and interactive review in a real terminal."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

MODEL = '''import torch
from torch.autograd import Variable


def mean_loss(x):
    loss = (x * 2).mean()
    return loss.data[0]


def evaluate(x):
    return Variable(x, volatile=True) * 2
'''

# The sample project's own test: it pins the legacy IndexError, so GF403's fix breaks it.
CHECK = '''import torch, model
try:
    model.mean_loss(torch.ones(3))
except IndexError:
    pass
else:
    raise SystemExit("mean_loss no longer raises IndexError")
assert model.evaluate(torch.ones(2)).sum() == 4
'''


def gradfix(*args, cwd: Path, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gradfix", *args], cwd=cwd, capture_output=True, text=True, timeout=120, **kwargs
    )


@pytest.fixture
def sample(tmp_path: Path) -> Path:
    pytest.importorskip("torch")
    (tmp_path / "model.py").write_text(MODEL)
    (tmp_path / "check.py").write_text(CHECK)
    return tmp_path


def _needs(*codes):
    from gradfix.rules import rule_by_code

    missing = [c for c in codes if rule_by_code(c) is None]
    if missing:
        pytest.skip(f"rules not available: {missing}")


def test_verify_cmd_keeps_passing_rules_and_reverts_the_breaking_one(sample):
    _needs("GF401", "GF403")
    proc = gradfix("--apply", "--verify-cmd", f"{sys.executable} -W ignore check.py", "model.py", cwd=sample)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "GF401: kept" in proc.stdout
    assert "GF403: REVERTED" in proc.stdout and "mean_loss no longer raises IndexError" in proc.stdout
    text = (sample / "model.py").read_text()
    assert "x.detach() * 2" in text and "Variable" not in text  # GF401 kept, import dropped
    assert "loss.data[0]" in text  # GF403 reverted
    assert subprocess.run([sys.executable, "-W", "ignore", "check.py"], cwd=sample).returncode == 0


def test_verify_cmd_refuses_a_failing_baseline(sample):
    (sample / "check.py").write_text("raise SystemExit('red before gradfix')\n")
    proc = gradfix("--apply", "--verify-cmd", f"{sys.executable} check.py", ".", cwd=sample)
    assert proc.returncode == 2
    assert "fails before any fix; nothing was changed" in proc.stdout and "red before gradfix" in proc.stdout
    assert (sample / "model.py").read_text() == MODEL


def test_verify_cmd_all_pass(sample):
    _needs("GF401", "GF403")
    (sample / "check.py").write_text("import model\n")
    proc = gradfix("--apply", "--verify-cmd", f"{sys.executable} -W ignore check.py", "model.py", cwd=sample)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "All fixes applied together" in proc.stdout


def test_interactive_review_in_a_real_terminal(sample):
    _needs("GF401", "GF403")
    pexpect = pytest.importorskip("pexpect")
    env = {**os.environ, "COLUMNS": "200", "TERM": "xterm"}
    child = pexpect.spawn(
        sys.executable, ["-m", "gradfix", "--interactive", "model.py"], cwd=str(sample), env=env, encoding="utf-8", timeout=60
    )
    child.expect("GF403")
    child.expect(r"\[y/n/a/d/q\]")
    child.sendline("n")  # skip the loss.data[0] fix
    child.expect("GF401")
    child.expect(r"\[y/n/a/d/q\]")
    child.sendline("y")  # apply the Variable fix
    child.expect(pexpect.EOF)
    child.close()
    text = (sample / "model.py").read_text()
    assert "loss.data[0]" in text and "x.detach() * 2" in text
    assert child.exitstatus == 1  # a finding (the skipped one) remains


def test_interactive_quit_writes_nothing(sample):
    _needs("GF403")
    pexpect = pytest.importorskip("pexpect")
    child = pexpect.spawn(sys.executable, ["-m", "gradfix", "-i", "model.py"], cwd=str(sample), encoding="utf-8", timeout=60)
    child.expect(r"\[y/n/a/d/q\]")
    child.sendline("q")
    child.expect(pexpect.EOF)
    assert (sample / "model.py").read_text() == MODEL


def test_interactive_needs_a_terminal(sample):
    proc = gradfix("--interactive", "model.py", cwd=sample, stdin=subprocess.DEVNULL)
    assert proc.returncode == 2 and "needs a terminal" in proc.stderr
