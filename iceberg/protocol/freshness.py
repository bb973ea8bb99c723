"""The lag check's verdict: is the group keeping up, and if not, is it stopped, paused or just behind?

Pure: the Leader sensor judges from its tick, the check run on demand from ``icegroup describe``'s
view, by the same rules. (Their ages can differ a little: the tick counts every append past its
planning cursor, ``describe`` leaves out the files a filter excludes.) A group that cannot move on by itself
(stopped by a poison shard, at an upstream replay, or waiting on a reset) fails with an error that
names the command moving it on, whatever its lag; a paused one fails with a warning naming
``icegroup resume``. Otherwise the age of the oldest source commit the group has not consumed is
held against the group's two bounds: past ``lag_warn_after`` a warning, past ``lag_error_after``
an error.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import Literal

from icegroup.iceberg.protocol.durations import format_duration
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.state import GroupState

Severity = Literal["warn", "error"]
STATES = ("caught up", "lagging", "consuming", "paused", "parked", "stopped")


def state_of(status: str) -> str:
    """The one-word state of ``describe``'s status line, one of ``STATES``."""
    return next((state for state in STATES if status.startswith(state)), "stopped")


@dataclass(frozen=True)
class LagVerdict:
    """The lag check's result: passed or not, how bad, and a line that says why and what to do."""

    passed: bool
    severity: Severity
    description: str
    age_s: float | None
    cause: Literal["stopped", "paused", "age"] = "age"

    @property
    def key(self) -> str:
        """What changes when the verdict does, the age alone aside: the Leader reports the check when it moves."""
        if self.cause != "age":
            return f"{self.cause}: {self.description}"
        return "pass" if self.passed else self.severity


def lag_verdict(
    group: str,
    age_s: float | None,
    lag_rows: int | None,
    warn_after: timedelta,
    error_after: timedelta,
    stopped: str | None = None,
    paused: str | None = None,
) -> LagVerdict:
    """Judge a group: ``stopped`` or ``paused`` is its status line when it is either, ``age_s`` its lag in time."""
    if stopped is not None:
        return LagVerdict(False, "error", f"group {group} is {stopped}", age_s, "stopped")
    if paused is not None:
        return LagVerdict(False, "warn", f"group {group} is {paused}", age_s, "paused")
    behind = "" if lag_rows is None else f", {lag_rows} rows behind"
    bounds = f"warn after {format_duration(warn_after)}, error after {format_duration(error_after)}"
    if age_s is None:
        return LagVerdict(True, "warn", f"group {group} is caught up ({bounds})", None)
    old = f"the oldest source commit group {group} has not consumed is {age_text(age_s)} old{behind}"
    remedy = f"see `icegroup describe {group}` for its leases and rate"
    levels: tuple[tuple[timedelta, str, Severity], ...] = (
        (error_after, "lag_error_after", "error"),
        (warn_after, "lag_warn_after", "warn"),
    )
    for bound, field, severity in levels:
        if age_s > bound.total_seconds():
            return LagVerdict(False, severity, f"{old}: past {field} ({format_duration(bound)}); {remedy}", age_s)
    return LagVerdict(True, "warn", f"{old} ({bounds})", age_s)


def age_text(seconds: float) -> str:
    """An age for a person: 42s, 17m, 3h05m or 2d04h."""
    whole = int(seconds)
    if whole < 120:
        return f"{whole}s"
    if whole < 7200:
        return f"{whole // 60}m"
    if whole < 172_800:
        return f"{whole // 3600}h{whole % 3600 // 60:02d}m"
    return f"{whole // 86_400}d{whole % 86_400 // 3600:02d}h"


def oldest_unconsumed_ms(state: GroupState, appends: Iterable[tuple[int, int | None, int]]) -> int | None:
    """When the oldest source commit the group has not consumed landed: in its open shards, or not planned yet.

    ``appends`` are the source's append snapshots as (snapshot id, sequence number, timestamp ms);
    those after the planning cursor are not planned yet. None when the group has consumed them all.
    """
    open_snapshots = {snapshot for shard in state.shards.values() for snapshot in shard.snapshots}
    stamps = [
        at_ms
        for snapshot_id, sequence, at_ms in appends
        if snapshot_id in open_snapshots or (sequence is not None and sequence > state.planned_through_sequence)
    ]
    return min(stamps, default=None)


def judge_lag(group: GroupConfig, status: str, age_s: float | None, lag_rows: int | None) -> LagVerdict:
    """The verdict on ``group`` from its status line (as ``icegroup describe`` words it) and its lag."""
    state = state_of(status)
    return lag_verdict(
        group.name,
        age_s,
        lag_rows,
        group.lag_warn_after,
        group.lag_error_after,
        stopped=status if state == "stopped" else None,
        paused=status if state == "paused" else None,
    )
