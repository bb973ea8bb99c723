"""Running a job as a run of the Dagster instance, for the ``icegroup`` commands that make runs.

Importing Dagster takes about a second, so only the commands that make runs (``consume`` with work
to do, ``replay --execute``, ``reset --execute``) import this module.
"""

from __future__ import annotations

import fcntl
import sys
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import dagster as dg

from icegroup.iceberg.errors import IcegroupError, Interrupted, RunFailed


@contextmanager
def open_instance(home: Path) -> Iterator[dg.DagsterInstance]:
    """The Dagster instance in ``home``; opening it is serialized across processes by a file lock.

    Opening a SQLite-backed instance creates and migrates its databases the first time. Consumers
    started at the same moment on a fresh home would race through that (tables that already exist,
    two alembic heads), so the opening, and only the opening, takes turns.
    """
    with (home / ".icegroup-instance.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            instance = dg.DagsterInstance.from_config(str(home))
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    with instance:
        yield instance


def execute(
    job: dg.JobDefinition, instance: dg.DagsterInstance, home: Path, **options: Any
) -> dg.ExecuteInProcessResult:
    """Execute ``job`` as a run of ``instance``; an icegroup error is raised as itself.

    A run stopped by SIGTERM or Ctrl-C (Dagster raises both as an interrupt inside the op, which
    ends its leases after their current shard and hands the rest back) raises ``Interrupted``.
    Any other failure prints its traceback to stderr (the command's log file, unless ``--verbose``)
    and raises ``RunFailed`` with one line naming the job and the error (exit code 1).
    """
    try:
        return job.execute_in_process(instance=instance, **options)
    except (dg.DagsterExecutionInterruptedError, KeyboardInterrupt):
        raise Interrupted(
            f"job {job.name} was interrupted and its run is canceled; its leases ended after their shard in flight, "
            "and any shard left went back to the group (the log says which, and what they committed)."
        ) from None
    except Exception as exc:
        # Dagster raises the op's own error, or wraps it in a step error: unwrap that.
        wrapped = isinstance(exc, dg.DagsterExecutionStepExecutionError) and exc.__cause__ is not None
        failed = exc.__cause__ if wrapped and exc.__cause__ is not None else exc
        if isinstance(failed, IcegroupError):
            raise failed from None
        traceback.print_exception(failed, file=sys.stderr)
        raise RunFailed(
            f"job {job.name}: {first_line(failed)} (the run is in the Dagster instance at {home}; "
            "`make ui` shows its logs)"
        ) from None


def first_line(error: BaseException) -> str:
    """``Type: message`` of an error, cut at its first line: a Spark error's message holds a whole Java trace."""
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0] if lines else ''}".rstrip(": ")
