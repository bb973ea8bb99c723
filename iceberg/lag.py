"""A group's lag from its registry and the source's metadata alone: cheap enough to record after every lease.

``describe_group`` reconciles with the sink and dry-runs a plan, which reads manifests; a Borrower
that recorded it after each lease spent longer on it than on a small shard. This reads the
registry's pending shards and the snapshot log of the source's metadata, nothing more. Source
commits the Leader has not planned yet count with every row they added (before the group's filter),
except for a group whose filter can leave streams out (a filter on an identity partition column,
``iceberg/protocol/stream_filter.py``): for it, the next tick's worth of those commits is read as the
tick will plan it, from their manifests, so rows of streams the filter cannot match, and commits that
only touched such streams, are not lag. Commits past that batch count every row, an upper bound.
"""

from __future__ import annotations

import time
from collections.abc import Collection
from dataclasses import dataclass
from enum import Enum

from pyiceberg.catalog import Catalog
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot

from icegroup.iceberg.protocol.completion import complete_windows
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.state import GroupState
from icegroup.iceberg.protocol.stream_filter import may_match, pruning_predicate
from icegroup.iceberg.shards import added_files, identity_columns, snapshot_info
from icegroup.iceberg.store.registry import load_state
from icegroup.iceberg.store.tables import load_optional, load_source


@dataclass(frozen=True)
class Lag:
    """What the group has yet to commit: rows, source snapshots, and the oldest one's age."""

    rows: int
    snapshots: int
    age_s: float | None


def lag_of(catalog: Catalog, group: GroupConfig, now_ms: int | None = None, committed: Collection[str] = ()) -> Lag:
    """The group's lag now: its cut and uncommitted shards, plus the source commits after its planning cursor.

    ``committed`` are shards known to be in the sink already (a lease that just committed them):
    the registry still lists them until the next tick reconciles it, and they are not lag.
    """
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    state = load_state(catalog, group.name).state
    source = load_source(catalog, group.source)
    done = set(committed)
    pending = [s for s in state.shards.values() if s.shard_id not in done] if state is not None else []
    waiting = {snap for shard in pending for snap in shard.snapshots}
    rows = sum(shard.rows for shard in pending)
    snapshots, unplanned_rows = unplanned_lag(source, group, unplanned_appends(source, state))
    waiting |= snapshots
    rows += unplanned_rows
    stamps = [snapshot.timestamp_ms for snapshot in source.snapshots() if snapshot.snapshot_id in waiting]
    age = (now_ms - min(stamps)) / 1000 if stamps else None
    return Lag(rows=rows, snapshots=len(waiting), age_s=age)


def unplanned_appends(source: Table, state: GroupState | None) -> list[Snapshot]:
    """The source's append snapshots after the group's planning cursor, oldest first."""
    planned_sequence = state.planned_through_sequence if state is not None else 0
    return sorted(
        (
            snapshot
            for snapshot in source.snapshots()
            if (state is None or (snapshot.sequence_number is not None and snapshot.sequence_number > planned_sequence))
            and snapshot.summary is not None
            and snapshot.summary.operation.value == "append"
        ),
        key=lambda snapshot: snapshot.sequence_number or 0,
    )


def unplanned_lag(source: Table, group: GroupConfig, unplanned: list[Snapshot]) -> tuple[set[int], int]:
    """The snapshots and rows of ``unplanned`` the group has to consume.

    All of them and every row they added, unless the group's filter can leave streams out: then the
    first ``max_snapshots_per_tick`` (what the next tick plans) count only the files of streams the
    filter may match, read from their manifests as planning reads them.
    """
    predicate = pruning_predicate(group.filter, identity_columns(source)) if unplanned else None
    if predicate is None:
        return {s.snapshot_id for s in unplanned}, added_records(unplanned)
    batch, rest = unplanned[: group.max_snapshots_per_tick], unplanned[group.max_snapshots_per_tick :]
    kept = [e for e in added_files(source, [snapshot_info(s) for s in batch]) if may_match(predicate, dict(e.identity))]
    snapshots = {e.snapshot_id for e in kept} | {s.snapshot_id for s in rest}
    return snapshots, sum(e.record_count for e in kept) + added_records(rest)


def added_records(snapshots: list[Snapshot]) -> int:
    """Rows these snapshots added, from their summaries (before any filter)."""
    return sum(int(s.summary.additional_properties.get("added-records", "0")) for s in snapshots if s.summary)


class Work(Enum):
    """What a group's next tick has to do, as far as its registry and the source's snapshot log tell."""

    NONE = "none"
    # Only windows to report complete, or only commits the group's filter leaves out to plan past:
    # the tick runs in a Dagster run, but no Borrower needs Spark.
    WINDOWS = "windows"
    # Commits to plan, or shards or leases open: Borrowers will read and write with Spark.
    DATA = "data"


def pending_work(catalog: Catalog, group: GroupConfig, now_ms: int | None = None) -> Work:
    """What the group's next tick has to do: open shards or leases, commits to plan, or windows to report.

    It reads what ``lag_of`` reads, the registry and the source's snapshot log, and no manifest, so
    ``icegroup consume`` can start Spark early for a group with data to move, make a run without a
    JVM for a group that only has windows to report, and answer a group with nothing from its
    registry alone. A missing source has nothing to read; whatever reads it next says what is wrong
    with it. For a group whose filter can leave streams out, new commits are read as ``lag_of`` reads
    them: commits that only touched streams it leaves out need a tick to move past them, not Spark.
    """
    source = load_optional(catalog, group.source)
    if source is None:
        return Work.NONE
    state = load_state(catalog, group.name).state
    head = source.current_snapshot()
    if state is None:
        return Work.DATA if head is not None else Work.NONE
    if state.shards or state.leases:
        return Work.DATA
    if head is not None and head.snapshot_id != state.planned_through:
        if pruning_predicate(group.filter, identity_columns(source)) is None:
            return Work.DATA
        snapshots, _ = unplanned_lag(source, group, unplanned_appends(source, state))
        return Work.DATA if snapshots else Work.WINDOWS
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    cursor = source.snapshot_by_id(state.planned_through) if state.planned_through is not None else None
    due = complete_windows(state, group, cursor.timestamp_ms if cursor else None, now_ms)
    return Work.WINDOWS if due else Work.NONE
