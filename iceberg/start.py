"""Where a new group starts: its ``start`` setting resolved on the source, and the state of its first tick."""

from __future__ import annotations

from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot

from icegroup.iceberg.errors import SourceError
from icegroup.iceberg.protocol.durations import format_time
from icegroup.iceberg.protocol.group import GroupConfig, StartAtSnapshot, StartAtTimestamp
from icegroup.iceberg.protocol.state import GroupState
from icegroup.iceberg.store.tables import history_cut_before, parent_of, table_uuid, walk_back


def resolve_start(table: Table, group: GroupConfig) -> int | None:
    """The snapshot a new group consumes after, from its ``start`` setting (None: the table's start).

    ``earliest`` is the table's start even where its first snapshots have expired: the first tick
    then finds the history gap and reads every row live at the head once (``iceberg/history_gap.py``).
    Starting after the oldest snapshot left would skip the rows the expired snapshots added, which are
    still live.
    """
    chain = list(walk_back(table, None))
    head = chain[0].snapshot_id if chain else None
    start = group.start
    if start == "latest" or not chain:
        return head
    if start == "earliest":
        return None
    if isinstance(start, StartAtSnapshot):
        for snapshot in chain:
            if snapshot.snapshot_id == start.snapshot_id:
                return start_after(table, snapshot, group)
        raise SourceError(
            f"group {group.name!r}: start.snapshot_id: {start.snapshot_id} is not a snapshot on the main "
            f"branch of {group.source!r}; pick one from its snapshots table or use earliest/latest"
        )
    if isinstance(start, StartAtTimestamp):
        cutoff = int(start.timestamp.timestamp() * 1000)
        later = [s for s in chain if s.timestamp_ms >= cutoff]
        if cutoff < chain[-1].timestamp_ms and history_cut_before(table, chain[-1]):
            raise SourceError(
                f"group {group.name!r}: start.timestamp: {start.timestamp.isoformat()} is before the oldest snapshot "
                f"left in the history of {group.source!r} ({chain[-1].snapshot_id}, committed "
                f"{format_time(chain[-1].timestamp_ms)}); the snapshots before it expired, so which live rows were "
                "committed after your time cannot be told. Use start: earliest to read every live row once, or a "
                "timestamp at or after the oldest snapshot"
            )
        return start_after(table, later[-1], group) if later else head
    raise SourceError(f"group {group.name!r}: start: unsupported value {start!r}")


def start_after(table: Table, first: Snapshot, group: GroupConfig) -> int | None:
    """The position before ``first``, the first snapshot a group consumes: its parent, even one expired since."""
    try:
        return parent_of(table, first)
    except LookupError as lost:
        raise SourceError(
            f"group {group.name!r}: start: {lost}, so a group cannot start exactly at snapshot {first.snapshot_id} "
            f"of {group.source!r}; use start: earliest to read every live row once, or a later snapshot"
        ) from lost


def initial_state(table: Table, group: GroupConfig, epoch: int = 0) -> GroupState:
    """State of a group that has never ticked, in ``epoch``: the sink's epoch fence, raised by a delete before."""
    if table.format_version < 2:
        raise SourceError(
            f"group {group.name!r}: source {group.source!r} is an Iceberg format-version 1 table, whose "
            "snapshots carry no sequence numbers to order streams by; upgrade it with "
            "ALTER TABLE ... SET TBLPROPERTIES ('format-version'='2')"
        )
    position = resolve_start(table, group)
    start = table.snapshot_by_id(position) if position is not None else None
    return GroupState(
        group=group.name,
        source=group.source,
        sink=group.sink,
        start_position=position,
        planned_through=position,
        planned_through_sequence=start.sequence_number or 0 if start is not None else 0,
        epoch=epoch,
        source_uuid=table_uuid(table),
    )
