"""Where a reset's target lands on the source: times, durations, checkpoints, shifts, and what it costs.

``iceberg/reset.py`` plans and executes a reset; this module resolves its target against the source's
history (a global snapshot, or per stream for ``--shift-by`` and ``--to-checkpoint``), checks that the
history a backward move needs is still there, and counts what a forward move skips.
"""

from __future__ import annotations

from pyiceberg.table import Table

from icegroup.iceberg.errors import UsageError
from icegroup.iceberg.history_gap import live_added_between
from icegroup.iceberg.protocol.durations import option_value, parse_duration, parse_time
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.reset import Position, ResetTarget, StreamMove
from icegroup.iceberg.protocol.shards import SnapshotInfo
from icegroup.iceberg.protocol.state import GroupState
from icegroup.iceberg.shards import APPEND, added_files, snapshot_info
from icegroup.iceberg.store.sink_history import sink_history
from icegroup.iceberg.store.tables import walk_back


def chain(source: Table) -> list[SnapshotInfo]:
    """The source's main history still in its metadata, oldest first."""
    return [snapshot_info(s) for s in reversed(list(walk_back(source, None)))]


def earliest(history: list[SnapshotInfo]) -> Position:
    """Before the oldest snapshot still available (the table's beginning if nothing expired)."""
    if not history:
        return (None, 0)
    oldest = history[0]
    return (oldest.parent_id, max(oldest.sequence_number - 1, 0))


def global_target(target: ResetTarget, group: GroupConfig, history: list[SnapshotInfo], now_ms: int) -> Position:
    """The one position every stream moves to, for targets that name a point in the source."""
    if target.how == "earliest":
        return earliest(history)
    if target.how == "latest":
        return (history[-1].snapshot_id, history[-1].sequence_number) if history else (None, 0)
    if target.how == "snapshot":
        wanted = int(target.value or "0")
        for info in history:
            if info.snapshot_id == wanted:
                return (info.snapshot_id, info.sequence_number)
        span = f"{history[0].snapshot_id} (oldest) to {history[-1].snapshot_id} (head)" if history else "none"
        raise UsageError(
            f"--to-snapshot: {wanted} is not in the history of {group.source!r} (its snapshots run from {span}); "
            "name one of them, or use --to-earliest"
        )
    if target.how == "datetime":
        cutoff = option_value("--to-datetime", parse_time, target.value or "")
    else:
        cutoff = now_ms - int(option_value("--by-duration", parse_duration, target.value or "").total_seconds() * 1000)
    before = [info for info in history if info.timestamp_ms < cutoff]
    return (before[-1].snapshot_id, before[-1].sequence_number) if before else earliest(history)


def stream_snapshots(source: Table, history: list[SnapshotInfo]) -> dict[str, list[SnapshotInfo]]:
    """Per stream, the append snapshots that added files to it, oldest first."""
    appends = [info for info in history if info.operation == APPEND]
    by_id = {info.snapshot_id: info for info in appends}
    out: dict[str, dict[int, SnapshotInfo]] = {}
    for entry in added_files(source, appends):
        out.setdefault(entry.stream, {})[entry.snapshot_id] = by_id[entry.snapshot_id]
    return {stream: sorted(snaps.values(), key=lambda s: s.sequence_number) for stream, snaps in out.items()}


def checkpoint_positions(sink: Table | None, group: GroupConfig, checkpoint: int) -> dict[str, Position]:
    """Each stream's committed position as of a sink commit of the group."""
    if sink is None or sink.snapshot_by_id(checkpoint) is None:
        raise UsageError(
            f"--to-checkpoint: {checkpoint} is not a snapshot of {group.sink!r}; `icegroup checkpoints "
            f"{group.name}` lists the group's commits"
        )
    commits, _ = sink_history(sink, group.name)
    order = [s.snapshot_id for s in walk_back(sink, None)]
    if not any(c.snapshot_id == checkpoint for c in commits):
        raise UsageError(f"--to-checkpoint: sink snapshot {checkpoint} is not a commit of group {group.name!r}")
    older = set(order[order.index(checkpoint) :])
    positions: dict[str, Position] = {}
    for commit in commits:
        if commit.snapshot_id in older:
            for shard in commit.shards:
                if (shard.to_sequence or 0) > positions.get(shard.stream, (None, -1))[1]:
                    positions[shard.stream] = (shard.to_snapshot, shard.to_sequence or 0)
    return positions


