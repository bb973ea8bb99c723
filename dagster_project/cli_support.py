"""What the ``icegroup`` commands share: naming a group, times, tables, and running a job in the instance."""

from __future__ import annotations

import fcntl
import os
import sys
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import dagster as dg

from iceberg.errors import IcegroupError, UsageError
from iceberg.groups import GroupConfig
from iceberg.lakehouse import ENV_HOME


def pick(groups: dict[str, GroupConfig], name: str, source: Path) -> GroupConfig:
    """The named group, or an error listing the defined ones."""
    if name not in groups:
        raise UsageError(f"group {name!r} is not defined in {source}; defined: {sorted(groups) or 'none'}")
    return groups[name]


def parse_time(text: str, option: str) -> int:
    """An ISO-8601 time (UTC if it names no zone) as epoch milliseconds, or an error naming the option."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(f"{option}: {text!r} is not an ISO-8601 time; write it like 2026-11-23T14:05:00Z") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def table(rows: list[dict[str, object]], columns: list[str]) -> str:
    """Left-aligned columns, upper-case headers."""
    cells = [[c.upper() for c in columns]] + [[str(row.get(c, "")) for c in columns] for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)).rstrip() for line in cells)


def dagster_home() -> Path:
    """``$DAGSTER_HOME``, else ``.dagster`` under ``$ICEGROUP_HOME``: the instance ``make ui`` shows."""
    home = Path(os.environ.get("DAGSTER_HOME") or Path(os.environ.get(ENV_HOME, ".")) / ".dagster").resolve()
    home.mkdir(parents=True, exist_ok=True)
    return home


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
) -> dg.ExecuteInProcessResult | None:
    """Execute ``job`` as a run of ``instance``; an icegroup error is raised as itself.

    Any other failure prints its traceback and where the run is, and returns None (exit code 1).
    """
    try:
        return job.execute_in_process(instance=instance, **options)
    except Exception as exc:
        # Dagster raises the op's own error, or wraps it in a step error: unwrap that.
        wrapped = isinstance(exc, dg.DagsterExecutionStepExecutionError) and exc.__cause__ is not None
        failed = exc.__cause__ if wrapped and exc.__cause__ is not None else exc
        if isinstance(failed, IcegroupError):
            raise failed from None
        traceback.print_exception(failed, file=sys.stderr)
        print(
            f"icegroup: run failed: {type(failed).__name__}: {failed} (the run is in the instance at {home}; "
            "`make ui` shows its logs)",
            file=sys.stderr,
        )
        return None
