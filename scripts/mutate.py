"""Mutation testing with a small mutator over the stdlib ``ast`` (not part of CI).

For each module, N mutations are drawn (with a fixed seed) from: a flipped comparison
(``==``/``!=``, ``<``/``>=``, ``in``/``not in``, ``is``/``is not``), ``and``/``or`` swapped, a
condition negated (``if``/``while``/ternary/``assert``), one operand of an ``and``/``or`` dropped,
a constant changed (numbers +1, ``True``/``False`` swapped, a non-empty string emptied), a
slice bound moved by one, an augmented assignment's operator changed, and an early
``return None`` at the top of a function. Each mutant is written into a scratch copy of the
repository and the module's matching tests run there (``-x``, not slow, fixed order); a mutant
is killed when they fail (or run past the timeout). Prints a per-module killed/total table and
the surviving mutants.

    python scripts/mutate.py                      # writer, fixer, engine; 20 mutations each
    python scripts/mutate.py -n 40 gradfix/notebook.py:tests/test_notebooks.py
"""

from __future__ import annotations

import argparse
import ast
import copy
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

DEFAULT_TARGETS = {
    "gradfix/writer.py": ["tests/test_writer.py", "tests/test_pipeline.py", "tests/test_hostile.py"],
    "gradfix/fixer.py": ["tests/test_pipeline.py", "tests/test_fixer.py", "tests/test_no_code_lost.py", "tests/test_golden.py"],
    "gradfix/engine.py": [
        "tests/test_pipeline.py", "tests/test_no_code_lost.py", "tests/test_fixer.py", "tests/test_notebooks.py",
        "tests/test_cli.py", "tests/rules/test_rule_examples.py",
    ],
}

FLIP = {
    ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.Lt: ast.GtE, ast.GtE: ast.Lt, ast.Gt: ast.LtE, ast.LtE: ast.Gt,
    ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot, ast.IsNot: ast.Is,
}
AUG = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Add, ast.BitOr: ast.BitAnd, ast.BitAnd: ast.BitOr}


@dataclass
class Mutation:
    line: int
    what: str
    path: tuple  # how to reach the node: indexes through ast.walk order


def _sites(tree: ast.Module) -> list[tuple[int, str, str]]:
    """(node index in ast.walk order, kind, description) of every mutation this module allows."""
    sites = []
    docstrings = {
        id(n.body[0].value)
        for n in ast.walk(tree)
        if isinstance(n, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)
    }
    for index, node in enumerate(ast.walk(tree)):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Compare) and type(node.ops[0]) in FLIP:
            sites.append((index, "compare", f"line {line}: flip `{type(node.ops[0]).__name__}`"))
        elif isinstance(node, ast.BoolOp):
            sites.append((index, "boolop", f"line {line}: swap and/or"))
            sites.append((index, "drop", f"line {line}: drop the last operand of {type(node.op).__name__}"))
        elif isinstance(node, (ast.If, ast.While, ast.IfExp, ast.Assert)):
            sites.append((index, "negate", f"line {line}: negate the condition of {type(node).__name__}"))
        elif isinstance(node, ast.Constant) and id(node) not in docstrings:
            if isinstance(node.value, bool):
                sites.append((index, "const", f"line {line}: {node.value} -> {not node.value}"))
            elif isinstance(node.value, int):
                sites.append((index, "const", f"line {line}: {node.value} -> {node.value + 1}"))
            elif isinstance(node.value, str) and node.value and line:
                sites.append((index, "const", f"line {line}: string {node.value[:20]!r} -> ''"))
        elif isinstance(node, ast.AugAssign) and type(node.op) in AUG:
            sites.append((index, "aug", f"line {line}: {type(node.op).__name__}= -> {AUG[type(node.op)].__name__}="))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not isinstance(node.body[0], ast.Pass):
            sites.append((index, "return", f"line {line}: `return None` first in {node.name}()"))
        elif isinstance(node, ast.Slice):
            sites.append((index, "slice", f"line {line}: move a slice bound by one"))
    return sites


