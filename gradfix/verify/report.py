"""Verification output: a rich table (one row per scenario × style × device) or JSON."""

from __future__ import annotations

import json
from typing import Iterable

from gradfix.verify.harness import Case, TOLERANCE_NOTE

_STYLES = {
    "equivalent": "green",
    "intended change confirmed": "green",
    "diagnosis confirmed": "green",
    "skipped": "yellow",
}


def fmt_bytes(n: int | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def fmt_time(t: float | None) -> str:
    return "-" if t is None else f"{t * 1000:.1f} ms"


def render_table(cases: Iterable[Case], console=None) -> None:
    from rich.console import Console
    from rich.table import Table

    if console is None:
        import sys

        console = Console(width=None if sys.stdout.isatty() else 160)
    table = Table(title="gradfix verify", caption=(
        "mem: peak bytes allocated by torch during one run (CUDA: max_memory_allocated; CPU: profiler "
        f"allocation events); time: wall time of one unobserved run; {TOLERANCE_NOTE}"
    ))
    for name in ("scenario", "rule", "style", "device", "verdict", "mem before", "mem after", "time before", "time after"):
        table.add_column(name, no_wrap=name in ("verdict", "rule", "device"))
    notes = []
    for case in cases:
        colour = _STYLES.get(case.verdict, "bold red")
        table.add_row(
            case.scenario.name,
            case.scenario.rule,
            case.style,
            case.device,
            f"[{colour}]{case.verdict}[/]",
            fmt_bytes(case.measure("before", "peak_bytes")),
            fmt_bytes(case.measure("after", "peak_bytes")),
            fmt_time(case.measure("before", "time_s")),
            fmt_time(case.measure("after", "time_s")),
        )
        if case.failed or case.verdict == "skipped":
            notes.append(f"{case.scenario.name} [{case.style}, {case.device}] {case.verdict}: {case.detail}")
    console.print(table)
    for note in notes:
        console.print(note, markup=False, highlight=False)


def summary_line(cases: list[Case]) -> str:
    counts: dict[str, int] = {}
    for case in cases:
        counts[case.verdict] = counts.get(case.verdict, 0) + 1
    parts = ", ".join(f"{n} {v}" for v, n in sorted(counts.items()))
    return f"{len(cases)} verification(s): {parts}"


def to_json(cases: list[Case]) -> str:
    return json.dumps(
        {
            "tolerance": TOLERANCE_NOTE,
            "results": [c.as_json() for c in cases],
            "failed": sum(c.failed for c in cases),
        },
        indent=2,
    )
