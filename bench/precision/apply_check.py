"""Apply every fix (``--apply --unsafe-fixes``) to COPIES of the corpus and check the result.

    python bench/precision/apply_check.py --copy /work/precision-apply [--pyflakes /tmp/pf]

For each repository listed in REPOS.md and checked out under the corpus folder: copy it (without
``.git``) to ``COPY/owner+name`` (a fresh copy each time; the corpus is never written), run
``gradfix check --apply --unsafe-fixes`` there, then for every file the fixes changed:

- a ``.py`` file must compile; pyflakes (from the ``--pyflakes`` folder, e.g. installed with
  ``pip install --target``) must report no "undefined name" that the original did not;
- in a notebook every code cell whose text changed must parse once its IPython lines are masked
  (as gradfix masks them; a cell gradfix cannot read, e.g. a non-Python cell magic, is left out);
- a second ``--diff --unsafe-fixes`` run over the copy must change nothing.

Prints one line per repository and a summary; exit status 1 when any check fails.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import SAMPLES, checkout_dir, listed_repos  # noqa: E402

from gradfix.notebook import mask_cell, read_cells  # noqa: E402

UNDEFINED = re.compile(r"^[^:]+:\d+:\d+:? undefined name '([^']+)'")


def gradfix(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gradfix", "check", "-j", "1", "--no-cache", *args],
                          cwd=cwd, capture_output=True, text=True, check=False)


def undefined(path: Path, pyflakes: str) -> list[str]:
    env = dict(os.environ, PYTHONPATH=pyflakes)
    out = subprocess.run([sys.executable, "-m", "pyflakes", str(path)], capture_output=True,
                         text=True, check=False, env=env).stdout
    return sorted(m.group(1) for line in out.splitlines() if (m := UNDEFINED.match(line)))


def changed_files(orig: Path, copy: Path) -> list[Path]:
    out = []
    for dirpath, dirnames, filenames in os.walk(copy):
        for name in filenames:
            if name.endswith((".py", ".ipynb")):
                new = Path(dirpath) / name
                old = orig / new.relative_to(copy)
                if old.read_bytes() != new.read_bytes():
                    out.append(new.relative_to(copy))
    return sorted(out)


def cell_problems(old: Path, new: Path) -> tuple[int, list[str]]:
    before = {c.index: c.source for c in read_cells(old.read_text(encoding="utf-8"))}
    problems, changed = [], 0
    for cell in read_cells(new.read_text(encoding="utf-8")):
        if cell.cell_type != "code" or before.get(cell.index) == cell.source:
            continue
        changed += 1
        if isinstance(mask_cell(before.get(cell.index, ""), "check", cell.index), str):
            continue  # gradfix could not read the original cell either
        why = mask_cell(cell.source, "check", cell.index)
        if isinstance(why, str):
            problems.append(f"cell {cell.index + 1}: {why}")
    return changed, problems


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--sample", type=int, choices=sorted(SAMPLES), default=1,
                    help="1: rounds 1-3; 2: round 4 (see run.py)")
    ap.add_argument("--corpus", type=Path, default=None,
                    help="default: $CORPUS, else the sample's corpus")
    ap.add_argument("--copy", type=Path, required=True, help="where the copies go (not the corpus)")
    ap.add_argument("--pyflakes", default="/tmp/pf", help="PYTHONPATH holding pyflakes")
    args = ap.parse_args()
    probe = subprocess.run([sys.executable, "-c", "import pyflakes"], capture_output=True,
                           env=dict(os.environ, PYTHONPATH=args.pyflakes), check=False)
    if probe.returncode:  # else every "undefined names" count would read 0 -> 0, checked or not
        raise SystemExit(f"pyflakes cannot be imported from --pyflakes {args.pyflakes} "
                         f"(pip install --target {args.pyflakes} pyflakes)")
    args.corpus = args.corpus or Path(os.environ.get("CORPUS", SAMPLES[args.sample][1]))
    corpus, copies = args.corpus.resolve(), args.copy.resolve()
    if copies == corpus or corpus in copies.parents:
        raise SystemExit("--copy must not be inside the corpus")
    totals = dict(files=0, py=0, nb=0, cells=0, undef_before=0, undef_after=0)
    failures = []
    for repo, _ in listed_repos(args.sample):
        orig = checkout_dir(corpus, repo)
        if not orig.is_dir():
            continue
        copy = copies / orig.name
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(orig, copy, ignore=shutil.ignore_patterns(".git"), symlinks=True)
        gradfix(["--apply", "--unsafe-fixes", "."], copy)
        files = changed_files(orig, copy)
        undef_before = undef_after = cells = 0
        for rel in files:
            if rel.suffix == ".py":
                totals["py"] += 1
                try:
                    compile((copy / rel).read_bytes(), str(rel), "exec")
                except SyntaxError as exc:
                    failures.append(f"{repo} {rel}: does not compile: {exc}")
                    continue
                before, after = undefined(orig / rel, args.pyflakes), undefined(copy / rel, args.pyflakes)
                undef_before += len(before)
                undef_after += len(after)
                new = sorted(set(after) - set(before))
                if new:
                    failures.append(f"{repo} {rel}: new undefined names {new}")
            else:
                totals["nb"] += 1
                n, problems = cell_problems(orig / rel, copy / rel)
                cells += n
                failures += [f"{repo} {rel} {p}" for p in problems]
        again = gradfix(["--diff", "--unsafe-fixes", "."], copy).stdout
        if again.strip():
            failures.append(f"{repo}: a second run still changes files:\n{again[:2000]}")
        totals["files"] += len(files)
        totals["cells"] += cells
        totals["undef_before"] += undef_before
        totals["undef_after"] += undef_after
        print(f"{repo}: {len(files)} files changed, {cells} notebook cells, undefined names "
              f"{undef_before} -> {undef_after}, second run {'changes files' if again.strip() else 'clean'}",
              flush=True)
    print("\ntotal:", ", ".join(f"{k} {v}" for k, v in totals.items()))
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
