"""Installed, not only in a checkout: the wheel carries the verification scenarios, and the
installed gradfix works from a folder that knows nothing of the repository.

The wheel is built offline from this checkout (``pip wheel --no-deps --no-build-isolation``)
and unpacked into a temporary folder, which is what ``pip install --target`` does for a
pure-Python wheel; the commands then run with only that folder on ``PYTHONPATH``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    # A copy, so that the build's build/ and *.egg-info never land in the checkout.
    source = tmp_path_factory.mktemp("source") / "gradfix"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(".git", "build", "*.egg-info", "__pycache__", ".venv", "venv"))
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q", "-w", str(out), str(source)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if proc.returncode != 0:
        pytest.skip(f"cannot build a wheel here: {proc.stderr[-500:]}")
    (built,) = out.glob("gradfix-*.whl")
    return built


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory) -> Path:
    target = tmp_path_factory.mktemp("site")
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(target)
    return target


def run_installed(installed: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "NO_COLOR", "FORCE_COLOR")}
    env["PYTHONPATH"] = str(installed)
    env["NO_COLOR"] = "1"
    return subprocess.run([sys.executable, "-m", "gradfix", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_wheel_ships_every_scenario_from_the_one_fixtures_folder(wheel: Path):
    names = zipfile.ZipFile(wheel).namelist()
    shipped = sorted(n.split("/", 2)[2] for n in names if n.startswith("gradfix/fixtures/"))
    in_repo = sorted(p.name for p in (ROOT / "fixtures").iterdir() if p.suffix in (".py", ".md"))
    assert shipped == in_repo
    assert not (ROOT / "gradfix" / "fixtures").exists()  # one source of truth: no second copy


def test_installed_gradfix_runs_from_any_folder(installed: Path, tmp_path: Path):
    where = run_installed(installed, "--version", cwd=tmp_path)
    assert where.returncode == 0 and where.stdout.startswith("gradfix ")
    probe = subprocess.run(
        [sys.executable, "-c", "import gradfix, gradfix.verify.scenario as s; print(gradfix.__file__); print(s.shipped_fixtures())"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(installed)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    module, fixtures = probe.stdout.split()
    assert Path(module).is_relative_to(installed) and Path(fixtures) == installed / "gradfix" / "fixtures"


def test_installed_explain_points_to_no_file_the_wheel_lacks(installed: Path, tmp_path: Path):
    from gradfix.rules import all_rules

    for rule in all_rules():
        text = run_installed(installed, "explain", rule.code, cwd=tmp_path).stdout
        assert text.startswith(f"# {rule.code}")
        for line in text.splitlines():
            if "tests/" in line:
                assert "(in the gradfix source repository)" in line, line


def test_installed_verify_runs_a_shipped_scenario(installed: Path, tmp_path: Path):
    pytest.importorskip("torch")
    scenario = installed / "gradfix" / "fixtures" / "gf101_mlp_eval_no_call.py"
    proc = run_installed(installed, "verify", str(scenario), "--format", "json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert '"verdict": "intended change confirmed"' in proc.stdout.replace("'", '"')
