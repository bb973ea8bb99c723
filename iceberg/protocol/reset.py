"""Resets, the pure half: where each stream moves, what is consumed again or skipped, and the new state.

After ``kafka-consumer-groups --reset-offsets``: a target names new positions (one source snapshot
for every stream, or a shift per stream), and the group continues from them in a new epoch. Moving
back re-consumes committed ranges; their earlier output is deleted by shard id, so the sink holds
each row once (unless the user keeps it). A backward position inside a committed shard is rounded
down to the shard's start: a shard's output is deleted whole or not at all. Moving forward skips
data, and the plan says how many rows.

A reset in progress is marked on the sink (``ResetMarker``) from its fence to its end, and beats
for itself in the heartbeat store as a replay's holder does. A tick that finds the marker above the
registry's epoch tells from the holder's beats whether the reset is in flight (back off, try again
soon) or died (``ResetInterrupted``: running it again completes it): ``judge_holder``.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Literal

from icegroup.iceberg.errors import ResetInFlight, ResetInterrupted
from icegroup.iceberg.protocol.sink_commit import ShardRange
from icegroup.iceberg.protocol.state import GroupState, StreamState

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
    """One stream's move: from where to where, and what that consumes again or skips.

    ``skipped_expired_rows`` is the part of ``skipped_rows`` whose snapshots have expired: counted from
    the data files live now (``iceberg/history_gap.py``), which a compaction or a delete in that
    stretch makes a bound rather than the exact figure.
    """

    stream: str
    current: Position
    new: Position
    reconsumed: list[ShardRange] = field(default_factory=list)
    skipped_snapshots: int = 0
    skipped_rows: int = 0
    skipped_expired_rows: int = 0

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


@dataclass(frozen=True)
class ResetMarker:
    """A reset's marker on the sink (``icegroup.reset.<group>``): set with its epoch fence, cleared at its end.

    ``holder`` beats for the reset while it runs, from before the marker is set until after it is
    cleared, and ``at_ms`` is when it set the marker. A marker written before markers named their
    holder has neither: nothing tells whether its reset still runs, so it counts as interrupted.
    """

    epoch: int
    target: str
    holder: str | None = None
    at_ms: int | None = None

    def to_json(self) -> str:
        """The property value; readers that know only ``epoch`` and ``target`` still read it."""
        fields: dict[str, object] = {"epoch": self.epoch, "target": self.target}
        if self.holder is not None:
            fields |= {"holder": self.holder, "at_ms": self.at_ms}
        return json.dumps(fields)


def parse_marker(text: str) -> ResetMarker | None:
    """A reset marker as the sink property holds it; None for no marker."""
    if not text:
        return None
    marker = json.loads(text)
    holder, at_ms = marker.get("holder"), marker.get("at_ms")
    return ResetMarker(
        int(marker["epoch"]), str(marker["target"]), None if holder is None else str(holder),
        None if at_ms is None else int(at_ms),
    )  # fmt: skip


class Holder(StrEnum):
    """How a reset marker's holder stands, by its heartbeat."""

    ALIVE = "alive"  # it beat within the session timeout and its process runs: the reset is in flight
    DEAD = "dead"  # silent past the session timeout, its process gone, or a marker that names no holder
    ENDED = "ended"  # no heartbeat row: it stopped (completed or failed) since the marker was read


def judge_holder(
    marker: ResetMarker, beats: Mapping[str, int], gone: Collection[str], now_ms: int, session_timeout_s: int
) -> Holder:
    """Whether the reset that set ``marker`` is still running, as its holder's last heartbeat tells.

    The holder beats before it sets the marker and forgets its row only once it stops, so a missing
    row means it stopped: the caller reads the marker again to tell a reset that completed meanwhile
    (marker gone) from one that failed (marker left behind).
    """
    if marker.holder is None or marker.holder in gone:
        return Holder.DEAD
    if marker.holder not in beats:
        return Holder.ENDED
    return Holder.ALIVE if now_ms - beats[marker.holder] <= session_timeout_s * 1000 else Holder.DEAD


def reset_in_flight(
    group: str, marker: ResetMarker, last_beat_ms: int, now_ms: int, session_timeout_s: int
) -> ResetInFlight:
    """The error of a tick (or another reset) that found a live reset between its fence and its registry commit.

    It names the reset and when to try again; it does not send anyone to run the reset: a second
    run of a forward reset would skip newer rows.
    """
    dead_from = datetime.fromtimestamp((last_beat_ms + session_timeout_s * 1000) / 1000, tz=UTC)
    return ResetInFlight(
        f"group {group!r}: a reset ({marker.target}) is in flight: it raised the sink's epoch to {marker.epoch} and "
        f"has not committed the registry yet (held by {marker.holder}, last heartbeat "
        f"{max(now_ms - last_beat_ms, 0) / 1000:.0f}s ago). Nothing was changed here; run it again once that reset "
        f"is done, usually within seconds (if its process dies, it counts as interrupted from "
        f"{dead_from.isoformat(timespec='seconds')} on, and the command that completes it is named then)"
    )


def reset_moved(group: str, marker: ResetMarker) -> ResetInFlight:
    """The error of a tick that read a reset's marker just before that reset completed (or was taken over)."""
    return ResetInFlight(
        f"group {group!r}: a reset ({marker.target}) in epoch {marker.epoch} completed or moved on while this read "
        "the group; nothing was changed here; run it again now"
    )


def reset_interrupted(group: str, marker: ResetMarker) -> ResetInterrupted:
    """The error of a tick that found the marker of a reset that died before it committed the registry."""
    return ResetInterrupted(
        f"group {group!r}: a reset ({marker.target}) raised the sink's epoch to {marker.epoch} but did not commit "
        f"the registry (it was interrupted); run `icegroup reset {group} {marker.target} --execute` again to "
        "complete it"
    )
