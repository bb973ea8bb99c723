"""What every arm of the side-by-side benchmarks shares: running an arm, checking its sink, reading times.

Times come from the tables themselves where they can: a sink's snapshot log says when each of its
snapshots became the current one, that is, when readers could see its rows. That holds for any
writer (a fenced icegroup commit publishes a staged snapshot; Spark appends directly), so every
arm is timed by the same clock.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from pyiceberg.catalog import Catalog
from pyiceberg.table import Table

from icegroup.iceberg.store.registry import load_state

REPO = Path(__file__).resolve().parents[2]
ICEGROUP = str(Path(sys.executable).with_name("icegroup"))


def consume_command(groups: str, group: str) -> list[str]:
    """``icegroup consume GROUP --until-caught-up``: what the docs tell a user to run, so what an arm times."""
    return [ICEGROUP, "--groups", groups, "consume", group, "--until-caught-up"]


def baseline_command(mode: str, source: str, sink: str, *options: str) -> list[str]:
    """A baseline's command line (``baselines.py``): ``batch`` is the plain job (A2), ``stream`` is B1."""
    return [sys.executable, "-m", "tests.benchmarks.baselines", mode, source, sink, *options]


KEY = "event_id"


# How long what an arm leaves running (its JVM stopping Spark) may take to exit before it is stopped:
# SIGTERM then, SIGKILL after STOP_GRACE_S more, and after as long again it is reported and left.
LEFTOVER_GRACE_S = 10.0
STOP_GRACE_S = 5.0


class ArmFailed(RuntimeError):
    """An arm that exited with an error; ``elapsed_s`` is its time to that exit, without the cleanup after it."""

    def __init__(self, message: str, elapsed_s: float) -> None:
        """The error's message, and the arm's seconds to its exit."""
        super().__init__(message)
        self.elapsed_s = elapsed_s


def run_timed(command: list[str], env: dict[str, str], log: Path) -> float:
    """Wall seconds of one arm's process, from its start to its exit; a failure names its log.

    The arm runs in a session of its own, and the call returns only once no process of that session
    runs, so the next arm starts on a quiet machine: a Spark driver that ran out of memory outlived
    its Python process, using both cores (35 s and more in a probe, until it was killed), and slowed
    the arm after it. An arm interrupted here (Ctrl-C, which no longer reaches its session) is
    stopped at once.
    """
    started = time.perf_counter()
    with log.open("w") as out:
        returncode, exited = run_in_session(command, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    elapsed = exited - started
    if returncode != 0:
        raise ArmFailed(f"{' '.join(command)} exited {returncode}; see {log}", elapsed)
    return elapsed


def run_in_session(command: list[str], **popen: Any) -> tuple[int, float]:
    """Run ``command`` in a session of its own: its exit code and ``time.perf_counter()`` at its exit.

    Returns once no process of the session runs (``end_session``); interrupted, it stops them at once.
    """
    process = subprocess.Popen(command, start_new_session=True, **popen)
    try:
        returncode = process.wait()
    except BaseException:
        end_session(process.pid, grace_s=0.0)
        raise
    exited = time.perf_counter()
    end_session(process.pid, LEFTOVER_GRACE_S)
    return returncode, exited


def end_session(session: int, grace_s: float) -> None:
    """Wait until no process of ``session`` runs: after ``grace_s``, SIGTERM what is left, then SIGKILL.

    A process that outlives even SIGKILL (stuck in the kernel) is reported on stderr and left, so a
    benchmark never waits for ever.
    """
    signals = iter(((grace_s, signal.SIGTERM), (grace_s + STOP_GRACE_S, signal.SIGKILL)))
    due = next(signals, None)
    started = time.monotonic()
    while left := running_in_session(session):
        waited = time.monotonic() - started
        if waited > grace_s + 2 * STOP_GRACE_S:
            print(f"processes {left} of an arm outlived SIGKILL; going on beside them", file=sys.stderr)
            return
        if due is not None and waited >= due[0]:
            for pid in left:
                with contextlib.suppress(ProcessLookupError):  # it exited since the look
                    os.kill(pid, due[1])
            due = next(signals, None)
        time.sleep(0.1)


def running_in_session(session: int) -> list[int]:
    """The processes of ``session`` that still run (a zombie, dead but not yet reaped, does not).

    A session, not a process group: PySpark's Python workers move to process groups of their own.
    """
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # it exited while we looked
            continue
        if fields[0] != "Z" and int(fields[3]) == session:
            found.append(int(entry.name))
    return found


def keys(table: Table, snapshot_id: int | None = None) -> np.ndarray:
    """The table's keys at a snapshot (default the current one), sorted."""
    scan = table.scan(selected_fields=(KEY,), snapshot_id=snapshot_id)
    return np.sort(scan.to_arrow().column(KEY).to_numpy())


def check_same_rows(catalog: Catalog, source: str, sink: str) -> int:
    """Raise unless the sink holds every source key exactly once and nothing else; returns the row count."""
    want, got = keys(catalog.load_table(source)), keys(catalog.load_table(sink))
    if len(want) != len(got) or not np.array_equal(want, got):
        missing = len(np.setdiff1d(want, got))
        raise RuntimeError(
            f"{sink} does not equal {source}: {len(got)} rows for {len(want)}, {missing} keys missing, "
            f"{len(got) - len(np.unique(got))} duplicated"
        )
    return len(want)


def visible_ms(table: Table) -> list[tuple[int, int]]:
    """(when it became current, snapshot id) for each entry of the table's snapshot log, oldest first."""
    table.refresh()
    return [(entry.timestamp_ms, entry.snapshot_id) for entry in table.metadata.snapshot_log]


def caught_up(catalog: Catalog, group: str) -> bool:
    """The group planned the source's head, and has nothing cut or in flight."""
    state = load_state(catalog, group).state
    if state is None or not state.leases_done or not state.is_idle():
        return False
    head = catalog.load_table(state.source).current_snapshot()
    return head is not None and state.planned_through == head.snapshot_id


def wait_for(predicate: Callable[[], bool], timeout_s: float, what: str, log: Path, poll_s: float = 0.5) -> None:
    """Poll until ``predicate()``; a timeout names what was awaited and the log to read."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(poll_s)
    raise TimeoutError(f"no {what} after {timeout_s:.0f}s; see {log}")


def provenance() -> dict[str, str]:
    """The checkout's commit and the time, for a result to say what it measured and when."""
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO, capture_output=True, text=True
    )
    commit = head.stdout.strip() or "unknown"
    return {
        "commit": f"{commit} with uncommitted changes" if dirty.stdout.strip() else commit,
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def record_beside_the_run_before(path: Path, result: dict[str, object]) -> None:
    """Write ``result`` to ``path`` with the run recorded there before it under ``run_before`` (one run back).

    This machine's speed moves from day to day by more than most gaps measured, so a reader needs the
    run before beside the latest to tell a change of the code from a change of the day.
    """
    if path.exists():
        before = json.loads(path.read_text())
        result = {**result, "run_before": {k: v for k, v in before.items() if k != "run_before"}}
    path.write_text(json.dumps(result, indent=2) + "\n")
