"""Rebuilding a group's state from the sink's commits, when its registry is lost or behind the sink.

Progress lives in the sink commit (DESIGN §3): each commit names its shards by stream and source
range, with the range end's sequence number, the group's start, a low watermark and its config
hash. That is enough to rebuild every stream's position without the registry. Shards are matched
by *range*, not by id: the shards a rebuilt registry cuts next start after each stream's committed
position, whatever ids the lost registry gave them.

A rebuild also moves the group to a new epoch. The Leader raises the sink's epoch fence before it
reads the history (``iceberg/leader.py``), so every lease of the lost registry, known or not, can
no longer commit; its shards are cut again from the positions, and their ids carry the new epoch.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from itertools import pairwise

from icegroup.iceberg.errors import SourceError
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.sink_commit import ResetRecord, ShardRange, SinkCommit
from icegroup.iceberg.protocol.state import RATE_SAMPLES, ConfigChange, GroupState, StreamState


def registry_behind(state: GroupState, commits: Iterable[SinkCommit], sink_epoch: int) -> str | None:
    """Why the registry cannot be reconciled with the sink by shard id, or None when it can.

    Every commit after the registry's sink cursor must be of a shard the registry cut, in its
    epoch. Anything else means the sink moved on without this registry: it was restored from an
    older backup, or another registry's leases committed (a rebuild raced a zombie's commit).
    """
    if sink_epoch > state.epoch:
        return f"the sink's epoch fence is {sink_epoch}, the registry's epoch is {state.epoch}"
    for commit in commits:
        unknown = [s.shard_id for s in commit.shards if s.shard_id not in state.shards]
        if unknown:
            return (
                f"sink snapshot {commit.snapshot_id} commits shard {unknown[0]} (lease {commit.lease_id}, epoch "
                f"{commit.epoch}), which the registry does not hold"
            )
    return None


def rebuild_state(
    group: GroupConfig,
    commits: Sequence[SinkCommit],
    sequences: Mapping[int, int],
    sink_head: int | None,
    epoch: int,
    resets: Sequence[ResetRecord] = (),
) -> GroupState:
    """The group's state as the sink's commits (oldest first) say it is, in ``epoch``.

    Shards whose output a reset deleted (``resets``) do not count, and low watermarks recorded
    before the newest reset are not trusted: that reset may have moved streams below them.

    ``sequences`` maps source snapshot ids to sequence numbers, for commits written before the
    sequence was recorded. The start is the one the newest commit recorded; commits written before
    it was recorded fall back to the earliest range start they name. Planning starts over from the
    newest low watermark the commits recorded (every stream was committed through it when its
    lease was granted, and commits are durable), else from the start; each stream's committed
    position keeps its committed ranges above that from being cut again.

    The registry's rate samples are lost with it, so each stream's are taken from its last commits
    (their times and rows): without them a stream would look idle since 1970, and the next tick
    would fold it out of the registry as done (``retire_streams``) though it committed seconds ago.
    """
    streams: dict[str, StreamState] = {}
    for commit in commits:
        for shard in commit.shards:
            if any(reset.voids(commit.epoch, shard) for reset in resets):
                continue
            sequence = sequence_of(shard, sequences, group)
            stream = streams.setdefault(shard.stream, StreamState(position=shard.from_snapshot))
            if sequence > stream.position_sequence:
                stream.position, stream.position_sequence = shard.to_snapshot, sequence
            stream.committed_shards += 1
            stream.committed_rows += shard.rows or 0
            stream.recent = [*stream.recent, (commit.timestamp_ms, shard.rows or 0)][-RATE_SAMPLES:]
    start = recorded_start(commits, sequences, group)
    last_reset = max((reset.epoch for reset in resets), default=0)
    marks = [
        (c.origin.low_watermark, c.origin.low_watermark_sequence)
        for c in commits
        if c.origin is not None and c.origin.low_watermark_sequence is not None and c.epoch >= last_reset
    ]
    plan_from, plan_from_sequence = max(marks, key=lambda mark: mark[1] or 0) if marks else (start, 0)
    pinned = sorted(
        (c for c in commits if c.origin is not None and c.origin.config_hash is not None),
        key=lambda c: c.origin.config_version if c.origin else 0,
    )  # stable: within a config version, commit order
    return GroupState(
        group=group.name,
        source=group.source,
        sink=group.sink,
        epoch=epoch,
        start_position=start,
        planned_through=plan_from,
        planned_through_sequence=plan_from_sequence or 0,
        sink_cursor=sink_head,
        streams=streams,
        leases_done=len({(c.lease_id, c.epoch) for c in commits}),
        config_hash=pinned[-1].origin.config_hash if pinned and pinned[-1].origin else None,
        config_changes=config_changes(pinned),
    )


def sequence_of(shard: ShardRange, sequences: Mapping[int, int], group: GroupConfig) -> int:
    """The sequence number of a committed range's end, as recorded or as the source has it."""
    if shard.to_sequence is not None:
        return shard.to_sequence
    if shard.to_snapshot in sequences:
        return sequences[shard.to_snapshot]
    raise SourceError(
        f"group {group.name!r}: cannot rebuild from the sink: shard {shard.shard_id} (stream {shard.stream}) ends at "
        f"source snapshot {shard.to_snapshot}, which {group.source!r} no longer has, and its commit predates "
        "recorded sequence numbers; restore the registry from a backup, or consume into a new group"
    )


def recorded_start(commits: Sequence[SinkCommit], sequences: Mapping[int, int], group: GroupConfig) -> int | None:
    """The group's start as its newest commit recorded it, else the earliest range start of any commit."""
    for commit in reversed(commits):
        if commit.origin is not None:
            return commit.origin.start_position
    starts: dict[int, int] = {}
    for shard in (shard for commit in commits for shard in commit.shards):
        if shard.from_snapshot is None:
            return None
        starts[shard.from_snapshot] = sequences.get(shard.from_snapshot, sequence_of(shard, sequences, group))
    return min(starts, key=starts.__getitem__) if starts else None


def config_changes(commits: Sequence[SinkCommit]) -> list[ConfigChange]:
    """Each point where the config version moves on to a different hash, in commits ordered by version.

    A lease granted before a change can commit after it; ordering by the version its grant saw
    keeps its old hash from looking like a change back.
    """
    changes = []
    for before, after in pairwise(commits):
        old = before.origin.config_hash if before.origin else None
        new = after.origin.config_hash if after.origin else None
        if old is not None and new is not None and old != new:
            changes.append(
                ConfigChange(at_ms=after.timestamp_ms, old_hash=old, new_hash=new, sink_snapshot=before.snapshot_id)
            )
    return changes
