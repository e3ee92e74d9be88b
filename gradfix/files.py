"""Find the Python files to check: walk directories, skip what users never want linted.

Skipped while walking: ``.git`` and other VCS folders, virtual environments (any folder with a
``pyvenv.cfg``, and the usual names), ``build/``, ``__pycache__``, tool caches, what the
``.gitignore`` files of the tree ignore, the configured excludes, and symlinks (a link inside
the tree is never followed, so a write can never land outside the tree). A file named on the
command line is always checked; a folder named on the command line is walked even when it is a
symlink (the user named it; the writer pins each file's real path at read time). A folder that
cannot be read is reported through ``on_error`` and the walk goes on. A temp file that a killed
gradfix run left (``.<name>.<random>.gradfix.tmp``, unlocked) is removed on the way.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Iterator

from gradfix.writer import TEMP_NAME, remove_stale_temp

if TYPE_CHECKING:
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


_STAR = "[^/]*"  # what pathspec makes of a `*` inside a path segment
# A piece of regex that always matches exactly one character: a literal, an escape, `?`, a class.
_ONE_CHAR = re.compile(r"(?:\\.|\[\^/\]|\[(?:\\.|[^\]\\])+\]|[^\\()\[\]*+?{}|.^$])+\Z")


def _without_backtracking(regex: str) -> str:
    """The same language as ``regex``, matched in polynomial time.

    ``*a*a*a*b`` compiles to ``[^/]*a[^/]*a[^/]*a[^/]*b``, which Python's backtracking matcher
    takes exponential time to reject on ``aaaa…``. A fixed-length piece between two stars can
    always be matched at its earliest occurrence (whatever a later one leaves, the earliest
    leaves more), so each such piece becomes an atomic "lazy search" (the lookahead-and-
    backreference idiom, which never backtracks into the group). Only the last star keeps
    ordinary backtracking, which is linear.
    """
    pieces = regex.split(_STAR)
    if len(pieces) < 4:  # one or two stars: at most quadratic
        return regex
    out = [pieces[0]]
    for number, piece in enumerate(pieces[1:-1]):  # each piece here has a star on both sides
        if _ONE_CHAR.match(piece):
            out.append(f"(?=(?P<gfstar{number}>[^/]*?{piece}))(?P=gfstar{number})")
        else:
            out.append(_STAR + piece)
    out.append(_STAR + pieces[-1])
    return "".join(out)


@lru_cache(maxsize=1024)
def _path_spec(lines: tuple[str, ...]) -> pathspec.PathSpec:
    import pathspec  # ~30 ms of imports: only once a pattern is matched

    spec = pathspec.GitIgnoreSpec.from_lines(list(lines))
    for pattern in spec.patterns:
        if pattern.regex is not None:
            bounded = _without_backtracking(pattern.regex.pattern)
            if bounded != pattern.regex.pattern:
                pattern.regex = re.compile(bounded)
    return spec


def path_spec(lines: Iterable[str]) -> pathspec.PathSpec:
    """A gitignore-style matcher for ``lines`` (.gitignore, ``exclude``, per-file-ignores), compiled
    once and safe from exponential backtracking on pathological patterns like ``*a*a*a…*b``."""
    return _path_spec(tuple(lines))


class _Gitignore:
    """One ``.gitignore``'s verdict on paths below its folder: True (ignored), False (re-included
    by a ``!`` line) or None (no line matches). Most paths match no line: once a file has been
    asked about a few paths, one regex made of all its lines rules those out in one search,
    instead of pathspec trying each line's regex in turn (compiling it costs about as much as
    a few dozen such checks); pathspec decides the rest (which line wins, negations, folder
    lines)."""

    def __init__(self, spec: pathspec.PathSpec):
        self.spec = spec
        self.any_line: Callable[[str], object] | None = None
        self._asked = 0

    def verdict(self, path: str) -> bool | None:
        any_line = self.any_line
        if any_line is None and self._asked <= _COMBINE_AFTER:
            self._asked += 1
            if self._asked > _COMBINE_AFTER:
                any_line = self.any_line = _any_line(self.spec)
        if any_line is not None and any_line(path if path[:1] not in "/." else _normalized(path)) is None:
            return None
        return self.spec.check_file(path).include


def _normalized(path: str) -> str:
    """The path as pathspec matches it (no leading ``/`` or ``./``)."""
    import pathspec.util

    return pathspec.util.normalize_file(path)


_COMBINE_AFTER = 32  # paths asked about one .gitignore before its lines are combined


_NAMED_GROUP = re.compile(r"\(\?P<\w+>")


def _any_line(spec: pathspec.PathSpec) -> Callable[[str], object] | None:
    """A search that finds something in a path exactly when one of ``spec``'s lines' regexes
    would (their alternation, named groups made plain: pathspec reads them only from a match
    it made itself), or None where that cannot be built (a backreference, other flags)."""
    parts = []
    for pattern in spec.patterns:
        if pattern.include is None or pattern.regex is None:
            continue  # pathspec skips these lines too
        regex = pattern.regex
        if not isinstance(regex.pattern, str) or regex.flags != re.UNICODE or "(?P=" in regex.pattern:
            return None
        parts.append(_NAMED_GROUP.sub("(?:", regex.pattern))
    try:
        combined = re.compile("|".join(f"(?:{part})" for part in parts) or "(?!)")
    except re.error:
        return None
    # pathspec searches each line's regex; anchored at the start, a match is the same question.
    return combined.match if all(part.startswith("^") for part in parts) else combined.search


@lru_cache(maxsize=1024)
def _gitignore(lines: tuple[str, ...]) -> _Gitignore:
    return _Gitignore(_path_spec(lines))


def _gitignore_spec(directory: Path) -> _Gitignore | None:
    ignore_file = directory / ".gitignore"
    try:
        lines = ignore_file.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    return _gitignore(tuple(lines))


def _report(message: str) -> None:
    raise PathError(message)


def discover(
    paths: Iterable[str | Path],
    exclude: Iterable[str] = (),
    extensions: tuple[str, ...] = (".py",),
    on_error: Callable[[str], None] = _report,
) -> Iterator[Discovered]:
    """Yield files to check, in a stable order; raise PathError for a missing path.

    ``on_error(message)`` is told about each folder that cannot be read (by default it raises
    PathError); the walk then goes on with the rest.
    """
    exclude = tuple(exclude)
    seen: set[Path] = set()
    temps: dict[Path, list[str]] = {}  # folder -> gradfix temp names in it (one listing per folder)
    for raw in paths:
        path = Path(raw)
        if not os.path.lexists(path):
            raise PathError(f"{raw}: no such file or directory")
        if not os.path.exists(path):  # a dangling link or a symlink loop
            raise PathError(f"{raw}: broken symbolic link (or a symlink loop)")
        if path.is_dir():
            for found, key in _walk(path, _gitignore(exclude), extensions, on_error):
                if key not in seen:
                    seen.add(key)
                    yield Discovered(found, explicit=False)
        else:
            for name in _temp_names(path.parent, temps):
                if TEMP_NAME.match(name).group("name") == path.name:
                    remove_stale_temp(path.parent / name)
            key = path.resolve()
            if key not in seen:
                seen.add(key)
                yield Discovered(path, explicit=True)


def _temp_names(folder: Path, cache: dict[Path, list[str]]) -> list[str]:
    if folder not in cache:
        try:
            with os.scandir(folder) as entries:
                cache[folder] = [e.name for e in entries if TEMP_NAME.match(e.name)]
        except OSError:
            cache[folder] = []
    return cache[folder]


def _walk(
    root: Path, exclude_spec: _Gitignore, extensions: tuple[str, ...], on_error: Callable[[str], None]
) -> Iterator[tuple[Path, Path]]:
    """Each file found under ``root``, with its real path (the walk follows no link below
    ``root``, so that is the resolved root joined with the file's path below it)."""
    # Each folder's .gitignore applies to paths below it, up to the repository's root.
    absolute_root = root.resolve()
    # (spec, characters to cut from a path relative to root, what to put before the rest):
    # a path relative to a spec's folder, from the path relative to root, without pathlib
    # (this runs for every file and folder of the tree).
    specs: list[tuple[_Gitignore, int, str]] = []
    for parent in [absolute_root, *absolute_root.parents]:
        spec = _gitignore_spec(parent)
        if spec is not None:
            specs.insert(0, (parent, spec))
        if (parent / ".git").exists():
            break
    else:
        specs = [s for s in specs if s[0] == absolute_root]
    specs = [(spec, 0, _prefix(absolute_root.relative_to(base).as_posix())) for base, spec in specs]
    root_text = str(absolute_root)

    def ignored(rel: str) -> bool:
        """``rel``: the path relative to root, posix, with a trailing ``/`` for a folder."""
        if exclude_spec.verdict(rel):  # (False: a `!` line of the excludes; not excluded)
            return True
        for spec, cut, before in reversed(specs):  # as git: the deepest .gitignore with a matching line decides
            verdict = spec.verdict(before + rel[cut:])
            if verdict is not None:
                return verdict
        return False

    def visit(directory: Path, rel_dir: str) -> Iterator[tuple[Path, Path]]:
        """``rel_dir``: ``directory`` relative to root, posix, with a trailing ``/`` ("" for root)."""
        spec = _gitignore_spec(directory) if rel_dir else None
        if spec is not None:
            specs.append((spec, len(rel_dir), ""))
        try:
            with os.scandir(directory) as found:
                entries = sorted(found, key=lambda e: e.name)
        except OSError as exc:
            why = "permission denied" if isinstance(exc, PermissionError) else (exc.strerror or str(exc))
            on_error(f"cannot read folder {Path(directory).as_posix()}: {why}; its files were not checked")
            entries = []
        for entry in entries:
            if TEMP_NAME.match(entry.name):  # what a killed gradfix run left: removed if it is that
                remove_stale_temp(entry.path)
                continue
            rel = rel_dir + entry.name
            try:
                kind = "skip" if entry.is_symlink() else "dir" if entry.is_dir(follow_symlinks=False) else "file"
                if kind == "dir" and (
                    entry.name in SKIP_DIRS or os.path.lexists(os.path.join(entry.path, "pyvenv.cfg")) or ignored(rel + "/")
                ):
                    kind = "skip"  # (a pyvenv.cfg: a virtual environment; False, not an error, where we may not read)
                if kind == "file" and not (
                    entry.name.endswith(extensions) and entry.is_file(follow_symlinks=False) and not ignored(rel)
                ):
                    kind = "skip"
            except OSError as exc:  # the entry vanished or cannot be looked at
                on_error(f"cannot read {Path(entry.path).as_posix()}: {exc.strerror or exc}")
                continue
            if kind == "dir":
                yield from visit(Path(entry.path), rel + "/")
            elif kind == "file":
                yield Path(entry.path), Path(os.path.join(root_text, rel))
        if spec is not None:
            specs.pop()

    yield from visit(root, "")


def _prefix(rel: str) -> str:
    return "" if rel == "." else rel + "/"
