"""Run the engine over many files: in parallel for big trees, then write fixes atomically.

Workers only read and compute; the parent process does every write, one file at a time, so an
interrupt (Ctrl-C) leaves each file either old or new, never half-written.
"""

from __future__ import annotations

import contextlib
import gc
import os
import traceback
from typing import Callable, Sequence

from gradfix.cache import Cache
from gradfix.engine import Job, process_source
from gradfix.model import FileResult
from gradfix.writer import WriteError, write_atomic

PARALLEL_THRESHOLD = 16  # below this, process start-up costs more than it saves


def _read_reason(exc: OSError) -> str:
    return "permission denied" if isinstance(exc, PermissionError) else (exc.strerror or str(exc))


def process_job(job: Job, want_fixes: bool, want_edits: bool = False, cache: Cache | None = None) -> FileResult:
    """One file's result. With a ``cache``, a report (not ``want_fixes``) of unchanged bytes
    under unchanged settings is read back instead of computed."""
    if os.path.exists(job.path) and not os.path.isfile(job.path):  # a FIFO would block open() forever
        return FileResult(job.display, error=f"cannot read {job.display}: not a regular file", error_kind="io")
    try:
        with open(job.path, "rb") as handle:
            source = handle.read()
    except OSError as exc:
        return FileResult(job.display, error=f"cannot read {job.display}: {_read_reason(exc)}", error_kind="io")
    if cache is None or want_fixes:
        return _analysed(source, job, want_fixes, want_edits)
    key = cache.key(source, job.display, job.settings, want_edits)
    result = cache.get(key, job.display, source)
    if result is None:
        result = _analysed(source, job, want_fixes, want_edits)
        if result.error_kind in (None, "syntax"):  # never an internal error: the next run retries
            cache.put(key, result)
    return result


def _analysed(source: bytes, job: Job, want_fixes: bool, want_edits: bool) -> FileResult:
    try:
        with _collector_paused():
            return process_source(source, job, want_fixes, want_edits)
    except RecursionError:
        result = FileResult(job.display, old_source=source)
        result.error, result.error_kind = "1:1: file is nested too deeply to analyse", "syntax"
        return result
    except Exception as exc:  # a bug in gradfix must not stop the run or hide the file
        result = FileResult(job.display, old_source=source)
        result.error, result.error_kind = f"internal error: {type(exc).__name__}: {exc}", "internal"
        if os.environ.get("GRADFIX_DEBUG"):
            result.notes.append(traceback.format_exc())
        return result


@contextlib.contextmanager
def _collector_paused():
    """Pause the cyclic garbage collector while one file is analysed.

    Parsing and the facts walk allocate hundreds of thousands of acyclic objects, which
    reference counting frees; the collector's generation sweeps over them cost about as much
    as the parse itself. At most one collection then runs per file.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _process_star(args: tuple[Job, bool, bool, Cache | None]) -> FileResult:
    result = process_job(*args)
    if not result.findings and not result.changed:
        result.old_source = None  # nothing refers to it: don't ship the file back to the parent
    return result


def run_jobs(
    jobs: Sequence[Job],
    want_fixes: bool,
    workers: int | None = None,
    progress: Callable[[FileResult], None] | None = None,
    want_edits: bool = False,
    cache: Cache | None = None,
) -> list[FileResult]:
    """Results in the order of ``jobs``; ``progress`` is called once per finished file.

    ``want_edits``: record each finding's own edit (for SARIF fixes and interactive review).
    ``cache``: reuse and store report-mode results (see gradfix.cache). Hits are read here, so
    a warm run starts no worker processes."""
    if cache is None or want_fixes:
        return _compute(jobs, want_fixes, workers, progress, want_edits, cache)
    results = [_cached(job, want_edits, cache) for job in jobs]
    missing = [job for job, result in zip(jobs, results) if result is None]
    fresh = iter(_compute(missing, want_fixes, workers, progress, want_edits, cache))
    return [next(fresh) if result is None else _tick(result, progress) for result in results]


def _cached(job: Job, want_edits: bool, cache: Cache) -> FileResult | None:
    try:
        if not os.path.isfile(job.path):
            return None  # process_job says what is wrong with it
        with open(job.path, "rb") as handle:
            source = handle.read()
    except OSError:
        return None
    return cache.get(cache.key(source, job.display, job.settings, want_edits), job.display, source)


def _compute(jobs, want_fixes, workers, progress, want_edits, cache) -> list[FileResult]:
    workers = workers or min(os.cpu_count() or 1, 8)
    if workers <= 1 or len(jobs) < PARALLEL_THRESHOLD:
        results = (process_job(job, want_fixes, want_edits, cache) for job in jobs)
        return [_tick(r, progress) for r in results]
    from concurrent.futures import ProcessPoolExecutor  # only big runs pay for multiprocessing

    chunk = max(1, len(jobs) // (workers * 8))
    with ProcessPoolExecutor(max_workers=workers) as pool:
        results = pool.map(_process_star, [(job, want_fixes, want_edits, cache) for job in jobs], chunksize=chunk)
        return [_tick(r, progress) for r in results]


def _tick(result: FileResult, progress: Callable[[FileResult], None] | None) -> FileResult:
    if progress is not None:
        progress(result)
    return result


def write_results(results: Sequence[FileResult], jobs: Sequence[Job]) -> list[str]:
    """Write every changed file; returns error messages. Unwritten fixes count as not applied."""
    errors = []
    for result, job in zip(results, jobs):
        if not result.changed:
            continue
        try:
            write_atomic(job.path, result.new_source, result.old_source)
        except WriteError as exc:
            errors.append(str(exc))
            result.error, result.error_kind = str(exc), "io"
            for outcome in result.findings:
                outcome.applied = False
            result.new_source = None
    return errors
