"""Write a fixed file atomically: temp file in the same folder, same mode bits, rename.

Before the rename the file is read again: if someone changed it since gradfix read it, the
new version is not written (their change wins, and the user is told).

Nothing is written through a link gradfix did not resolve when it read the file: the reader
records where the path led (its real path, device and inode) and the writer replaces only that
same inode at that same real path. A path that is itself a symbolic link (even one named on the
command line) is never written through; a file swapped for a link, or a folder swapped for a
link to elsewhere, mid-run is "changed on disk", not written. A file with several hard links
is replaced like any other (the rename gives this name a new inode, so the other names keep the
old content), and the user is told so.

A temp file is locked while it exists; one that a killed run left is removed by the next run
(only gradfix's own name pattern, only when unlocked), and git is told to ignore the pattern
meanwhile (the repository's info/exclude, never the user's .gitignore).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import signal
import stat
import tempfile
import threading
import time
from pathlib import Path

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None


TEMP_SUFFIX = ".gradfix.tmp"  # a temp file is ``.<name>.<random>.gradfix.tmp`` beside its file


class WriteError(Exception):
    pass


def _reason(exc: OSError) -> str:
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "permission denied"
    return exc.strerror or str(exc)


ReadAs = tuple  # (real path, st_dev, st_ino) of the file as read


def read_file(path: str | Path) -> tuple[bytes, ReadAs]:
    """The bytes of ``path`` and where they came from (what ``write_atomic`` will replace)."""
    with open(path, "rb") as handle:
        info = os.fstat(handle.fileno())
        data = handle.read()
    return data, (os.path.realpath(path), info.st_dev, info.st_ino)


def write_atomic(path: str | Path, new: bytes, expected_old: bytes, read_as: ReadAs | None = None) -> str | None:
    """Replace ``path``'s content with ``new`` if it still holds ``expected_old``.

    ``read_as`` (from :func:`read_file`) pins the file that was read: if the path now leads
    elsewhere, or to another inode, nothing is written. Returns a note for the user, or None.

    Ctrl-C (SIGINT) and SIGTERM are held back while one file is written and delivered right
    after: an interrupt can never leave a temp file behind or a file half-replaced.
    """
    with _signals_deferred():
        return _write_atomic(path, new, expected_old, read_as)


@contextlib.contextmanager
def _signals_deferred():
    if not hasattr(signal, "pthread_sigmask") or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _changed(path: str | Path) -> WriteError:
    return WriteError(f"cannot write {path}: it changed on disk while gradfix ran; not overwritten")


def _current(target: Path, path: str | Path, pinned: tuple[int, int] | None) -> tuple[os.stat_result, bytes]:
    """The target's stat and bytes; raises unless it is the regular file gradfix read (never a link)."""
    if os.path.islink(path):
        raise WriteError(f"cannot write {path}: it is a symbolic link; not written through it (run gradfix on {target})")
    fd = os.open(target, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or (pinned is not None and (info.st_dev, info.st_ino) != pinned):
            raise _changed(path)
        with os.fdopen(os.dup(fd), "rb") as handle:
            data = handle.read()
    finally:
        os.close(fd)
    return info, data


def _write_atomic(path: str | Path, new: bytes, expected_old: bytes, read_as: ReadAs | None) -> str | None:
    target = Path(os.path.realpath(path))
    pinned = None
    if read_as is not None:
        if str(target) != read_as[0]:  # the path (or a folder on it) now leads elsewhere
            raise _changed(path)
        pinned = (read_as[1], read_as[2])
    try:
        info, data = _current(target, path, pinned)
        if data != expected_old:
            raise _changed(path)
        hide_temps_from_git(target.parent)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=TEMP_SUFFIX, dir=target.parent)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # O_NOFOLLOW: the file became a link
            raise _changed(path) from None
        raise WriteError(f"cannot write {path}: {_reason(exc)}") from None
    try:
        with os.fdopen(fd, "wb") as handle:  # open (and locked) until the rename: see remove_stale_temp
            _lock(handle.fileno(), blocking=True)
            handle.write(new)
            handle.flush()
            os.fsync(handle.fileno())
            os.chmod(tmp, stat.S_IMODE(info.st_mode))
            try:
                os.chown(tmp, info.st_uid, info.st_gid)
            except OSError:
                pass  # not ours to give away; keep our ownership
            # An immutable or read-only file must not be silently replaced by the rename.
            if not os.access(target, os.W_OK) or _immutable(target):
                raise PermissionError(errno.EACCES, "permission denied")
            if str(target) != os.path.realpath(path) or _current(target, path, (info.st_dev, info.st_ino))[1] != expected_old:
                raise _changed(path)
            os.replace(tmp, target)
    except OSError as exc:
        _remove(tmp)
        if exc.errno == errno.ELOOP:
            raise _changed(path) from None
        raise WriteError(f"cannot write {path}: {_reason(exc)}") from None
    except BaseException:
        _remove(tmp)
        raise
    if info.st_nlink > 1:
        return (
            f"had {info.st_nlink} hard links: the fixed file replaced this name only, "
            f"the other {info.st_nlink - 1} keep the old content"
        )
    return None


