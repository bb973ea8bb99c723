"""The stack's process bookkeeping: which processes are its own, how they are stopped, when they are ready.

Every process the stack starts carries ``ICEGROUP_STACK_MEMBER`` in its environment, and so do its
children (executors, code servers, Borrower runs); that mark, read from ``/proc``, is what tells a
stack process from any other, even when the stack's record of its pids is lost or stale.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import time
import urllib.request
from collections.abc import Callable, Iterable
from pathlib import Path

MEMBER = "ICEGROUP_STACK_MEMBER"


def is_member(pid: int | None, folder: Path) -> bool:
    """Whether ``pid`` is a live process started by the stack in ``folder`` (its environment carries the mark).

    A pid recorded in ``stack.json`` is trusted only so: after a reboot the same number may belong
    to another program, which ``up`` must not take for a part and ``down`` must not signal.
    """
    if not alive(pid):
        return False
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False
    return f"{MEMBER}={folder}".encode() in environ.split(b"\0")


def alive(pid: int | None) -> bool:
    """Whether a process exists and is not a zombie."""
    if pid is None:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def port_open(port: int) -> bool:
    """Whether something accepts connections on 127.0.0.1:port."""
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def http_ok(url: str) -> bool:
    """Whether ``url`` answers 200."""
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return int(response.status) == 200
    except OSError:
        return False


def wait_for(what: str, ready: Callable[[], bool], timeout_s: float, log: str | None = None) -> None:
    """Poll until ``ready``; on timeout say what did not come up and where its log is."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if ready():
            return
        time.sleep(0.5)
    raise SystemExit(f"{what} did not become healthy in {timeout_s:.0f} s" + (f"; see {log}" if log else ""))


def members(folder: Path) -> list[int]:
    """Every process whose environment marks it as started by the stack in ``folder`` (children included)."""
    marker = f"{MEMBER}={folder}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if marker in environ.split(b"\0") and alive(int(entry.name)):
            found.append(int(entry.name))
    return found


def terminate(pids: Iterable[int], grace_s: float) -> None:
    """SIGTERM, then SIGKILL what is still there after ``grace_s``."""
    pids = list(pids)
    for pid in pids:
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(alive(pid) for pid in pids):
        time.sleep(0.2)
    for pid in pids:
        if alive(pid):
            _signal(pid, signal.SIGKILL)


def _signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)
