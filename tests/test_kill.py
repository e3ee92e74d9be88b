"""A real `kill -9` of a real gradfix process: no orphaned workers, no litter that lasts.

The main process is killed alone (not its process group), the way an OOM killer or a CI
runner's timeout does it; the run is in a session of its own so its processes can be found.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

BUGGY = "import torch\n\n\ndef f{i}(x):\n    with torch.no_grad:\n        y = x * 2\n    return y\n"


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc to find the workers")
def test_workers_die_with_the_main_process_after_kill_9(tmp_path):
    # Issue 13: after `kill -9` of the main process, pool workers stayed alive (one >= 90 s).
    for n in range(400):
        (tmp_path / f"m{n:03}.py").write_text("".join(BUGGY.format(i=i) for i in range(60)))
    proc = subprocess.Popen(
        [sys.executable, "-m", "gradfix", "--select", "GF101", "--jobs", "2", "."],
        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while len(_children(proc.pid)) < 2 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        workers = _children(proc.pid)
        assert len(workers) >= 2 and proc.poll() is None, "the pool never started"
        time.sleep(0.3)  # let them get busy
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 30  # a liveness bound, generous on a loaded machine
        while _group_alive(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _group_alive(proc.pid), f"orphaned workers still alive: {workers}"
    finally:
        if _group_alive(proc.pid):
            os.killpg(proc.pid, signal.SIGKILL)


WRITER_KILLED_MID_WRITE = """
import os, sys, time
import gradfix.writer as writer

def hang(src, dst):  # the temp file is written and locked: be killed right here
    print("ready", flush=True)
    time.sleep(600)

writer.os.replace = hang
old = open("a.py", "rb").read()
writer.write_atomic("a.py", old.replace(b"no_grad:", b"no_grad():"), old, writer.read_file("a.py")[1])
"""


@pytest.mark.skipif(sys.platform == "win32", reason="flock")
def test_a_temp_file_left_by_a_killed_run_is_invisible_to_git_and_removed_by_the_next_run(tmp_path):
    import fcntl

    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    source = BUGGY.format(i=0)
    (tmp_path / "a.py").write_text(source)
    (tmp_path / "b.py").write_text(source)
    proc = subprocess.Popen([sys.executable, "-c", WRITER_KILLED_MID_WRITE], cwd=tmp_path, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "ready\n"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    (litter,) = [p for p in tmp_path.iterdir() if p.name.endswith(".gradfix.tmp")]
    assert litter.name.startswith(".a.py.") and (tmp_path / "a.py").read_text() == source
    status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=tmp_path,
                            capture_output=True, text=True, check=True).stdout
    assert ".gradfix.tmp" not in status and "a.py" in status  # hidden from git; the rest is not
    assert ".*.gradfix.tmp" in (tmp_path / ".git" / "info" / "exclude").read_text().splitlines()
    assert not (tmp_path / ".gitignore").exists()  # the user's ignore files are not ours
    # Not gradfix's, or not dead: never removed.
    decoys = [".a.py.ABCDEFGH.gradfix.tmp", "a.py.abcdefgh.gradfix.tmp", ".a.py.abcdefgh.gradfix.tmp.bak", "notes.gradfix.tmp"]
    for name in decoys:
        (tmp_path / name).write_text("theirs")
    live = tmp_path / ".b.py.live1234.gradfix.tmp"
    live.write_text("being written")
    past = time.time() - 60
    for path in (litter, live):
        os.utime(path, (past, past))
    with open(live, "rb") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)  # a run that is alive holds its temp file's lock
        done = subprocess.run([sys.executable, "-m", "gradfix", "--select", "GF101", "."], cwd=tmp_path,
                              capture_output=True, text=True)
    assert done.returncode == 1, done.stderr
    assert not litter.exists()
    assert live.exists() and all((tmp_path / name).read_text() == "theirs" for name in decoys)
    # A file named on the command line gets its own litter cleaned too.
    (tmp_path / ".b.py.deadbeef.gradfix.tmp").write_text("x")
    os.utime(tmp_path / ".b.py.deadbeef.gradfix.tmp", (past, past))
    subprocess.run([sys.executable, "-m", "gradfix", "--select", "GF101", "--apply", "b.py"], cwd=tmp_path, check=True)
    assert not (tmp_path / ".b.py.deadbeef.gradfix.tmp").exists()
    assert (tmp_path / "b.py").read_text() == source.replace("no_grad:", "no_grad():")
