"""Mutation testing with a small mutator over the stdlib ``ast`` (not part of CI).

For each module, N mutations are drawn (with a fixed seed) from: a flipped comparison
(``==``/``!=``, ``<``/``>=``, ``in``/``not in``, ``is``/``is not``), ``and``/``or`` swapped, a
condition negated (``if``/``while``/ternary/``assert``), one operand of an ``and``/``or`` dropped,
a constant changed (numbers +1, ``True``/``False`` swapped, a non-empty string emptied), a
slice bound moved by one, an augmented assignment's operator changed, and an early
``return None`` at the top of a function. Each mutant is written into a scratch copy of the
repository and the module's matching tests run there (``-x``, not slow, fixed order); a mutant
is killed when they fail (or run past the timeout). Prints a per-module killed/total table and
the surviving mutants (numbered: ``--pick`` reruns only some of them).

A target is one of:

- ``MODULE:TEST[,TEST...]``: the module and the test files/node ids to run for it;
- ``MODULE`` alone, for the modules with default tests (writer, fixer, engine);
- a rule code (``GF203``, case-insensitive): the rule's module in gradfix/rules/ and the tests
  that exercise it: its ``tests/facts/test_gfNNN_facts.py`` whole, and ``tests/rules``,
  ``tests/test_golden.py``, ``tests/test_article.py`` narrowed with ``-k "GFNNN or test_article"``
  (its examples, snapshot, golden files, deferral tests and every article case), a few seconds a run;
- ``rules``: every rule code.

Before the mutants, the module's tests run once on ``ast.unparse`` of the unmutated module (a
mutant is written the same way, comments and layout dropped), so that a kill is never caused by
the rewrite itself. A run taking longer than ``--timeout`` (default: 10x that baseline + 10 s)
counts as killed (a hang).

    python scripts/mutate.py                      # writer, fixer, engine; 20 mutations each
    python scripts/mutate.py -n 40 gradfix/notebook.py:tests/test_notebooks.py
    python scripts/mutate.py -n 40 GF203 GF204    # two rules
    python scripts/mutate.py -n 40 GF203 --pick 7,12   # rerun mutants 7 and 12 of that draw
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
        "tests/test_engine_units.py",
        "tests/test_pipeline.py", "tests/test_no_code_lost.py", "tests/test_fixer.py", "tests/test_notebooks.py",
        "tests/test_cli.py", "tests/rules/test_rule_examples.py",
    ],
}

RULE_TESTS = ["tests/rules", "tests/test_golden.py", "tests/test_article.py"]


@dataclass
class Target:
    module: str
    tests: list[str]
    keyword: str | None = None  # a pytest -k expression, or None for every test of the files


def _rule_target(code: str) -> Target:
    code = code.upper()
    modules = sorted((ROOT / "gradfix" / "rules").glob(f"{code.lower()}_*.py"))
    if len(modules) != 1:
        raise SystemExit(f"{code}: no single rule module gradfix/rules/{code.lower()}_*.py")
    tests = [f"tests/facts/test_{code.lower()}_facts.py"] if (ROOT / "tests/facts" / f"test_{code.lower()}_facts.py").exists() else []
    return Target(str(modules[0].relative_to(ROOT)), tests + RULE_TESTS, f"{code} or test_article")


def parse_targets(specs: list[str]) -> list[Target]:
    if not specs:
        return [Target(module, tests) for module, tests in DEFAULT_TARGETS.items()]
    targets = []
    for spec in specs:
        if spec.lower() == "rules":
            codes = sorted(p.name.split("_", 1)[0].upper() for p in (ROOT / "gradfix" / "rules").glob("gf[0-9]*_*.py"))
            targets += [_rule_target(code) for code in codes]
        elif ":" in spec:
            module, tests = spec.split(":", 1)
            targets.append(Target(module, tests.split(",")))
        elif spec in DEFAULT_TARGETS:
            targets.append(Target(spec, DEFAULT_TARGETS[spec]))
        elif spec.upper().startswith("GF") and spec[2:].isdigit():
            targets.append(_rule_target(spec))
        else:
            raise SystemExit(f"{spec}: not MODULE:TESTS, a module with default tests ({', '.join(DEFAULT_TARGETS)}), a rule code or 'rules'")
    return targets


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


def _mutate(tree: ast.Module, index: int, kind: str) -> tuple[ast.Module, ast.AST]:
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
    return ast.fix_missing_locations(tree), node


def _shown(node: ast.AST, kind: str) -> str:
    """The mutated code, for the report (one line, shortened)."""
    if kind == "return":
        return ""
    shown = node.test if kind == "negate" else node
    text = " ".join(ast.unparse(shown).split())
    return f" -> `{text[:90]}{'...' if len(text) > 90 else ''}`"


def run_tests(scratch: Path, target: Target, timeout: float | None, show: bool = False) -> str:
    env = {**os.environ, "PYTHONPATH": str(scratch), "PYTHONDONTWRITEBYTECODE": "1", "NO_COLOR": "1"}
    command = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:randomly", "-p", "no:cacheprovider", "-m", "not slow", *target.tests]
    if target.keyword:
        command += ["-k", target.keyword]
    try:
        proc = subprocess.run(command, cwd=scratch, env=env, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "timeout"
    if show and proc.returncode != 0:
        print(proc.stdout.decode(errors="replace")[-3000:], file=sys.stderr)
    return "pass" if proc.returncode == 0 else "fail"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("targets", nargs="*", help="MODULE:TEST[,TEST...], MODULE, GFNNN or 'rules' (default: writer, fixer, engine)")
    parser.add_argument("-n", type=int, default=20, help="mutations per module (default 20)")
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--timeout", type=float, default=None, help="seconds per test run (a hang counts as killed; default 10x the unmutated run + 10 s)")
    parser.add_argument("--pick", default="", help="comma-separated mutant numbers of the draw to run (the others are skipped)")
    args = parser.parse_args()
    targets = parse_targets(args.targets)
    picked = {int(n) for n in args.pick.split(",") if n.strip()}
    scratch = Path(tempfile.mkdtemp(prefix="gradfix-mutants-"))
    rows, survivors = [], []
    try:
        shutil.copytree(ROOT, scratch, dirs_exist_ok=True, ignore=shutil.ignore_patterns(".git", "__pycache__", "*.pyc"))
        for target in targets:
            module = target.module
            original = (ROOT / module).read_text(encoding="utf-8")
            tree = ast.parse(original)
            (scratch / module).write_text(ast.unparse(tree), encoding="utf-8")
            started = time.monotonic()
            baseline = run_tests(scratch, target, args.timeout, show=True)
            timeout = args.timeout or 10 * (time.monotonic() - started) + 10
            (scratch / module).write_text(original, encoding="utf-8")
            if baseline != "pass":
                why = "without any mutation" if run_tests(scratch, target, None) != "pass" else "on ast.unparse of the unmutated module"
                print(f"{module}: its tests fail {why}; skipped", file=sys.stderr)
                continue
            sites = _sites(tree)
            chosen = random.Random(f"{args.seed}:{module}").sample(sites, min(args.n, len(sites)))
            killed = ran = 0
            started = time.monotonic()
            for number, (index, kind, what) in enumerate(chosen, 1):
                if picked and number not in picked:
                    continue
                mutant, node = _mutate(tree, index, kind)
                what = f"#{number} {what}{_shown(node, kind)}"
                (scratch / module).write_text(ast.unparse(mutant), encoding="utf-8")
                outcome = run_tests(scratch, target, timeout)
                ran += 1
                if outcome == "pass":
                    survivors.append(f"{module} {what}")
                else:
                    killed += 1
                print(f"  {module} {what}: {'survived' if outcome == 'pass' else 'killed (' + outcome + ')'}", file=sys.stderr, flush=True)
            (scratch / module).write_text(original, encoding="utf-8")
            rows.append((module, killed, ran, time.monotonic() - started))
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
