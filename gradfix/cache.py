"""A persistent cache of report-mode results, as Ruff's: an unchanged file is not analysed again.

An entry is keyed on everything the result depends on: the file's bytes, the path it is shown
as, the resolved settings, what was asked for (findings only, or each finding's own edit for
SARIF), gradfix's version and a fingerprint of its own code, and the *layout* of the run's
project index (which modules there are and where: ``ProjectIndex.layout_digest()``). The
other files a result read (a class defined elsewhere that a rule asked about) are stored
with the entry, each with the sha1 of its bytes: the entry is trusted only while every one of
them is unchanged, so an edit to a file invalidates exactly the results that read it.

Entries live in ``.gradfix_cache/`` at the project root (the nearest folder above the current
one holding ``pyproject.toml`` or ``.git``, else the current folder), or in
``$GRADFIX_CACHE_DIR``; the folder carries its own ``.gitignore`` (``*``) so git ignores it.
All entries of one gradfix build sit in one file, read once at the first look-up and written
once at the end of a run (creating a file per source file costs more than analysing it on
some file systems): the new file holds this run's entries and the old entries of files this
run did not check. It is written to a temporary file and renamed into place, so concurrent
runs never see half of it (the last one wins; the other's entries are merely missed next
time). The file is checked before use (a hash of its content) and each entry is decoded field
by field into plain values; a truncated, garbled or foreign file or entry is ignored and
rebuilt.

Only results that report (text, json, github, sarif) are cached: ``--diff``, ``--apply`` and
interactive review always analyse the file bytes they read. Cached findings carry no rule
payload (``Finding.data``), which only fixing needs.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict
from functools import lru_cache
from pathlib import Path
from typing import Any

from gradfix import __version__
from gradfix.model import FileResult, Finding, FixOutcome, FixSafety, Settings, Span, TextEdit

CACHE_DIR_ENV = "GRADFIX_CACHE_DIR"
CACHE_DIR_NAME = ".gradfix_cache"
FORMAT = 3  # bump when the entry layout changes


@lru_cache(maxsize=None)
def code_fingerprint() -> str:
    """gradfix's version and the size and mtime of each of its modules: a development checkout
    whose code changed under the same version number must not reuse old results."""
    package = Path(__file__).resolve().parent
    digest = hashlib.sha256(f"{__version__}/{FORMAT}".encode())
    for path in sorted(package.rglob("*.py")):
        stat = path.stat()
        digest.update(f"{path.relative_to(package)}:{stat.st_size}:{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def settings_digest(settings: Settings) -> str:
    return json.dumps(asdict(settings), sort_keys=True, default=str)


def cache_key(source: bytes, display: str, settings: Settings | str, want_edits: bool, project_digest: str = "") -> str:
    """The key of one file's report-mode result (see the module docstring for what goes in).

    ``settings`` may be given as its :func:`settings_digest`.
    """
    settings_part = settings if isinstance(settings, str) else settings_digest(settings)
    digest = hashlib.sha256()
    for part in (code_fingerprint(), project_digest, settings_part, display, "edits" if want_edits else "findings"):
        data = part.encode("utf-8", "surrogateescape")
        digest.update(len(data).to_bytes(8, "little") + data)
    digest.update(source)
    return digest.hexdigest()


def project_root(start: Path) -> Path:
    for folder in (start, *start.parents):
        if (folder / "pyproject.toml").is_file() or (folder / ".git").exists():
            return folder
    return start


def default_cache_dir() -> Path:
    configured = os.environ.get(CACHE_DIR_ENV)
    if configured:
        return Path(configured)
    return project_root(Path.cwd().resolve()) / CACHE_DIR_NAME


def cache_for_run(enabled: bool) -> Cache | None:
    """The cache a command-line run uses: None with ``--no-cache``. The runner gives it the
    run's project index (:attr:`Cache.index`) before the first look-up."""
    return Cache(default_cache_dir()) if enabled else None


