"""Resets, the pure half: where each stream moves, what is consumed again or skipped, and the new state.

After ``kafka-consumer-groups --reset-offsets``: a target names new positions (one source snapshot
for every stream, or a shift per stream), and the group continues from them in a new epoch. Moving
back re-consumes committed ranges; their earlier output is deleted by shard id, so the sink holds
each row once (unless the user keeps it). A backward position inside a committed shard is rounded
down to the shard's start: a shard's output is deleted whole or not at all. Moving forward skips
data, and the plan says how many rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from iceberg.protocol.sink_commit import ShardRange
from iceberg.protocol.state import GroupState, StreamState

How = Literal["earliest", "latest", "snapshot", "datetime", "duration", "shift", "checkpoint"]
Position = tuple[int | None, int]  # a source snapshot (None: the table's beginning) and its sequence number


@dataclass(frozen=True)
class ResetTarget:
    """Where a reset moves the group, as the command line named it."""

    how: How
    value: str | None = None

    def describe(self) -> str:
        """The option as typed: ``--to-snapshot 123``."""
        option = {
            "earliest": "--to-earliest",
            "latest": "--to-latest",
            "snapshot": "--to-snapshot",
            "datetime": "--to-datetime",
            "duration": "--by-duration",
            "shift": "--shift-by",
            "checkpoint": "--to-checkpoint",
        }[self.how]
        return option if self.value is None else f"{option} {self.value}"


@dataclass
class StreamMove:
    """One stream's move: from where to where, and what that consumes again or skips."""

    stream: str
    current: Position
    new: Position
    reconsumed: list[ShardRange] = field(default_factory=list)
    skipped_snapshots: int = 0
    skipped_rows: int = 0

    @property
    def direction(self) -> str:
        """back, forward or none."""
        if self.new[1] < self.current[1]:
            return "back"
        return "forward" if self.new[1] > self.current[1] else "none"

    @property
    def reconsumed_rows(self) -> int:
        """Source rows of the committed shards that will be consumed again."""
        return sum(s.rows or 0 for s in self.reconsumed)

    @property
    def reconsumed_snapshots(self) -> int:
        """Source snapshots of those shards."""
        return sum(len(s.snapshots) for s in self.reconsumed)


def round_down(new: Position, committed: Iterable[ShardRange], sequences: Mapping[int, int]) -> Position:
    """A backward position moved to the start of the committed shard it falls inside, if it does.

    ``sequences`` maps source snapshot ids to sequence numbers; a shard from the table's beginning
    starts at sequence 0.
    """
    ranges = sorted(committed, key=lambda s: -(s.to_sequence or 0))
    position = new
    for shard in ranges:
        start = 0 if shard.from_snapshot is None else sequences.get(shard.from_snapshot, 0)
        if start < position[1] < (shard.to_sequence or 0):
            position = (shard.from_snapshot, start)
    return position


def reconsumed(new: Position, committed: Iterable[ShardRange]) -> list[ShardRange]:
    """The committed shards above a stream's new position: their output is replaced."""
    return sorted((s for s in committed if (s.to_sequence or 0) > new[1]), key=lambda s: s.to_sequence or 0)


def reset_state(
    state: GroupState, moves: list[StreamMove], planned_through: Position, epoch: int, windows: Iterable[int]
) -> GroupState:
    """The group after the reset: new positions in a new epoch, nothing cut, nothing in flight.

    ``planned_through`` is where planning goes on from; every stream's position is its floor, so
    nothing at or below it is cut again. Windows whose output is replaced are no longer complete.
    """
    new = state.model_copy(deep=True)
    new.epoch = epoch
    new.shards = {}
    new.leases = {}
    new.replays = {}
    for move in moves:
        stream = new.streams.setdefault(move.stream, StreamState(position=None))
        stream.position, stream.position_sequence = move.new
    new.planned_through, new.planned_through_sequence = planned_through
    reopened = list(windows)
    if reopened and new.windows_complete_through_ms is not None:
        new.windows_complete_through_ms = min(new.windows_complete_through_ms, min(reopened))
    return new
