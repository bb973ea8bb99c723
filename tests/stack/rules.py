"""A helper module of a user's transform package: a UDF that calls it needs this module on the executors."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path


def cents(amount: float, pause_s: float = 0.0) -> int:
    """The amount in cents; ``pause_s`` slows each row, so a test can act while a task runs."""
    if pause_s:
        time.sleep(pause_s)
    return round(amount * 100)


def kill_own_worker_once() -> None:
    """Inside a task: if the test armed it, ``kill -9`` the Spark worker that runs this executor, once.

    The fault lands while the task runs, not at a moment a test guesses. The arm is a file in the
    stack's folder (the executors inherit ``ICEGROUP_STACK_MEMBER``); whoever removes it does the kill.
    """
    arm = Path(os.environ.get("ICEGROUP_STACK_MEMBER", "/nonexistent")) / "kill-worker-armed"
    try:
        arm.unlink()
    except FileNotFoundError:
        return
    pid = os.getpid()
    while pid > 1:
        status = Path(f"/proc/{pid}/status").read_text()
        pid = int(next(line.split()[1] for line in status.splitlines() if line.startswith("PPid:")))
        if b"deploy.worker.Worker" in Path(f"/proc/{pid}/cmdline").read_bytes():
            (arm.parent / "kill-worker-done").write_text(str(pid))
            os.kill(pid, signal.SIGKILL)
            return
