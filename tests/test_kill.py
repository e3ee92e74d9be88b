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