def targets(
    target: ResetTarget,
    group: GroupConfig,
    state: GroupState,
    currents: dict[str, Position],
    source: Table,
    history: list[SnapshotInfo],
    sink: Table | None,
    now_ms: int,
) -> tuple[dict[str, Position], Position]:
    """Each stream's new position, and where planning goes on from, before rounding."""
    sequences = {info.snapshot_id: info.sequence_number for info in history}
    if target.how == "checkpoint":
        positions = checkpoint_positions(sink, group, int(target.value or "0"))
        start: Position = (state.start_position, sequences.get(state.start_position or -1, 0))
        news = {name: positions.get(name, start) for name in currents}
        return news, min(news.values(), key=lambda p: p[1], default=start)
    if target.how == "shift":
        per_stream = stream_snapshots(source, history)
        by = int(target.value or "0")
        news = {name: shifted(current, per_stream.get(name, []), by, history) for name, current in currents.items()}
        return news, min(news.values(), key=lambda p: p[1], default=earliest(history))
    planned = global_target(target, group, history, now_ms)
    return dict.fromkeys(currents, planned), planned


def check_reachable(
    group: GroupConfig, history: list[SnapshotInfo], moves: list[StreamMove], planned: int | None
) -> None:
    """A stream moved back can only be consumed again from source history that is still there.

    Every snapshot of the shards consumed again must still be in the history, and so must the
    snapshot planning restarts after (``planned``), or planning would stop at it. Sequence numbers
    alone cannot tell: a source that is another group's sink skips the numbers its staged (write-
    audit-publish) snapshots took, so its oldest snapshot need not be number 1. Commits that recorded
    no snapshot list fall back to comparing sequence numbers with the oldest snapshot's.
    """
    floor = earliest(history)
    present = {s.snapshot_id for s in history}
    for move in moves:
        if move.direction != "back":
            continue
        listed = all(shard.snapshots for shard in move.reconsumed)
        needed = {snap for shard in move.reconsumed for snap in shard.snapshots}
        if (listed and not needed <= present) or (not listed and move.new[1] < floor[1]):
            raise UsageError(
                f"group {group.name!r}: stream {move.stream} would move back to sequence {move.new[1]}, the start "
                f"of the committed shard it falls in, but {group.source!r}'s history before snapshot "
                f"{history[0].snapshot_id if history else None} has expired, so those rows cannot be consumed again; "
                "pick a later target"
            )
    if history and planned not in present and planned != history[0].parent_id:
        raise UsageError(
            f"group {group.name!r}: planning would restart after snapshot {planned}, which is no longer in "
            f"{group.source!r}'s history (it runs from {history[0].snapshot_id}); pick a later target, or "
            "--to-earliest"
        )


def shifted(current: Position, snapshots: list[SnapshotInfo], by: int, history: list[SnapshotInfo]) -> Position:
    """A stream's position moved by ``by`` of its own snapshots (negative: back), within what exists."""
    done = [s for s in snapshots if s.sequence_number <= current[1]]
    index = min(max(len(done) + by, 0), len(snapshots))
    if index == 0:
        return earliest(history)
    moved = snapshots[index - 1]
    return (moved.snapshot_id, moved.sequence_number)


def count_skipped(source: Table, history: list[SnapshotInfo], moves: list[StreamMove]) -> None:
    """Fill in the rows that forward moves skip, from the files the skipped snapshots added.

    Where a move starts before the oldest snapshot still reachable from the head, the snapshots it
    skips first have expired. Their rows are counted from the data files live now, by the sequence
    number each file was committed at (``live_added_between``), and marked as such: a preview must
    never say 0 for rows it cannot see.
    """
    forward = [m for m in moves if m.direction == "forward"]
    if not forward:
        return
    low, high = min(m.current[1] for m in forward), max(m.new[1] for m in forward)
    appends = [i for i in history if i.operation == APPEND and low < i.sequence_number <= high]
    sequence = {i.snapshot_id: i.sequence_number for i in appends}
    files = [(f, sequence[f.snapshot_id]) for f in added_files(source, appends)]
    oldest = history[0].sequence_number if history else high + 1
    expired = live_added_between(source, low, min(high, oldest - 1)) if low < oldest - 1 else []
    for move in forward:
        mine = [f for f, seq in files if f.stream == move.stream and move.current[1] < seq <= move.new[1]]
        gone = [f for f, seq in expired if f.stream == move.stream and move.current[1] < seq <= move.new[1]]
        move.skipped_rows = sum(f.record_count for f in mine + gone)
        move.skipped_expired_rows = sum(f.record_count for f in gone)
        move.skipped_snapshots = len({f.snapshot_id for f in mine + gone})
