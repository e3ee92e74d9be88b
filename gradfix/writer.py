"""Write a fixed file atomically: temp file in the same folder, same mode bits, rename.

Before the rename the file is read again: if someone changed it since gradfix read it, the
new version is not written (their change wins, and the user is told).
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import stat
import tempfile
import threading
from pathlib import Path


class WriteError(Exception):
    pass


def _reason(exc: OSError) -> str:
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "permission denied"
    return exc.strerror or str(exc)


def write_atomic(path: str | Path, new: bytes, expected_old: bytes) -> None:
    """Replace ``path``'s content with ``new`` if it still holds ``expected_old``.

    Ctrl-C (SIGINT) and SIGTERM are held back while one file is written and delivered right
    after: an interrupt can never leave a temp file behind or a file half-replaced.
    """
    with _signals_deferred():
        _write_atomic(path, new, expected_old)


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


def _write_atomic(path: str | Path, new: bytes, expected_old: bytes) -> None:
    target = Path(os.path.realpath(path))
    try:
        info = target.stat()
        if target.read_bytes() != expected_old:
            raise WriteError(f"cannot write {path}: it changed on disk while gradfix ran; not overwritten")
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".gradfix.tmp", dir=target.parent)
    except OSError as exc:
        raise WriteError(f"cannot write {path}: {_reason(exc)}") from None
    try:
        with os.fdopen(fd, "wb") as handle:
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
        if target.read_bytes() != expected_old:
            raise WriteError(f"cannot write {path}: it changed on disk while gradfix ran; not overwritten")
        os.replace(tmp, target)
    except OSError as exc:
        _remove(tmp)
        raise WriteError(f"cannot write {path}: {_reason(exc)}") from None
    except BaseException:
        _remove(tmp)
        raise


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


def _remove(tmp: str) -> None:
    try:
        os.unlink(tmp)
    except OSError:
        pass
