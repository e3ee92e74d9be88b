"""Report-mode speed of gradfix against a bare ``ast.parse`` of the same files, in one run.

    python bench/ast_ratio.py DIR [--repeat 3] [--jobs N]

Baseline: read every ``.py`` file gradfix would check and ``ast.parse`` it, serially.
gradfix: discovery + the whole report pipeline (all default rules, findings, suppression)
through the library API the CLI uses, with its default worker pool. Also shown: LibCST parsing
alone, for scale. Prints the best of ``--repeat`` runs of each and their ratios; the target is
gradfix <= 2x ast.parse. Machines are shared and noisy: compare figures from one run only.
"""

from __future__ import annotations

import argparse
import ast
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gradfix.engine import Job  # noqa: E402
from gradfix.files import discover  # noqa: E402
from gradfix.model import Settings  # noqa: E402
from gradfix.runner import run_jobs  # noqa: E402


def bare_ast(paths: list[Path]) -> int:
    parsed = 0
    for path in paths:
        try:
            ast.parse(path.read_bytes(), filename=str(path))
            parsed += 1
        except (SyntaxError, ValueError):
            pass
    return parsed


def gradfix_report(directory: str, jobs: int | None) -> int:
    settings = Settings()
    work = [Job(str(d.path), settings, str(d.path)) for d in discover([directory])]
    results = run_jobs(work, want_fixes=False, workers=jobs)
    return sum(len(r.findings) for r in results)


def libcst_parse(paths: list[Path]) -> None:
    import libcst

    for path in paths:
        try:
            libcst.parse_module(path.read_bytes())
        except Exception:
            pass


def best_of(repeat: int, fn, *args) -> tuple[float, object]:
    best, value = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        value = fn(*args)
        best = min(best, time.perf_counter() - start)
    return best, value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("directory")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=None)
    parser.add_argument("--libcst", action="store_true", help="also time LibCST parsing (slow)")
    args = parser.parse_args()
    paths = [d.path for d in discover([args.directory])]
    size = sum(p.stat().st_size for p in paths)
    print(f"{args.directory}: {len(paths)} files, {size / 1e6:.1f} MB")
    t_ast, parsed = best_of(args.repeat, bare_ast, paths)
    t_gf, findings = best_of(args.repeat, gradfix_report, args.directory, args.jobs)
    print(f"{'ast.parse (serial)':<26}{t_ast:8.3f} s   1.00x   ({parsed} files parsed)")
    print(f"{'gradfix report':<26}{t_gf:8.3f} s   {t_gf / t_ast:5.2f}x   ({findings} findings)")
    if args.libcst:
        t_cst, _ = best_of(1, libcst_parse, paths)
        print(f"{'libcst.parse_module':<26}{t_cst:8.3f} s   {t_cst / t_ast:5.2f}x")
    verdict = "within" if t_gf <= 2 * t_ast else "OVER"
    print(f"ratio gradfix/ast.parse = {t_gf / t_ast:.2f} ({verdict} the 2x budget)")


if __name__ == "__main__":
    main()
