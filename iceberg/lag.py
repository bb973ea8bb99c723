"""A group's lag from its registry and the source's metadata alone: cheap enough to record after every lease.

``describe_group`` reconciles with the sink and dry-runs a plan, which reads manifests; a Borrower
that recorded it after each lease spent longer on it than on a small shard. This reads the
registry's pending shards and the snapshot log of the source's metadata, nothing more. Source
commits the Leader has not planned yet count with every row they added (before the group's filter).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from enum import Enum

from pyiceberg.catalog import Catalog

from iceberg.protocol.completion import complete_windows
from iceberg.protocol.group import GroupConfig
from iceberg.store.registry import load_state
from iceberg.store.tables import load_optional, load_source


@dataclass(frozen=True)
class Lag:
    """What the group has yet to commit: rows, source snapshots, and the oldest one's age."""

    rows: int
    snapshots: int
    age_s: float | None


def lag_of(catalog: Catalog, group: GroupConfig, now_ms: int | None = None) -> Lag:
    """The group's lag now: its cut and uncommitted shards, plus the source commits after its planning cursor."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    state = load_state(catalog, group.name).state
    source = load_source(catalog, group.source)
    planned_sequence = state.planned_through_sequence if state is not None else 0
    pending = list(state.shards.values()) if state is not None else []
    waiting = {snap for shard in pending for snap in shard.snapshots}
    rows = sum(shard.rows for shard in pending)
    stamps = []
    for snapshot in source.snapshots():
        unplanned = state is None or (
            snapshot.sequence_number is not None and snapshot.sequence_number > planned_sequence
        )
        if unplanned and snapshot.summary is not None and snapshot.summary.operation.value == "append":
            waiting.add(snapshot.snapshot_id)
            rows += int(snapshot.summary.additional_properties.get("added-records", "0"))
        if snapshot.snapshot_id in waiting:
            stamps.append(snapshot.timestamp_ms)
    age = (now_ms - min(stamps)) / 1000 if stamps else None
    return Lag(rows=rows, snapshots=len(waiting), age_s=age)


class Work(Enum):
    """What a group's next tick has to do, as far as its registry and the source's snapshot log tell."""

    NONE = "none"
    # Only windows to report complete: the tick runs in a Dagster run, but no Borrower needs Spark.
    WINDOWS = "windows"
    # Commits to plan, or shards or leases open: Borrowers will read and write with Spark.
    DATA = "data"


def pending_work(catalog: Catalog, group: GroupConfig, now_ms: int | None = None) -> Work:
    """What the group's next tick has to do: open shards or leases, commits to plan, or windows to report.

    It reads what ``lag_of`` reads, the registry and the source's snapshot log, and no manifest, so
    ``icegroup consume`` can start Spark early for a group with data to move, make a run without a
    JVM for a group that only has windows to report, and answer a group with nothing from its
    registry alone. A missing source has nothing to read; whatever reads it next says what is wrong
    with it.
    """
    source = load_optional(catalog, group.source)
    if source is None:
        return Work.NONE
    state = load_state(catalog, group.name).state
    head = source.current_snapshot()
    if state is None:
        return Work.DATA if head is not None else Work.NONE
    if state.shards or state.leases or (head is not None and head.snapshot_id != state.planned_through):
        return Work.DATA
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    cursor = source.snapshot_by_id(state.planned_through) if state.planned_through is not None else None
    due = complete_windows(state, group, cursor.timestamp_ms if cursor else None, now_ms)
    return Work.WINDOWS if due else Work.NONE
