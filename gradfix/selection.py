"""Which of the discovered files a run checks: ``--shard K/N`` and ``--changed-since REF``.

Both only narrow the list of files; each file is still checked with its own settings, so a
shard's report is a complete report of its files, and shards' reports together are the report
of the whole tree.

- ``--shard K/N`` keeps the files whose shown path (relative to the current folder, with ``/``)
  hashes to K-1 modulo N: stable across runs and machines, whatever order files are found in,
  so a CI matrix of N jobs run from the same folder checks every file exactly once.
- ``--changed-since REF`` keeps the files ``git diff --name-only REF`` names (changed between
  REF and the working tree, staged or not) and the untracked files git does not ignore.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path
from typing import Sequence

from gradfix.model import Job


class SelectionError(Exception):
    """A bad --shard value, or git could not say what changed."""


def parse_shard(value: str) -> tuple[int, int]:
    try:
        k, n = (int(part) for part in value.split("/"))
    except ValueError:
        raise SelectionError(f"--shard {value!r}: expected K/N, e.g. 1/4") from None
    if not 1 <= k <= n:
        raise SelectionError(f"--shard {value!r}: K must be between 1 and N")
    return k, n


def shard_of(display: str, count: int) -> int:
    """The 1-based shard of a file shown as ``display``."""
    digest = hashlib.sha256(display.replace(os.sep, "/").encode("utf-8", "surrogateescape")).digest()
    return int.from_bytes(digest[:8], "big") % count + 1


def select_jobs(jobs: Sequence[Job], shard: str | None, changed_since: str | None) -> list[Job]:
    selected = list(jobs)
    if changed_since is not None:
        changed = _Changed(changed_since)
        selected = [j for j in selected if changed(Path(j.path))]
    if shard is not None:
        k, n = parse_shard(shard)
        selected = [j for j in selected if shard_of(j.display, n) == k]
    return selected


class _Changed:
    """Whether a file changed against ``ref``: one pair of git calls per repository."""

    def __init__(self, ref: str):
        if ref.startswith("-"):
            raise SelectionError(f"--changed-since {ref!r}: not a git revision")
        self.ref = ref
        self.roots: dict[Path, Path | None] = {}
        self.files: dict[Path, frozenset[Path]] = {}

    def __call__(self, path: Path) -> bool:
        path = path.resolve()
        root = self._repository_of(path.parent)
        if root is None:
            raise SelectionError(f"--changed-since: {path} is not in a git repository")
        if root not in self.files:
            self.files[root] = _changed_files(root, self.ref)
        return path in self.files[root]

    def _repository_of(self, folder: Path) -> Path | None:
        if folder not in self.roots:
            if (folder / ".git").exists():
                self.roots[folder] = folder
            else:
                self.roots[folder] = None if folder.parent == folder else self._repository_of(folder.parent)
        return self.roots[folder]


def _changed_files(root: Path, ref: str) -> frozenset[Path]:
    top = Path(_git(root, "rev-parse", "--show-toplevel").strip())
    # Both list paths relative to the top of the work tree (run from there).
    changed = _git(top, "diff", "--name-only", "--no-relative", "-z", ref, "--")
    untracked = _git(top, "ls-files", "--others", "--exclude-standard", "-z")
    return frozenset((top / name).resolve() for name in (changed + untracked).split("\0") if name)


def _git(root: Path, *args: str) -> str:
    try:
        done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, errors="surrogateescape")
    except OSError as exc:
        raise SelectionError(f"--changed-since needs git: {exc.strerror}") from None
    if done.returncode != 0:
        message = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"git {args[0]} failed"
        raise SelectionError(f"--changed-since: {message}")
    return done.stdout
