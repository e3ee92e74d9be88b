"""How fast gradfix feels, measured in one run: startup, cold and warm reports, SARIF scaling.

    python bench/speed.py [TREE ...] [--repeat 2] [--jobs N]

Every figure is one fresh process (``python -m gradfix ...``), timed from outside: CPU is the
process's user+sys time *including every worker it started* (``RUSAGE_CHILDREN``), wall is
elapsed time. The best of ``--repeat`` runs is shown. Bytecode caches are used as an installed
gradfix would (``PYTHONDONTWRITEBYTECODE`` is dropped for the children).

- startup: ``python -c pass`` against ``gradfix --version`` and a one-file report.
- per tree: the floors are processes that read and ``ast.parse`` exactly the ``.py`` files
  gradfix checks, serially (one process) and with a process pool of ``--jobs`` workers
  (gradfix's own default: one per core, at most 8). gradfix runs report mode with all default
  rules (``--no-notebooks``, since the floors parse ``.py`` files only): cold (an empty cache)
  with one process (``-j 1``) and with its default pool, then warm (the same cache again).
  Ratios: single-process gradfix over the serial floor, pooled gradfix over the pooled floor,
  warm over cold.
- sarif: files with 10 / 100 / 1,000 findings (``with torch.no_grad:``); text report against
  SARIF (which carries each finding's own fix): SARIF time per finding must stay flat.

Machines are shared and noisy: compare figures from one run only, and say the load (``uptime``).
``--baseline DIR`` (another checkout of gradfix, e.g. a ``git worktree`` of main) measures it
too, in the same run: each gradfix row is followed by the baseline's, run right after it on
the same tree and against the same floors. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gradfix.files import discover  # noqa: E402

DEFAULT_TREES = [Path("/work/trees") / name for name in ("timm", "fairseq", "lightning", "examples")]
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
OUTER_PATH = ENV.get("PYTHONPATH")


def env_of(root: Path) -> dict:
    """The environment that runs the gradfix of checkout ``root``."""
    return {**ENV, "PYTHONPATH": str(root) + (os.pathsep + OUTER_PATH if OUTER_PATH else "")}


ENV = env_of(ROOT)
#: (label, environment) of each gradfix measured: this checkout, then any --baseline.
CHECKOUTS: list[tuple[str, dict]] = [("", ENV)]

FLOOR_SERIAL = """
import ast, sys
for path in open(sys.argv[1], encoding="utf-8").read().splitlines():
    try:
        ast.parse(open(path, "rb").read(), filename=path)
    except (SyntaxError, ValueError):
        pass
"""

FLOOR_POOLED = """
import ast, sys
from concurrent.futures import ProcessPoolExecutor

def parse(path):
    try:
        ast.parse(open(path, "rb").read(), filename=path)
    except (SyntaxError, ValueError):
        pass

