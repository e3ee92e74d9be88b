"""Precision of gradfix's default rule set on repositories the project never tuned on.

Runs ``python -m gradfix check --format json`` (default rules) over every repository listed in
``REPOS.md`` that is checked out under the corpus folder, writes the findings (and the
``--diff --unsafe-fixes`` output, for reading the fixes) to an output folder outside the
repository, and compares the findings with the hand verdicts in ``verdicts.tsv``.

    python bench/precision/run.py                       # run gradfix, then compare
    python bench/precision/run.py --no-run              # compare the findings of the last run
    python bench/precision/run.py --markdown            # the per-rule table as Markdown

Findings and verdicts are matched exactly on (repo, path, line, col, code); a notebook
finding's line is ``CELL:LINE``. Unmatched findings (not judged yet) and verdicts whose finding is gone
are listed, never guessed. Each verdict also records the digest of the finding's rewrite as it
was judged (column ``rewrite``, see ``rewrite_digest``); a finding whose rewrite digest differs
now is listed as "rewrite changed", so that a changed fix is re-judged, not only a moved finding.

    python bench/precision/run.py --no-run --stamp      # after judging: record the digests

Samples: ``--sample 1`` holds rounds 1-3 (the table at the top of REPOS.md, ``verdicts.tsv``,
corpus ``/work/corpus``); ``--sample N`` for N = 2..15 holds round N + 2, one more sample the
project never tuned on (the table under REPOS.md's ``# Round N+2`` heading, ``verdictsN+2.tsv``);
``SAMPLES`` below names each one's corpus and output folder.

Exit status: 0, or 1 when some finding is not judged, some verdict is stale or some judged
rewrite changed.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import os
import re
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPOS_MD = HERE / "REPOS.md"
# sample -> (its verdicts file, default corpus, default output folder)
SAMPLES = {
    1: (HERE / "verdicts.tsv", Path("/work/corpus"), Path("/work/precision-out")),
    2: (HERE / "verdicts4.tsv", Path("/work/corpus2"), Path("/work/precision-out-r4")),
    3: (HERE / "verdicts5.tsv", Path("/work/corpus3"), Path("/work/precision-out-r5")),
    4: (HERE / "verdicts6.tsv", Path("/work/corpus4"), Path("/work/precision-out-r6")),
    5: (HERE / "verdicts7.tsv", Path("/work/corpus5"), Path("/work/precision-out-r7")),
    6: (HERE / "verdicts8.tsv", Path("/work/corpus6"), Path("/work/precision-out-r8")),
    7: (HERE / "verdicts9.tsv", Path("/work/corpus12"), Path("/work/precision-out-r9")),
    8: (HERE / "verdicts10.tsv", Path("/work/corpus13"), Path("/work/precision-out-r10")),
    9: (HERE / "verdicts11.tsv", Path("/work/corpus14"), Path("/work/precision-out-r11")),
    10: (HERE / "verdicts12.tsv", Path("/work/corpus15"), Path("/work/precision-out-r12")),
    11: (HERE / "verdicts13.tsv", Path("/work/corpus16"), Path("/work/precision-out-r13")),
    12: (HERE / "verdicts14.tsv", Path("/work/corpus18"), Path("/work/precision-out-r14")),
    13: (HERE / "verdicts15.tsv", Path("/work/corpus20"), Path("/work/precision-out-r15")),
    14: (HERE / "verdicts16.tsv", Path("/work/corpus21"), Path("/work/precision-out-r16")),
    15: (HERE / "verdicts17.tsv", Path("/work/corpus22"), Path("/work/precision-out-r17")),
}
# the REPOS.md heading below which a sample's rows start (sample 1's start at the top)
SAMPLE_HEADINGS = {"# Round 4": 2, "# Round 5": 3, "# Round 6": 4, "# Round 7": 5, "# Round 8": 6, "# Round 9": 7, "# Round 10": 8, "# Round 11": 9, "# Round 12": 10, "# Round 13": 11, "# Round 14": 12, "# Round 15": 13, "# Round 16": 14, "# Round 17": 15}
FIELDS = ("repo", "path", "line", "col", "code", "verdict", "fix", "rewrite", "note")
FIX_VERDICTS = ("fix-correct", "fix-awkward", "fix-wrong")
# a REPOS.md table row: | owner/name | commit | ...
ROW = re.compile(r"^\|\s*([\w.-]+/[\w.-]+)\s*\|\s*([0-9a-f]{7,40})\s*\|")
# a diff file header (`--- a/owner+name/path` or `... nb.ipynb:cell N`) and a hunk header
FILE_HEADER = re.compile(r"^--- a/[^/]+/(.+?)(?::cell (\d+))?$")
HUNK_HEADER = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+\d+(?:,\d+)? @@")


def listed_repos(sample: int = 1) -> list[tuple[str, str]]:
    """(owner/name, commit) for each row of the sample's table in REPOS.md."""
    rows = []
    current = 1
    for line in REPOS_MD.read_text(encoding="utf-8").splitlines():
        for heading, sample_number in SAMPLE_HEADINGS.items():
            if line.startswith(heading):
                current = sample_number
        m = ROW.match(line)
        if m and current == sample:
            rows.append((m.group(1), m.group(2)))
    return rows


