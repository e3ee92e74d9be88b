"""Find the Python files to check: walk directories, skip what users never want linted.

Skipped while walking: ``.git`` and other VCS folders, virtual environments (any folder with a
``pyvenv.cfg``, and the usual names), ``build/``, ``__pycache__``, tool caches, what the
``.gitignore`` files of the tree ignore, the configured excludes, and symlinks (a link is never
followed, so a write can never land outside the tree). A file named on the command line is
always checked.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

import pathspec

SKIP_DIRS = frozenset(
    {
        ".git", ".hg", ".svn", "__pycache__", "build", "dist", "site-packages", "node_modules",
        ".venv", "venv", ".tox", ".nox", ".eggs", ".mypy_cache", ".pytest_cache", ".ruff_cache",
        ".ipynb_checkpoints",
    }
)


@dataclass(frozen=True)
class Discovered:
    path: Path
    explicit: bool  # named on the command line


class PathError(Exception):
    pass


def _gitignore_spec(directory: Path) -> pathspec.PathSpec | None:
    ignore_file = directory / ".gitignore"
    try:
        lines = ignore_file.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    return pathspec.GitIgnoreSpec.from_lines(lines)


def discover(
    paths: Iterable[str | Path],
    exclude: Iterable[str] = (),
    extensions: tuple[str, ...] = (".py",),
) -> Iterator[Discovered]:
    """Yield files to check, in a stable order; raise PathError for a missing path."""
    exclude_spec = pathspec.GitIgnoreSpec.from_lines(list(exclude))
    seen: set[Path] = set()
    for raw in paths:
        path = Path(raw)
        if not os.path.lexists(path):
            raise PathError(f"{raw}: no such file or directory")
        if not os.path.exists(path):  # a dangling link or a symlink loop
            raise PathError(f"{raw}: broken symbolic link (or a symlink loop)")
        if path.is_dir() and not path.is_symlink():
            for found in _walk(path, exclude_spec, extensions):
                key = found.resolve()
                if key not in seen:
                    seen.add(key)
                    yield Discovered(found, explicit=False)
        else:
            key = path.resolve()
            if key not in seen:
                seen.add(key)
                yield Discovered(path, explicit=True)


def _walk(root: Path, exclude_spec: pathspec.PathSpec, extensions: tuple[str, ...]) -> Iterator[Path]:
    # Each folder's .gitignore applies to paths below it, up to the repository's root.
    absolute_root = root.resolve()
    specs: list[tuple[Path, pathspec.PathSpec]] = []
    for parent in [absolute_root, *absolute_root.parents]:
        spec = _gitignore_spec(parent)
        if spec is not None:
            specs.insert(0, (parent, spec))
        if (parent / ".git").exists():
            break
    else:
        specs = [s for s in specs if s[0] == absolute_root]

    def ignored(path: Path, is_dir: bool) -> bool:
        rel_root = path.relative_to(root).as_posix() + ("/" if is_dir else "")
        if exclude_spec.match_file(rel_root):
            return True
        absolute = absolute_root / path.relative_to(root)
        for base, spec in specs:
            try:
                rel = absolute.relative_to(base).as_posix()
            except ValueError:
                continue
            if spec.match_file(rel + ("/" if is_dir else "")):
                return True
        return False

    def visit(directory: Path) -> Iterator[Path]:
        spec = _gitignore_spec(directory) if directory != root else None
        if spec is not None:
            specs.append((absolute_root / directory.relative_to(root), spec))
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError:
            entries = []
        for entry in entries:
            path = Path(entry.path)
            if entry.is_symlink():
                continue
            if entry.is_dir():
                if entry.name in SKIP_DIRS or (path / "pyvenv.cfg").exists() or ignored(path, True):
                    continue
                yield from visit(path)
            elif entry.name.endswith(extensions) and entry.is_file() and not ignored(path, False):
                yield path
        if spec is not None:
            specs.pop()

    yield from visit(root)