if __name__ == "__main__":
    paths = open(sys.argv[1], encoding="utf-8").read().splitlines()
    workers = int(sys.argv[2])
    with ProcessPoolExecutor(workers) as pool:
        list(pool.map(parse, paths, chunksize=max(1, len(paths) // (workers * 8))))
"""


def measure(command: list[str], repeat: int, env: dict | None = None, cwd: Path | None = None) -> tuple[float, float]:
    """Best (CPU seconds, wall seconds) of ``repeat`` runs of ``command``, run from a neutral
    folder by default: ``python -m gradfix`` started inside a checkout imports that checkout's
    gradfix whatever PYTHONPATH says, which made ``--baseline`` measure this checkout twice."""
    cwd = cwd or Path(tempfile.gettempdir())
    best_cpu = best_wall = float("inf")
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run(command, env=env or ENV, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        best_cpu, best_wall = min(best_cpu, cpu), min(best_wall, wall)
    return best_cpu, best_wall


def gradfix(*args: str) -> list[str]:
    return [sys.executable, "-m", "gradfix", *args]


def startup(repeat: int, scratch: Path) -> None:
    sample = scratch / "one.py"
    sample.write_text("import torch\n\nwith torch.no_grad:\n    y = model(x)\n")
    base_cpu, base_wall = measure([sys.executable, "-c", "pass"], repeat)
    print("## startup (best of %d)\n" % repeat)
    print("| command | CPU s | above `python -c pass` | wall s |")
    print("|---|---:|---:|---:|")
    print(f"| `python -c pass` | {base_cpu:.3f} | | {base_wall:.3f} |")
    for label, command in (
        ("`gradfix --version`", gradfix("--version")),
        ("`gradfix one.py` (report, 1 finding)", gradfix("--no-cache", str(sample))),
    ):
        for which, env in CHECKOUTS:
            cpu, wall = measure(command, repeat, env)
            print(f"| {label}{which} | {cpu:.3f} | {cpu - base_cpu:+.3f} | {wall:.3f} |")
    print()


def trees(paths: list[Path], repeat: int, jobs: int, scratch: Path) -> None:
    print(f"## report mode per tree (best of {repeat}; pool: {jobs} workers)\n")
    print(
        "| tree | files | MB | findings | floor serial CPU / wall | gradfix -j 1 cold CPU / wall | ratio CPU"
        " | floor pooled CPU / wall | gradfix pooled cold CPU / wall | ratio CPU | warm CPU / wall | warm/cold CPU |"
    )
    print("|---|---:|---:|---:|---|---|---:|---|---|---:|---|---:|")
    for tree in paths:
        files = [str(d.path.resolve()) for d in discover([tree], extensions=(".py",))]
        listing = scratch / f"{tree.name}.txt"
        listing.write_text("\n".join(files), encoding="utf-8")
        size = sum(os.path.getsize(f) for f in files) / 1e6
        floor = measure([sys.executable, "-c", FLOOR_SERIAL, str(listing)], repeat)
        floor_pool = measure([sys.executable, "-c", FLOOR_POOLED, str(listing), str(jobs)], repeat)
        report = ["--no-notebooks", str(tree)]
        for number, (which, env) in enumerate(CHECKOUTS):
            env_for = lambda cache: {**env, "GRADFIX_CACHE_DIR": str(cache)}  # noqa: E731
            cache = f"{tree.name}-{number}"
            single = min(
                (measure(gradfix("-j", "1", *report), 1, env_for(scratch / f"c1-{cache}-{i}")) for i in range(repeat)),
            )
            pooled = min(
                (measure(gradfix("-j", str(jobs), *report), 1, env_for(scratch / f"cp-{cache}-{i}")) for i in range(repeat)),
            )
            warm = measure(gradfix("-j", str(jobs), *report), repeat, env_for(scratch / f"cp-{cache}-0"))
            done = subprocess.run(
                gradfix("--no-cache", "--format", "json", *report), env=env, capture_output=True, text=True
            )
            findings = done.stdout.count('"code":')
            print(
                f"| {tree.name}{which} | {len(files)} | {size:.1f} | {findings} | {floor[0]:.2f} / {floor[1]:.2f} |"
                f" {single[0]:.2f} / {single[1]:.2f} | {single[0] / floor[0]:.2f}x |"
                f" {floor_pool[0]:.2f} / {floor_pool[1]:.2f} | {pooled[0]:.2f} / {pooled[1]:.2f} |"
                f" {pooled[0] / floor_pool[0]:.2f}x | {warm[0]:.2f} / {warm[1]:.2f} | {warm[0] / pooled[0]:.0%} |"
            )
    print()


def sarif_scaling(repeat: int, scratch: Path) -> None:
    print(f"## SARIF (each finding's own fix) against text, one file (best of {repeat})\n")
    print("| findings | text CPU s | sarif CPU s | sarif ms per finding | `--diff` CPU s |")
    print("|---:|---:|---:|---:|---:|")
    for count in (10, 100, 1000):
        path = scratch / f"findings_{count}.py"
        body = "".join(f"def f{i}(x):\n    with torch.no_grad:\n        y = x * {i}\n    return y\n\n" for i in range(count))
        path.write_text("import torch\n\n" + body)
        for which, env in CHECKOUTS:
            text, _ = measure(gradfix("--no-cache", str(path)), repeat, env)
            sarif, _ = measure(gradfix("--no-cache", "--format", "sarif", str(path)), repeat, env)
            diff, _ = measure(gradfix("--diff", str(path)), repeat, env)
            print(f"| {count}{which} | {text:.2f} | {sarif:.2f} | {1000 * sarif / count:.1f} | {diff:.2f} |")
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trees", nargs="*", type=Path, help="source trees (default: /work/trees/{timm,fairseq,lightning,examples})")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--jobs", type=int, default=min(os.cpu_count() or 1, 8), help="pool size for the pooled runs")
    parser.add_argument("--baseline", type=Path, help="another gradfix checkout to measure in the same run")
    parser.add_argument("--no-sarif", action="store_true", help="skip the SARIF scaling table")
    args = parser.parse_args()
    if args.baseline is not None:
        CHECKOUTS[:] = [(" (this)", ENV), (f" ({args.baseline.name})", env_of(args.baseline.resolve()))]
    paths = args.trees or [t for t in DEFAULT_TREES if t.is_dir()]
    print(f"load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f} on {os.cpu_count()} cores\n")
    with tempfile.TemporaryDirectory(prefix="gradfix-bench-") as scratch:
        startup(max(args.repeat, 3), Path(scratch))
        if not args.no_sarif:
            sarif_scaling(args.repeat, Path(scratch))
        trees(paths, args.repeat, args.jobs, Path(scratch))
    print(f"load after: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")


if __name__ == "__main__":
    main()
