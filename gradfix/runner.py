"""Run the engine over many files: in parallel for big trees, then write fixes atomically.

Workers only read and compute; the parent process does every write, one file at a time, so an
interrupt (Ctrl-C) leaves each file either old or new, never half-written.

Workers die with the parent, even after ``kill -9`` of it: on Linux each asks the kernel for
SIGKILL when its parent dies (``PR_SET_PDEATHSIG``), and everywhere a watchdog thread in each
worker exits it once its parent process is gone.
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import sys
import threading
import time
import traceback
from typing import Callable, Sequence

from gradfix.cache import Cache
from gradfix.model import FileResult, Job
from gradfix.writer import WriteError, read_file, write_atomic

PARALLEL_THRESHOLD = 16  # below this, process start-up costs more than it saves


def _read_reason(exc: OSError) -> str:
    return "permission denied" if isinstance(exc, PermissionError) else (exc.strerror or str(exc))


def process_job(job: Job, want_fixes: bool, want_edits: bool = False, source: bytes | None = None) -> FileResult:
    """One file's result. ``source``: its bytes, already read (report mode only: a fix needs
    to know which file it read, to replace just that one)."""
    from gradfix.engine import process_source  # a warm cached run imports no analysis at all

    read_as = None
    if source is None:
        if os.path.exists(job.path) and not os.path.isfile(job.path):  # a FIFO would block open() forever
            return FileResult(job.display, error=f"cannot read {job.display}: not a regular file", error_kind="io")
        try:
            source, read_as = read_file(job.path)
        except OSError as exc:
            return FileResult(job.display, error=f"cannot read {job.display}: {_read_reason(exc)}", error_kind="io")
    index = job.project
    if index is not None:
        index.reads = {}  # the other files this file's questions read (for the cache)
    try:
        with _collector_paused():
            result = process_source(source, job, want_fixes, want_edits)
        result.read_as = read_as
        result.project_reads = index.reads if index is not None else None
        return result
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
    finally:
        if index is not None:
            index.reads = None


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


def _process_star(args: tuple[Job, bool, bool]) -> FileResult:
    result = process_job(*args)
    if not result.findings and not result.changed:
        result.old_source = None  # nothing refers to it: don't ship the file back to the parent
    return result


PR_SET_PDEATHSIG = 1
WATCHDOG_INTERVAL = 0.5  # seconds between a worker's checks that its parent is alive


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # it exists, it just is not ours to signal
    return True


def _die_with_parent(main: int) -> None:
    """Pool initializer: this worker exits as soon as its parent is gone.

    The parent is the main gradfix process (fork) or the start method's server process, which
    itself ends with the main process; ``main`` covers a parent that died before we got here.
    """
    parent = os.getppid()
    if sys.platform.startswith("linux"):
        try:
            import ctypes  # in the worker only: a run without a pool never loads it

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass  # the watchdog below still covers it
    if os.getppid() != parent or not _alive(main):
        os._exit(1)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(WATCHDOG_INTERVAL)
        os._exit(1)

    threading.Thread(target=watch, name="gradfix-parent-watchdog", daemon=True).start()


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
    ``cache``: reuse and store report-mode results (see gradfix.cache). The cache is read and
    written here, in the calling process: a warm run starts no worker processes and imports
    no analysis. With a cache, each file is read once: the same bytes make its key, the
    project index and (in this process) its analysis; the index is built here when the jobs
    carry none, and given to the jobs that are analysed when a selected rule asks about
    other files (``engine.with_project_index``)."""
    if cache is None or want_fixes:
        return _compute(jobs, want_fixes, workers, progress, want_edits)
    reads = [_read_for_key(job) for job in jobs]
    index = next((job.project for job in jobs if job.project is not None), None)
    if index is None:
        from gradfix.analysis.project import ProjectIndex

        sources = {os.path.abspath(job.path): source for job, (source, _) in zip(jobs, reads) if source is not None}
        index = ProjectIndex.build([job.path for job in jobs], sources=sources)
    cache.index = index
    keys = [None if source is None else cache.key(source, job.display, job.settings, want_edits) for job, (source, _) in zip(jobs, reads)]
    results = [None if key is None else cache.get(key, job.display, source) for job, key, (source, _) in zip(jobs, keys, reads)]
    missing = [i for i, result in enumerate(results) if result is None]
    if missing:
        from gradfix.engine import with_project_index

        todo = with_project_index([jobs[i] for i in missing], index)
        fresh = _compute(todo, want_fixes, workers, progress, want_edits, [reads[i][0] if keys[i] else None for i in missing])
    else:
        fresh = []
    for i, result in zip(missing, fresh):
        key, (_, seen) = keys[i], reads[i]
        # Only a result of the bytes the key was made of (the file did not change meanwhile),
        # and never an internal error: the next run retries.
        if key is not None and result.error_kind in (None, "syntax") and _signature(jobs[i].path) == seen:
            cache.put(key, jobs[i].display, result)
        results[i] = result
    cache.save()
    fresh_ones = set(missing)
    return [r if i in fresh_ones else _tick(r, progress) for i, r in enumerate(results)]


def _signature(path: str) -> tuple[int, int, int] | None:
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return stat.st_ino, stat.st_size, stat.st_mtime_ns


def _read_for_key(job: Job) -> tuple[bytes | None, tuple | None]:
    """The file's bytes and its signature before they were read; (None, None) when it is not
    a readable regular file (process_job says what is wrong with it)."""
    try:
        if not os.path.isfile(job.path):
            return None, None
        seen = _signature(job.path)
        with open(job.path, "rb") as handle:
            return handle.read(), seen
    except OSError:
        return None, None


def _compute(jobs, want_fixes, workers, progress, want_edits, sources=None) -> list[FileResult]:
    """``sources``: each job's bytes already read (or None), for the jobs analysed here."""
    workers = workers or min(os.cpu_count() or 1, 8)
    if workers <= 1 or len(jobs) < PARALLEL_THRESHOLD:
        sources = sources or [None] * len(jobs)
        results = (process_job(job, want_fixes, want_edits, source) for job, source in zip(jobs, sources))
        return [_tick(r, progress) for r in results]
    from concurrent.futures import ProcessPoolExecutor  # only big runs pay for multiprocessing

    chunk = max(1, len(jobs) // (workers * 8))
    with ProcessPoolExecutor(max_workers=workers, initializer=_die_with_parent, initargs=(os.getpid(),)) as pool:
        results = pool.map(_process_star, [(job, want_fixes, want_edits) for job in jobs], chunksize=chunk)
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
            note = write_atomic(job.path, result.new_source, result.old_source, result.read_as)
            if note:
                result.notes.append(note)
        except WriteError as exc:
            errors.append(str(exc))
            result.error, result.error_kind = str(exc), "io"
            for outcome in result.findings:
                outcome.applied = False
            result.new_source = None
    return errors
