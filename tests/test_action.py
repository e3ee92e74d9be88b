"""The CI surfaces: the composite GitHub Action (action.yml) and the pre-commit hooks.

The action's ``run:`` steps are executed here with bash, as the runner would run them: the
``${{ ... }}`` expressions of each step's ``env`` and ``if`` are filled from the inputs, the
``uses:`` steps (code scanning upload) are checked for shape only. The install step runs pip
with ``--dry-run``, offline: it resolves and builds this checkout without installing it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).parents[1]
BUGGY = "import torch\n\n\ndef f(x):\n    with torch.no_grad:\n        y = x * 2\n    return y\n"
EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")


def load_action() -> dict:
    return yaml.safe_load((ROOT / "action.yml").read_text(encoding="utf-8"))


class Runner:
    """Just enough of the Actions runner for a composite action of bash steps."""

    def __init__(self, action: dict, inputs: dict[str, str], workspace: Path):
        self.inputs = {name: spec.get("default", "") for name, spec in action["inputs"].items()}
        unknown = set(inputs) - set(self.inputs)
        assert not unknown, f"not inputs of action.yml: {unknown}"
        self.inputs.update(inputs)
        self.workspace = workspace
        self.outputs: dict[str, dict[str, str]] = {}

    def value(self, expression: str):
        expression = expression.strip()
        if expression == "github.action_path":
            return str(ROOT)
        if expression == "always()":
            return True
        if " && " in expression:
            return all(self.value(part) for part in expression.split(" && "))
        if " == " in expression:
            left, right = expression.split(" == ")
            return self.value(left) == right.strip().strip("'")
        if expression.startswith("inputs."):
            return self.inputs[expression[len("inputs.") :]]
        if expression.startswith("steps."):
            _, step, _, name = expression.split(".")
            return self.outputs.get(step, {}).get(name, "")
        raise AssertionError(f"expression not understood by this test: {expression}")

    def fill(self, text: str) -> str:
        return EXPRESSION.sub(lambda m: str(self.value(m[1])), text)

    def run(self, pip_env: dict[str, str]) -> list[tuple[str, int, str]]:
        """Run the steps; returns (step name, exit status, output) for each step that ran."""
        ran = []
        for step in load_action()["runs"]["steps"]:
            condition = step.get("if")
            if condition is not None and not self.value(EXPRESSION.fullmatch(condition.strip())[1]):
                continue
            if "uses" in step:
                assert step["uses"].startswith("github/codeql-action/upload-sarif@")
                assert self.fill(step["with"]["sarif_file"]) == self.inputs["sarif-file"]
                ran.append((step["name"], 0, "(uses: not run here)"))
                continue
            assert step["shell"] == "bash"
            output_file = self.workspace / ".github_output"
            output_file.write_text("")
            env = {**os.environ, **pip_env, "GITHUB_OUTPUT": str(output_file), "PIP_TARGET": str(self.workspace / ".pip-target")}
            env.pop("NO_COLOR", None)
            env.update({k: self.fill(str(v)) for k, v in step.get("env", {}).items()})
            proc = subprocess.run(
                ["bash", "-e", "-c", step["run"]], cwd=self.workspace, env=env, capture_output=True, text=True, timeout=300
            )
            if "id" in step:
                pairs = [line.split("=", 1) for line in output_file.read_text().splitlines() if "=" in line]
                self.outputs[step["id"]] = dict(pairs)
            ran.append((step["name"], proc.returncode, proc.stdout + proc.stderr))
            if proc.returncode != 0:
                break
        return ran


# pip, offline and without installing anything: the install step is still run for real.
# PIP_TARGET too, so that even a pip that ignored --dry-run could never touch this environment.
DRY_PIP = {"PIP_DRY_RUN": "1", "PIP_NO_DEPS": "1", "PIP_NO_INDEX": "1", "PIP_NO_BUILD_ISOLATION": "0"}


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    if shutil.which("gradfix") is None:
        pytest.skip("the gradfix command is not on PATH")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text(BUGGY)
    return tmp_path


def test_action_metadata_is_a_composite_action():
    action = load_action()
    assert action["runs"]["using"] == "composite"
    assert {"args", "version", "format"} <= set(action["inputs"])
    assert action["outputs"]["exit-code"]["value"] == "${{ steps.run.outputs.exit-code }}"
    for step in action["runs"]["steps"]:
        assert "uses" in step or step.get("shell") == "bash"  # composite run steps must name a shell


def test_action_github_format_annotates_and_fails(workspace):
    runner = Runner(load_action(), {"args": "src"}, workspace)
    ran = runner.run(DRY_PIP)
    names = [name for name, _, _ in ran]
    assert names == ["Install gradfix", "Run gradfix", "Fail on findings"]  # no SARIF upload
    install, run, fail = ran
    assert install[1] == 0 and "Would install gradfix" in install[2]
    assert "::warning file=src/train.py,line=5,col=10," in run[2] and "GF101" in run[2]
    assert runner.outputs["run"]["exit-code"] == "1"
    assert fail[1] == 1  # the job fails: findings remain


def test_action_sarif_format_writes_the_report_and_uploads_it(workspace):
    runner = Runner(load_action(), {"args": "src", "format": "sarif", "fail-on-findings": "false"}, workspace)
    ran = runner.run(DRY_PIP)
    assert [name for name, _, _ in ran] == ["Install gradfix", "Run gradfix", "Upload SARIF to code scanning"]
    report = json.loads((workspace / "gradfix.sarif").read_text())
    assert report["runs"][0]["results"][0]["ruleId"] == "GF101"
    assert runner.outputs["run"]["exit-code"] == "1"


def test_action_clean_tree_passes(workspace):
    (workspace / "src" / "train.py").write_text(BUGGY.replace("no_grad:", "no_grad():"))
    runner = Runner(load_action(), {"args": "src"}, workspace)
    assert [status for _, status, _ in runner.run(DRY_PIP)] == [0, 0, 0]
    assert runner.outputs["run"]["exit-code"] == "0"


def test_action_rejects_an_unknown_format(workspace):
    runner = Runner(load_action(), {"args": "src", "format": "junit"}, workspace)
    ran = runner.run(DRY_PIP)
    assert "format must be github or sarif" in ran[1][2] and ran[-1][1] == 2


def test_pre_commit_hooks_check_notebooks_and_name_real_commands():
    hooks = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text(encoding="utf-8"))
    assert [h["id"] for h in hooks] == ["gradfix", "gradfix-fix"]
    for hook in hooks:
        assert hook["types_or"] == ["python", "jupyter"] and "types" not in hook
        assert hook["language"] == "python"
    proc = subprocess.run(
        [*hooks[0]["entry"].split(), "--help"], capture_output=True, text=True, timeout=60
    ) if shutil.which("gradfix") else None
    if proc is not None:
        assert proc.returncode == 0 and "--apply" in proc.stdout
