"""Honest numbers: memory and time of the perf-relevant rewrites, before and after.

The article behind gradfix claims that "proper grad control saves about 30 % memory and 30 %
time" (its §6.3, RTX 3090, no table). This script measures it on gradfix's own fixtures
instead of repeating it: for each scenario of GF103 (styles detach and narrow), GF301, GF302
and GF303, it rewrites the scenario with gradfix, checks the rewrite still verifies, and runs
the original and the rewrite in fresh processes (same seeds, one CPU thread):

* peak memory: CUDA: ``torch.cuda.max_memory_allocated`` during one run, minus what was
  allocated before it. CPU: the peak of net bytes allocated by torch's CPU allocator during one
  run, from the profiler's allocation events (``profile_memory=True``): tensors and autograd
  graphs (saved activations), not the Python heap or the interpreter.
  Reported for the call the scenario names in ``GRADFIX_VERIFY["bench"]`` (the rewritten
  one): its peak above what was live when it started (max over its calls).
* time: the median over ``--repeat`` runs (after one warm-up run, without observation hooks or
  the profiler) of the time spent in that call: CPU time (``time.process_time``, one thread:
  robust to other load on the machine) on CPU, wall time (synchronised) on CUDA.

GF103's original raises (the no_grad RuntimeError) so its "before" is a crash; the row
"narrow vs detach" compares the two fixed styles, which is the comparison that matters.

Usage: ``python bench/memory_time.py [--device cpu|cuda|all] [--scale 1,16] [--repeat 7]``.
``--scale`` multiplies the fixtures' batch sizes (models unchanged). Nothing is asserted:
the numbers are printed as measured, on whatever machine runs this.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PERF_RULES = ("GF103", "GF301", "GF302", "GF303")


def _short(verdict: str) -> str:
    ok = ("equivalent", "intended change confirmed")
    return "verified" if all(v.strip() in ok for v in verdict.split("/")) else verdict


def _measures(before: dict, after: dict, call: str | None, device: str) -> dict:
    """Peak memory and median time of ``call`` (whole scenario when None), before and after."""
    which = 0 if device.startswith("cuda") else 1  # wall time on CUDA, CPU time on CPU

    def figures(obs):
        if call is None:
            memory = obs["peak_bytes"]
            times = [sum(v[which] for v in run.values()) for run in obs["per_call_runs"]]
        else:
            memory = obs["call_peak_bytes"].get(call)
            times = [run[call][which] for run in obs["per_call_runs"] if call in run]
        return memory, (statistics.median(times) if times else None)

    mb, tb = figures(before)
    ma, ta = figures(after)
    change = lambda a, b: None if a is None or b is None or not a else (b - a) / a  # noqa: E731
    return {"mem_before": mb, "mem_after": ma, "mem_change": change(mb, ma),
            "time_before": tb, "time_after": ta, "time_change": change(tb, ta),
            "before_raised": before["exception"] is not None}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="all", choices=("cpu", "cuda", "all"))
    parser.add_argument("--scale", default="1,64", help="comma-separated batch-size multipliers")
    parser.add_argument("--repeat", type=int, default=7, help="timed runs per program (median)")
    parser.add_argument("--json", type=Path, help="also write the rows as JSON here")
    parser.add_argument("paths", nargs="*", type=Path, default=[ROOT / "fixtures"])
    args = parser.parse_args(argv)

    import torch

    from gradfix.rules import rule_by_code
    from gradfix.verify.harness import devices_for, verify
    from gradfix.verify.report import fmt_bytes
    from gradfix.verify.scenario import discover

    scenarios = [s for s in discover(args.paths) if s.rule in PERF_RULES]
    missing = [code for code in PERF_RULES if rule_by_code(code) is None]
    devices = devices_for(args.device)
    rows = []
    for scale in [int(s) for s in args.scale.split(",")]:
        # one program at a time: timings are not disturbed by parallel runs
        cases = verify(scenarios, devices, jobs=1, repeat=args.repeat, scale=scale)
        for case in cases:
            base = {"scenario": case.scenario.name, "rule": case.scenario.rule, "style": case.style,
                    "device": case.device, "scale": scale, "verdict": case.verdict, "call": case.scenario.bench}
            if case.before is None or case.after is None:
                rows.append({**base, "detail": case.detail})
                continue
            rows.append({**base, **_measures(case.before, case.after, case.scenario.bench, case.device)})
        # GF103: the issue asks for detach vs narrow (the original raises, so "before" is a crash)
        by_style = {}
        for case in cases:
            if case.scenario.rule == "GF103" and case.after is not None:
                by_style.setdefault((case.scenario.name, case.device), {})[case.style] = case
        for (name, device), styles in by_style.items():
            if {"style=detach", "style=narrow"} <= set(styles):
                detach, narrow = styles["style=detach"], styles["style=narrow"]
                rows.append({"scenario": name, "rule": "GF103", "style": "narrow vs detach", "device": device,
                             "scale": scale, "verdict": f"{detach.verdict} / {narrow.verdict}",
                             "call": detach.scenario.bench,
                             **_measures(detach.after, narrow.after, detach.scenario.bench, device)})

    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"gradfix bench: peak memory and time of the rewritten call, before → after (median of {args.repeat} runs)",
                  caption="memory: peak bytes above what was live when the call started; time: CPU time "
                          "(process_time, 1 thread) on cpu, wall time on cuda")
    for name in ("rule", "scenario", "style", "device", "scale", "call", "mem before", "mem after", "Δ mem",
                 "time before", "time after", "Δ time", "verify"):
        table.add_column(name, no_wrap=name != "scenario")
    pct = lambda x: "-" if x is None else f"{x * 100:+.1f} %"  # noqa: E731
    for r in rows:
        if "mem_before" not in r:
            table.add_row(r["rule"], r["scenario"], r["style"], r["device"], str(r["scale"]), str(r["call"]), *["-"] * 6, _short(r["verdict"]))
            continue
        table.add_row(
            r["rule"], r["scenario"], r["style"], r["device"], str(r["scale"]), str(r["call"]),
            fmt_bytes(r["mem_before"]), fmt_bytes(r["mem_after"]), pct(r["mem_change"]),
            f"{r['time_before'] * 1000:.2f} ms", f"{r['time_after'] * 1000:.2f} ms", pct(r["time_change"]),
            _short(r["verdict"]) + (" (original raises)" if r.get("before_raised") else ""),
        )
    console = Console(width=None if sys.stdout.isatty() else 200)
    console.print(table)
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
    print(f"torch {torch.__version__}; python {platform.python_version()}; cpu: {platform.processor() or platform.machine()} ({os.cpu_count()} cores); "
          f"gpu: {gpu}; CPU runs use 1 thread")
    if missing:
        print(f"not measured (rule not implemented): {', '.join(missing)}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