def _immutable(path: Path) -> bool:
    flags = getattr(os.stat(path), "st_flags", 0)
    if flags:
        return bool(flags & (getattr(stat, "UF_IMMUTABLE", 0) | getattr(stat, "SF_IMMUTABLE", 0)))
    # Linux: the immutable attribute (chattr +i) blocks writes, so try opening for append.
    try:
        with open(path, "ab"):
            pass
    except OSError:
        return True
    return False


# -- temp files a dead run left behind ------------------------------------------------------
# While a temp file exists its writer holds an exclusive lock on it (flock), which the kernel
# drops when the process dies, however it dies. A later run removes a temp file only if it has
# gradfix's exact name pattern, is a regular file, and nobody holds its lock: it is then the
# litter of a dead run (never another tool's file, never a live run's temp file).
TEMP_NAME = re.compile(r"\A\.(?P<name>.+)\.[a-z0-9_]{8}\.gradfix\.tmp\Z")  # tempfile.mkstemp's names
STALE_AFTER = 2.0  # seconds: covers the moment between mkstemp and the writer taking its lock
GIT_EXCLUDE_LINE = ".*.gradfix.tmp"


def _lock(fd: int, blocking: bool) -> bool:
    if fcntl is None:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return False
        raise
    return True


def remove_stale_temp(path: str | Path) -> bool:
    """Remove ``path`` if it is a temp file of a gradfix run that died; True if removed."""
    if not TEMP_NAME.match(os.path.basename(path)):
        return False
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return False
    try:
        info = os.fstat(fd)
        # Without flock (Windows) only a temp file an hour old is taken for a dead run's.
        age_needed = STALE_AFTER if fcntl is not None else 3600.0
        if not stat.S_ISREG(info.st_mode) or time.time() - info.st_mtime < age_needed:
            return False
        if not _lock(fd, blocking=False):
            return False  # a live run is writing it
        os.unlink(path)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


_hidden: set[str] = set()


def hide_temps_from_git(folder: str | Path) -> None:
    """Make git ignore gradfix's temp files in the repository holding ``folder``.

    A temp file lives for milliseconds, but one a killed run leaves would show in ``git status``
    until the next run removes it. The temp file must stay beside its file (a rename is atomic
    only within one filesystem, and a tree may span mounts), so instead the repository's
    ``info/exclude`` (git's local, never committed ignore file) gets the line
    ``.*.gradfix.tmp`` once, if it is not there. The user's .gitignore is never touched.
    """
    git_dir = _git_dir(Path(folder))
    if git_dir is None or str(git_dir) in _hidden:
        return
    _hidden.add(str(git_dir))
    exclude = git_dir / "info" / "exclude"
    try:
        if os.path.islink(exclude) or os.path.islink(exclude.parent):
            return
        text = exclude.read_text(encoding="utf-8", errors="replace") if exclude.exists() else ""
        if GIT_EXCLUDE_LINE in text.splitlines():
            return
        exclude.parent.mkdir(exist_ok=True)
        with open(exclude, "a", encoding="utf-8") as handle:
            handle.write(("\n" if text and not text.endswith("\n") else "") + "# gradfix: temp files of a fix being written\n" + GIT_EXCLUDE_LINE + "\n")
    except OSError:
        pass  # not ours to insist on: the temp file is merely visible


def _git_dir(folder: Path) -> Path | None:
    """The git directory whose info/exclude applies to ``folder`` (the common one for worktrees)."""
    for candidate in [folder, *folder.parents]:
        dot_git = candidate / ".git"
        if dot_git.is_dir():
            return dot_git
        if dot_git.is_file():  # a worktree or submodule: "gitdir: <path>"
            try:
                line = dot_git.read_text(encoding="utf-8").strip()
            except OSError:
                return None
            if not line.startswith("gitdir:"):
                return None
            git_dir = (candidate / line[len("gitdir:"):].strip()).resolve()
            common = git_dir / "commondir"
            if common.is_file():
                try:
                    return (git_dir / common.read_text(encoding="utf-8").strip()).resolve()
                except OSError:
                    return git_dir
            return git_dir
    return None


def _remove(tmp: str) -> None:
    try:
        os.unlink(tmp)
    except OSError:
        pass