def checkout_dir(corpus: Path, repo: str) -> Path:
    return corpus / repo.replace("/", "+")


def head_commit(path: Path) -> str:
    out = subprocess.run(
        ["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True, text=True, check=False
    )
    return out.stdout.strip()


def gradfix(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        # --no-cache: never leave a .gradfix_cache/ next to (or inside) the corpus checkouts
        [sys.executable, "-m", "gradfix", "check", "-j", "1", "--no-cache", *args],
        cwd=cwd, capture_output=True, text=True, check=False,
    )


def run_gradfix(corpus: Path, out: Path, repos: list[tuple[str, str]],
                keep: list[dict[str, str]] = ()) -> list[dict[str, str]]:
    """Run gradfix on each checkout; return one row per finding and save the diffs.

    ``keep``: findings of earlier runs (of repositories not run now) written out with the new ones.
    """
    rows: list[dict[str, str]] = list(keep)
    (out / "diffs").mkdir(parents=True, exist_ok=True)
    for repo, commit in repos:
        path = checkout_dir(corpus, repo)
        if not path.is_dir():
            print(f"warning: {repo} is not checked out at {path}; skipped", file=sys.stderr)
            continue
        head = head_commit(path)  # "" for files extracted from a snapshot (no .git of their own)
        if head and not head.startswith(commit):
            print(f"warning: {repo} is at {head[:12]}, REPOS.md says {commit}", file=sys.stderr)
        proc = gradfix(["--format", "json", path.name], corpus)
        internal = [e for e in proc.stderr.splitlines() if "internal error" in e]
        if internal:  # a file gradfix could not check would lose its findings silently
            raise SystemExit(f"gradfix failed on {len(internal)} files of {repo}:\n" + "\n".join(internal))
        errors = [e for e in proc.stderr.splitlines() if "syntax error" in e]
        if errors:
            print(f"note: {repo}: {len(errors)} files do not parse (left alone)", file=sys.stderr)
        if proc.returncode not in (0, 1, 2) or not proc.stdout.strip():
            raise SystemExit(f"gradfix exited {proc.returncode} on {repo}:\n{proc.stderr}")
        # files that do not parse come as entries without a code (older gradfix: on stderr only)
        entries = json.loads(proc.stdout or "[]")
        findings = [f for f in entries if f.get("code")]
        if len(findings) < len(entries) and not errors:
            print(f"note: {repo}: {len(entries) - len(findings)} files do not parse (left alone)",
                  file=sys.stderr)
        diff = gradfix(["--diff", "--unsafe-fixes", path.name], corpus)
        (out / "diffs" / f"{path.name}.diff").write_text(diff.stdout, encoding="utf-8")
        prefix = path.name + "/"
        for f in findings:
            line = f"{f['cell']}:{f['line']}" if "cell" in f else str(f["line"])
            fix = f.get("fix") or {}
            rows.append({
                "repo": repo,
                "path": f["path"][len(prefix):] if f["path"].startswith(prefix) else f["path"],
                "line": line,
                "col": str(f["column"]),
                "end_line": str(f.get("end_line", f["line"])),
                "code": f["code"],
                "fix": fix.get("safety") or "none",
                "message": f["message"],
            })
    with open(out / "findings.tsv", "w", encoding="utf-8", newline="") as fh:
        w = csv.DictWriter(fh, ("repo", "path", "line", "col", "end_line", "code", "fix", "message"),
                           delimiter="\t", lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    return rows


Hunk = tuple[int, int, str]  # first old line, last old line, the hunk's text without its header


def read_hunks(diff: str) -> dict[tuple[str, str | None], list[Hunk]]:
    """The hunks of one repository's ``--diff`` output, by (path, notebook cell or None)."""
    hunks: dict[tuple[str, str | None], list[Hunk]] = defaultdict(list)
    where = None
    body: list[str] = []

    def close() -> None:
        if where is not None and body:
            start, count = span
            hunks[where].append((start, start + max(count, 1) - 1, "\n".join(body)))

    span = (0, 0)
    for line in diff.splitlines():
        header = FILE_HEADER.match(line)
        if header:
            close()
            where, body = (header.group(1), header.group(2)), []
            continue
        hunk = HUNK_HEADER.match(line)
        if hunk:
            close()
            span, body = (int(hunk.group(1)), int(hunk.group(2) or 1)), []
        elif line.startswith(("+++ ", "--- ")) and not body:
            continue
        elif where is not None and line[:1] in (" ", "+", "-", "\\"):
            body.append(line)
    close()
    return hunks


def _digest(parts: list[str]) -> str:
    return hashlib.sha1("\n\n".join(parts).encode("utf-8")).hexdigest()[:10]


def rewrite_digest(finding: dict[str, str], hunks: dict[tuple[str, str | None], list[Hunk]]) -> str:
    """A short digest of the rewrite of one finding, read from its repository's diff.

    ``h:<sha>``: the hunks (in its file or notebook cell) whose old lines overlap the finding's
    lines; ``f:<sha>``: no hunk overlaps (a fix that lands elsewhere, e.g. a decorator or a `with`
    around a loop that starts below the finding), so the whole file's diff stands for it; ``none``:
    a fix is declared but the file's diff is empty; ``-``: no fix declared. Hunk headers (line
    numbers) are left out, so an edit above that only shifts the hunk changes no digest.
    """
    if finding["fix"] == "none":
        return "-"
    cell, _, line = finding["line"].rpartition(":")
    first = int(line)
    last = max(first, int(finding.get("end_line") or first))
    near = [h[2] for h in hunks.get((finding["path"], cell or None), []) if h[0] <= last and first <= h[1]]
    if near:
        return "h:" + _digest(near)
    whole = [h[2] for (path, _), hs in sorted(hunks.items(), key=lambda kv: (kv[0][0], int(kv[0][1] or 0)))
             if path == finding["path"] for h in hs]
    return "f:" + _digest(whole) if whole else "none"


def add_digests(findings: list[dict[str, str]], out: Path) -> None:
    """Set each finding's ``rewrite`` digest from the diffs saved under ``out``."""
    cache: dict[str, dict] = {}
    for f in findings:
        name = f["repo"].replace("/", "+")
        if name not in cache:
            diff = out / "diffs" / f"{name}.diff"
            cache[name] = read_hunks(diff.read_text(encoding="utf-8")) if diff.exists() else {}
        f["rewrite"] = rewrite_digest(f, cache[name])


def stamp(findings: list[dict[str, str]], verdicts: list[dict[str, str]], path: Path) -> None:
    """Record in the verdicts file the rewrite digest of each judged finding of this run."""
    current = {key(f): f["rewrite"] for f in findings}
    for v in verdicts:
        v["rewrite"] = current.get(key(v), v.get("rewrite") or "")
    with open(path, "w", encoding="utf-8", newline="") as fh:
        w = csv.DictWriter(fh, FIELDS, delimiter="\t", lineterminator="\n")
        w.writeheader()
        w.writerows({k: v.get(k, "") for k in FIELDS} for v in verdicts)


def read_tsv(path: Path) -> list[dict[str, str]]:
    if not path.exists():
        return []
    with open(path, encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh, delimiter="\t"))


def key(row: dict[str, str]) -> tuple[str, str, str, str, str]:
    return (row["repo"], row["path"], row["line"], row["col"], row["code"])


def compare(findings: list[dict[str, str]], verdicts: list[dict[str, str]], markdown: bool) -> int:
    by_key = {}
    for v in verdicts:
        if v["verdict"] not in ("true", "false"):
            raise SystemExit(f"verdicts.tsv: bad verdict {v['verdict']!r} in {v}")
        if v.get("fix") and v["fix"] not in (*FIX_VERDICTS, "-"):
            raise SystemExit(f"verdicts.tsv: bad fix verdict {v['fix']!r} in {v}")
        if key(v) in by_key:
            raise SystemExit(f"verdicts.tsv: duplicate verdict for {key(v)}")
        by_key[key(v)] = v
    stats: dict[str, Counter[str]] = defaultdict(Counter)
    unjudged = []
    changed = []
    seen = set()
    for f in findings:
        s = stats[f["code"]]
        s["findings"] += 1
        if f["fix"] != "none":
            s["fixable"] += 1
        v = by_key.get(key(f))
        if v is None:
            unjudged.append(f)
            continue
        seen.add(key(f))
        if (v.get("rewrite") or "") != f["rewrite"]:
            changed.append((f, v))
        s["judged"] += 1
        s[v["verdict"]] += 1
        if v.get("fix") in FIX_VERDICTS:
            s[v["fix"]] += 1
    stale = [v for k, v in by_key.items() if k not in seen]

    cols = ("findings", "judged", "true", "false", "fixable", "fix-correct", "fix-awkward",
            "fix-wrong")
    total: Counter[str] = Counter()
    lines = []
    for code in sorted(stats):
        s = stats[code]
        total.update(s)
        lines.append((code, s))
    lines.append(("all", total))

    def precision(s: Counter[str]) -> str:
        return f"{100 * s['true'] / s['judged']:.1f} %" if s["judged"] else "-"

    if markdown:
        print("| rule | " + " | ".join(cols) + " | precision |")
        print("|---" * (len(cols) + 2) + "|")
        for code, s in lines:
            name = f"**{code}**" if code == "all" else code
            print(f"| {name} | " + " | ".join(str(s[c]) for c in cols) + f" | {precision(s)} |")
    else:
        print(f"{'rule':6} " + " ".join(f"{c:>11}" for c in cols) + f" {'precision':>10}")
        for code, s in lines:
            print(f"{code:6} " + " ".join(f"{s[c]:>11}" for c in cols) + f" {precision(s):>10}")
    if unjudged:
        print(f"\n{len(unjudged)} findings not judged yet:")
        for f in unjudged:
            print(f"  {f['repo']}\t{f['path']}\t{f['line']}\t{f['col']}\t{f['code']}\t"
                  f"{f['message'][:100]}")
    if changed:
        print(f"\n{len(changed)} findings whose rewrite changed since they were judged "
              "(judged digest -> now):")
        for f, v in changed:
            print(f"  {f['repo']}\t{f['path']}\t{f['line']}\t{f['col']}\t{f['code']}\t"
                  f"{v.get('rewrite') or '?'} -> {f['rewrite']}\t{v['fix']}")
    if stale:
        print(f"\n{len(stale)} verdicts whose finding is gone:")
        for v in stale:
            print(f"  {v['repo']}\t{v['path']}\t{v['line']}\t{v['col']}\t{v['code']}\t"
                  f"{v['verdict']}")
    return 1 if unjudged or stale or changed else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--sample", type=int, choices=sorted(SAMPLES), default=1,
                    help="1: rounds 1-3 (verdicts.tsv); N = 2..15: round N + 2 (verdictsN+2.tsv)")
    ap.add_argument("--corpus", type=Path, default=None,
                    help="folder holding one checkout per repository, named owner+name "
                         "(default: $CORPUS, else the sample's corpus)")
    ap.add_argument("--out", type=Path, default=None,
                    help="where findings.tsv and the diffs go (keep it outside the repository)")
    ap.add_argument("--no-run", action="store_true", help="reuse OUT/findings.tsv")
    ap.add_argument("--repo", action="append", default=[], metavar="OWNER/NAME",
                    help="run only these repositories (repeatable); the last run's findings of "
                         "the others are kept")
    ap.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    ap.add_argument("--stamp", action="store_true",
                    help="after judging: record this run's rewrite digests in verdicts.tsv")
    args = ap.parse_args()
    verdicts_path, corpus, out = SAMPLES[args.sample]
    args.corpus = args.corpus or Path(os.environ.get("CORPUS", corpus))
    args.out = args.out or out
    repos = listed_repos(args.sample)
    if not repos:
        raise SystemExit(f"no repositories of sample {args.sample} listed in {REPOS_MD}")
    if args.no_run:
        findings = read_tsv(args.out / "findings.tsv")
    elif args.repo:
        unknown = sorted(set(args.repo) - {r for r, _ in repos})
        if unknown:
            raise SystemExit(f"not in sample {args.sample}: {', '.join(unknown)}")
        keep = [f for f in read_tsv(args.out / "findings.tsv") if f["repo"] not in args.repo]
        findings = run_gradfix(args.corpus.resolve(), args.out,
                               [r for r in repos if r[0] in args.repo], keep)
    else:
        if not any(checkout_dir(args.corpus, repo).is_dir() for repo, _ in repos):
            raise SystemExit(f"no repository of sample {args.sample} is checked out under {args.corpus}")
        findings = run_gradfix(args.corpus.resolve(), args.out, repos)
    add_digests(findings, args.out)
    verdicts = read_tsv(verdicts_path)
    if args.stamp:
        stamp(findings, verdicts, verdicts_path)
    return compare(findings, verdicts, args.markdown)


if __name__ == "__main__":
    sys.exit(main())
