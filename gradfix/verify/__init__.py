"""``gradfix verify``: prove each rule's rewrite by running scenarios before and after.

Importing this package does not import torch; :func:`run` does (torch is the ``verify`` extra).
The pieces: :mod:`.scenario` (finding scenarios, torch-free), :mod:`.contract` (what a rule's
fix must do; torch-free, imported by rule modules), :mod:`.probe` (the child process that runs
one scenario and records it), :mod:`.compare` (observables and their comparison),
:mod:`.harness` (rewrite, run both ways, judge), :mod:`.report` (table / JSON).
"""

from __future__ import annotations

from pathlib import Path

MISSING_TORCH = "gradfix verify needs PyTorch: install gradfix[verify] (pip install 'gradfix[verify]')"


def torch_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("torch") is not None


def run(paths: list[Path], device: str = "cpu", output_format: str = "text", jobs: int | None = None) -> int:
    """Run verification and print the report; returns the exit code (0 ok, 1 mismatch, 2 error)."""
    import sys

    from gradfix.verify.scenario import ScenarioError, discover, shipped_fixtures

    if not torch_available():
        print(f"gradfix: {MISSING_TORCH}", file=sys.stderr)
        return 2
    if not paths:
        shipped = shipped_fixtures()
        if shipped is None:
            print("gradfix: no shipped fixtures found next to the package; pass a folder of scenarios", file=sys.stderr)
            return 2
        paths = [shipped]
    try:
        scenarios = discover(paths)
    except (ScenarioError, SyntaxError) as exc:
        print(f"gradfix: {exc}", file=sys.stderr)
        return 2
    if not scenarios:
        print("gradfix: no scenarios found (a scenario defines GRADFIX_VERIFY and gradfix_scenario)", file=sys.stderr)
        return 2

    from gradfix.verify.harness import devices_for, verify
    from gradfix.verify.report import render_table, summary_line, to_json

    try:
        devices = devices_for(device)
    except RuntimeError as exc:
        print(f"gradfix: {exc}", file=sys.stderr)
        return 2
    if device == "all" and "cuda" not in devices:
        print("gradfix: --device all: CUDA is not available on this machine (torch.cuda.is_available() is False); verifying on CPU only", file=sys.stderr)
    cases = verify(scenarios, devices, jobs=jobs)
    if output_format == "json":
        print(to_json(cases))
    else:
        render_table(cases)
        print(summary_line(cases))
    return 1 if any(c.failed for c in cases) else 0