def _mutate(tree: ast.Module, index: int, kind: str) -> ast.Module:
    tree = copy.deepcopy(tree)
    node = list(ast.walk(tree))[index]
    if kind == "compare":
        node.ops[0] = FLIP[type(node.ops[0])]()
    elif kind == "boolop":
        node.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
    elif kind == "drop":
        node.values = node.values[:-1] if len(node.values) > 2 else node.values[:1] * 2
    elif kind == "negate":
        node.test = ast.UnaryOp(ast.Not(), node.test)
    elif kind == "const":
        value = node.value
        node.value = (not value) if isinstance(value, bool) else value + 1 if isinstance(value, int) else ""
    elif kind == "aug":
        node.op = AUG[type(node.op)]()
    elif kind == "return":
        start = 1 if isinstance(node.body[0], ast.Expr) and isinstance(getattr(node.body[0], "value", None), ast.Constant) else 0
        node.body.insert(start, ast.Return(ast.Constant(None)))
    elif kind == "slice":
        if node.lower is not None:
            node.lower = ast.BinOp(node.lower, ast.Add(), ast.Constant(1))
        elif node.upper is not None:
            node.upper = ast.BinOp(node.upper, ast.Add(), ast.Constant(1))
        else:
            node.lower = ast.Constant(1)
    return ast.fix_missing_locations(tree)


def run_tests(scratch: Path, tests: list[str], timeout: float, show: bool = False) -> str:
    env = {**os.environ, "PYTHONPATH": str(scratch), "PYTHONDONTWRITEBYTECODE": "1", "NO_COLOR": "1"}
    command = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:randomly", "-p", "no:cacheprovider", "-m", "not slow", *tests]
    try:
        proc = subprocess.run(command, cwd=scratch, env=env, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "timeout"
    if show and proc.returncode != 0:
        print(proc.stdout.decode(errors="replace")[-3000:], file=sys.stderr)
    return "pass" if proc.returncode == 0 else "fail"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("targets", nargs="*", help="MODULE:TEST[,TEST...] (default: writer, fixer, engine)")
    parser.add_argument("-n", type=int, default=20, help="mutations per module (default 20)")
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--timeout", type=float, default=300, help="seconds per test run (a hang counts as killed)")
    args = parser.parse_args()
    targets = dict(DEFAULT_TARGETS)
    if args.targets:
        targets = {t.split(":", 1)[0]: t.split(":", 1)[1].split(",") for t in args.targets}
    scratch = Path(tempfile.mkdtemp(prefix="gradfix-mutants-"))
    rows, survivors = [], []
    try:
        shutil.copytree(ROOT, scratch, dirs_exist_ok=True, ignore=shutil.ignore_patterns(".git", "__pycache__", "*.pyc"))
        for module, tests in targets.items():
            original = (ROOT / module).read_text(encoding="utf-8")
            if run_tests(scratch, tests, args.timeout, show=True) != "pass":
                print(f"{module}: its tests fail without any mutation; skipped", file=sys.stderr)
                continue
            tree = ast.parse(original)
            sites = _sites(tree)
            chosen = random.Random(f"{args.seed}:{module}").sample(sites, min(args.n, len(sites)))
            killed = 0
            started = time.monotonic()
            for index, kind, what in chosen:
                mutant = ast.unparse(_mutate(tree, index, kind))
                (scratch / module).write_text(mutant, encoding="utf-8")
                outcome = run_tests(scratch, tests, args.timeout)
                if outcome == "pass":
                    survivors.append(f"{module} {what}")
                else:
                    killed += 1
                print(f"  {module} {what}: {'survived' if outcome == 'pass' else 'killed (' + outcome + ')'}", file=sys.stderr)
            (scratch / module).write_text(original, encoding="utf-8")
            rows.append((module, killed, len(chosen), time.monotonic() - started))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print("| module | killed | total | score | time |")
    print("|---|---:|---:|---:|---:|")
    for module, killed, total, seconds in rows:
        print(f"| {module} | {killed} | {total} | {100 * killed / max(total, 1):.0f} % | {seconds:.0f} s |")
    if survivors:
        print("\nSurvivors:")
        for line in survivors:
            print(f"- {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