class Cache:
    """Report-mode results on disk, for one run (the parent process reads and writes it).

    ``index``: the run's :class:`~gradfix.analysis.project.ProjectIndex`; its layout is part of
    every key and the files an entry read are checked against it. None: no other file.
    """

    def __init__(self, directory: Path, index=None):
        self.directory = Path(directory)
        self.index = index
        self._settings_memo: dict[int, tuple[Settings, str]] = {}
        self._stored: dict[str, dict] | None = None  # key -> {"path": display, "result": ..., "reads": ...}
        self._used: dict[str, dict] = {}  # entries hit or made in this run
        self._layout: tuple | None = None  # (index, its layout digest)

    @property
    def project_digest(self) -> str:
        return self.index.layout_digest() if self.index is not None else ""

    def key(self, source: bytes, display: str, settings: Settings, want_edits: bool) -> str:
        memo = self._settings_memo.get(id(settings))
        if memo is None or memo[0] is not settings:
            memo = self._settings_memo[id(settings)] = (settings, settings_digest(settings))
        if self._layout is None or self._layout[0] is not self.index:
            self._layout = (self.index, self.project_digest)  # once per run, not per file
        return cache_key(source, display, memo[1], want_edits, self._layout[1])

    @property
    def path(self) -> Path:
        name = hashlib.sha256(code_fingerprint().encode()).hexdigest()[:24]
        return self.directory / f"v{FORMAT}" / f"{name}.json"

    def _entries(self) -> dict[str, dict]:
        if self._stored is None:
            self._stored = {}
            try:
                raw = self.path.read_bytes()
                head, _, body = raw.partition(b"\n")
                if head.decode("ascii") == f"gradfix-cache {hashlib.sha256(body).hexdigest()}":
                    entries = json.loads(body)
                    if isinstance(entries, dict):
                        self._stored = entries
            except (OSError, ValueError, UnicodeDecodeError):
                pass
        return self._stored

    def get(self, key: str, display: str, source: bytes) -> FileResult | None:
        """The cached result, or None when there is none or it cannot be trusted (a file it
        read changed, or the entry is not well formed)."""
        entry = self._entries().get(key)
        try:
            if not isinstance(entry, dict) or entry.get("path") != display:
                return None
            reads = entry["reads"]
            if not isinstance(reads, dict):
                return None
            current = self.index.sha1_by_path if self.index is not None else {}
            if any(not isinstance(sha1, str) or current.get(path) != sha1 for path, sha1 in reads.items()):
                return None  # a file it read changed (or is gone): analyse again
            result = _decode(entry["result"], display, source)
        except (ValueError, TypeError, KeyError, AttributeError):
            return None
        result.project_reads = dict(reads)
        self._used[key] = entry
        return result

    def put(self, key: str, display: str, result: FileResult) -> None:
        try:
            reads = dict(result.project_reads or {})
            self._used[key] = {"path": display, "result": _encode(result), "reads": reads}
        except (TypeError, ValueError):
            pass

    def save(self) -> None:
        """Write this run's entries, and the stored ones of files it did not check; a cache
        that cannot be written is skipped without a word."""
        if not self._used:
            return
        checked = {e["path"] for e in self._used.values()}
        kept = {k: e for k, e in self._entries().items() if isinstance(e, dict) and e.get("path") not in checked}
        merged = {**kept, **self._used}
        if merged == self._stored:
            return  # a warm run: nothing new
        body = json.dumps(merged, separators=(",", ":")).encode()
        data = f"gradfix-cache {hashlib.sha256(body).hexdigest()}\n".encode() + body
        target = self.path
        temp = target.with_name(f".tmp-{os.getpid()}-{target.name}")
        try:
            self._prepare(target.parent)
            with open(temp, "wb") as out:
                out.write(data)
            os.replace(temp, target)
        except OSError:
            with _quiet():
                os.unlink(temp)

    def _prepare(self, folder: Path) -> None:
        if folder.is_dir():
            return
        folder.mkdir(parents=True, exist_ok=True)
        with _quiet():
            (self.directory / ".gitignore").write_text("# Created by gradfix: the cache is not part of the project.\n*\n")
            (self.directory / "CACHEDIR.TAG").write_text(
                "Signature: 8a477f597d28d172789f06886806bc55\n# This is gradfix's cache (https://bford.info/cachedir/).\n"
            )


class _quiet:
    def __enter__(self):
        return self

    def __exit__(self, kind, value, tb):
        return kind is not None and issubclass(kind, OSError)


def _encode(result: FileResult) -> dict[str, Any]:
    findings = []
    for outcome in result.findings:
        f = outcome.finding
        findings.append(
            {
                "code": f.code,
                "name": f.name,
                "message": f.message,
                "span": [f.span.line, f.span.col, f.span.end_line, f.span.end_col],
                "fix": None if f.fix is None else f.fix.value,
                "anchors": list(f.anchors),
                "cell": f.cell,
                "fix_title": f.fix_title,
                "no_fix": f.no_fix,
                "edit": None if outcome.edit is None else [[e.start, e.end, e.new] for e in outcome.edit],
            }
        )
    return {"findings": findings, "error": result.error, "error_kind": result.error_kind, "notes": list(result.notes)}


def _str(value) -> str:
    if not isinstance(value, str):
        raise TypeError("expected a string")
    return value


def _int(value) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError("expected an integer")
    return value


def _optional(convert, value):
    return None if value is None else convert(value)


def _decode(data: dict, display: str, source: bytes) -> FileResult:
    outcomes = []
    for item in data["findings"]:
        line, col, end_line, end_col = (_int(v) for v in item["span"])
        finding = Finding(
            _str(item["code"]),
            _str(item["name"]),
            _str(item["message"]),
            Span(line, col, end_line, end_col),
            _optional(FixSafety, item["fix"]),
            tuple(_int(a) for a in item["anchors"]),
            None,
            _optional(_int, item["cell"]),
            _optional(_str, item["fix_title"]),
            _optional(_str, item["no_fix"]),
        )
        edit = item["edit"]
        if edit is not None:
            edit = tuple(TextEdit(_int(s), _int(e), _str(t)) for s, e, t in edit)
        outcomes.append(FixOutcome(finding, edit=edit))
    notes = [_str(n) for n in data["notes"]]
    return FileResult(
        display,
        findings=outcomes,
        old_source=source,
        error=_optional(_str, data["error"]),
        error_kind=_optional(_str, data["error_kind"]),
        notes=notes,
    )
