"""A group's durable state, as kept in the registry, and the pure transitions on it.

The state is one document: stream positions, shards cut but not yet committed, and leases in
flight. Transitions are pure functions so the protocol can be unit-tested without a catalog.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum

from pydantic import BaseModel, Field

from icegroup.iceberg.protocol.shards import Shard


class LeasePhase(StrEnum):
    """The Leader's side of a lease (EMQX's granting -> granted -> revoking -> revoked), plus parked.

    Only ``granting``, ``granted`` and ``parked`` are ever stored: ``revoking`` (fence raised, run
    terminated) and ``revoked`` (the attempt is over) happen within one tick, which stores the next
    attempt as ``granting``.
    """

    GRANTING = "granting"
    GRANTED = "granted"
    REVOKING = "revoking"
    REVOKED = "revoked"
    PARKED = "parked"


class Origin(BaseModel):
    """What every commit of a lease records about the group, so the registry can be rebuilt from the sink."""

    start_position: int | None = Field(description="The group's resolved start; None is the table's beginning.")
    config_hash: str | None = Field(description="Hash of the filter and transform that make the output.")
    config_version: int = Field(
        default=0, description="Config changes accepted before the grant; orders the hashes of overlapping leases."
    )
    low_watermark: int | None = Field(
        default=None, description="A source snapshot through which every stream was committed at the grant."
    )
    low_watermark_sequence: int | None = Field(
        default=None, description="Its sequence number (0: the table's beginning); None: no low watermark was known."
    )


class ConfigChange(BaseModel):
    """A change of the group's output-defining config, accepted under ``on_change: continue``."""

    at_ms: int = Field(description="When the Leader first saw the new config.")
    old_hash: str = Field(description="The hash the registry held before.")
    new_hash: str = Field(description="The hash of the config from then on.")
    sink_snapshot: int | None = Field(description="Sink head at the change: output after it is of the new config.")


class Lease(BaseModel):
    """Shards granted to one Borrower run; the id is deterministic, the attempt counts re-grants."""

    lease_id: str = Field(description="16-hex id derived from group, epoch and shard ids.")
    epoch: int = Field(description="Group epoch at grant; a reset makes older leases stale.")
    window_start_ms: int = Field(description="Replay window that all of its shards fall in.")
    shard_ids: list[str] = Field(description="Shards in commit order.")
    streams: list[str] = Field(description="Streams the lease holds; a stream is in one lease at most.")
    attempt: int = Field(default=0, description="0 for the first grant, +1 for each re-grant.")
    granted_at_ms: int = Field(description="When this attempt was granted.")
    deadline_ms: int = Field(description="After this, a run still holding the lease is treated as dead.")
    sink_snapshot_at_grant: int | None = Field(
        description="Sink head when this attempt was granted (moved to the reconciled head at each re-grant); "
        "the commit check looks for an earlier commit of a shard from here on."
    )
    owner_run_id: str | None = Field(
        default=None, description="Run executing the lease in-process; None for a launched Borrower run."
    )
    phase: LeasePhase = Field(default=LeasePhase.GRANTING, description="Where the lease is in its lifecycle.")
    origin: Origin | None = Field(
        default=None, description="What its commits record of the group; None for leases of older versions."
    )


class ReplayTicket(BaseModel):
    """A replay of one window in flight: the Leader grants no shards of the window while it is held."""

    window: str = Field(description="The window's partition key.")
    window_start_ms: int = Field(description="Start of the window (UTC).")
    generation: int = Field(description="Raised for each replay of the window; the sink's replay fence follows it.")
    epoch: int = Field(description="Group epoch the replay began in; a reset fences it.")
    holder: str = Field(description="Who replays it (a run id); it beats for the ticket like a Borrower for a lease.")
    started_at_ms: int = Field(description="When the replay took the ticket.")


RATE_SAMPLES = 8


class StreamState(BaseModel):
    """Progress of the group on one stream."""

    position: int | None = Field(description="Source snapshot through which the stream is committed.")
    position_sequence: int = Field(default=0, description="Sequence number of the position snapshot.")
    committed_shards: int = Field(default=0, description="Shards committed so far.")
    committed_rows: int = Field(default=0, description="Source rows in committed shards.")
    recent: list[tuple[int, int]] = Field(
        default_factory=list,
        description=f"(tick time in ms, rows) of the last {RATE_SAMPLES} ticks that found shards of the stream "
        "committed: its recent rate, kept bounded.",
    )

    @property
    def rate_rows_s(self) -> float | None:
        """Rows per second over the recent ticks; None until two ticks found commits."""
        if len(self.recent) < 2 or self.recent[-1][0] <= self.recent[0][0]:
            return None
        return sum(rows for _, rows in self.recent[1:]) / ((self.recent[-1][0] - self.recent[0][0]) / 1000)


class RetiredStreams(BaseModel):
    """What the streams folded out of the registry (``retire_streams``) had done, kept as totals."""

    streams: int = Field(default=0, description="Streams retired so far (a stream that starts again counts again).")
    shards: int = Field(default=0, description="Shards they had committed.")
    rows: int = Field(default=0, description="Source rows in those shards.")


class GroupState(BaseModel):
    """Everything the Leader must remember about a group between ticks."""

    group: str
    source: str
    sink: str
    epoch: int = 0
    start_position: int | None = Field(description="Resolved start: the snapshot consumption begins after.")
    planned_through: int | None = Field(description="Source snapshot through which shards have been cut.")
    planned_through_sequence: int = Field(
        default=0, description="Sequence number of planned_through; 0 for the table's beginning or when not known."
    )
    sink_cursor: int | None = Field(default=None, description="Last sink snapshot reconciled.")
    streams: dict[str, StreamState] = Field(default_factory=dict)
    shards: dict[str, Shard] = Field(default_factory=dict, description="Cut and not yet committed.")
    leases: dict[str, Lease] = Field(default_factory=dict, description="Granted and not yet done.")
    leases_done: int = 0
    config_hash: str | None = Field(default=None, description="Hash of the config whose output the sink holds.")
    paused_at_ms: int | None = Field(
        default=None, description="When `icegroup pause` paused the group; while set the Leader grants nothing new."
    )
    config_changes: list[ConfigChange] = Field(
        default_factory=list, description="Config changes accepted under on_change: continue, oldest first."
    )
    windows_complete_through_ms: int | None = Field(
        default=None, description="End of the last window reported complete; None before the first."
    )
    replays: dict[str, ReplayTicket] = Field(
        default_factory=dict, description="Replays in flight, by window; their windows' shards wait."
    )
    retired: RetiredStreams = Field(
        default_factory=RetiredStreams, description="Totals of the streams folded out of ``streams``."
    )
    source_uuid: str | None = Field(
        default=None,
        description="The source table's UUID, recorded by the first tick that planned it: another table under the "
        "source's name (dropped and created again) holds none of the snapshots the positions name.",
    )

    @property
    def origin(self) -> Origin:
        """What the commits of leases granted now record."""
        mark = self.low_watermark()
        return Origin(
            start_position=self.start_position,
            config_hash=self.config_hash,
            config_version=len(self.config_changes),
            low_watermark=mark[0] if mark else None,
            low_watermark_sequence=mark[1] if mark else None,
        )

    def low_watermark(self) -> tuple[int | None, int] | None:
        """A snapshot (and its sequence number) through which every stream is committed; None if not known.

        A stream holding pending shards is committed through its position; every other stream has
        all its cut shards committed, so through the planning cursor. A rebuild from the sink plans
        from the newest low watermark its commits recorded, not from the group's start. A position
        whose sequence number is not known (0, but not the table's beginning) makes it unknown.
        """
        marks = [(self.planned_through, self.planned_through_sequence)]
        for name in {shard.stream for shard in self.shards.values()}:
            stream = self.streams.get(name)
            if stream is not None:
                marks.append((stream.position, stream.position_sequence))
        if any(snapshot is not None and sequence == 0 for snapshot, sequence in marks):
            return None
        return min(marks, key=lambda mark: mark[1])

    def stream_cursors(self) -> dict[str, int | None]:
        """Where the next shard of each stream starts: its last cut shard, else its position."""
        cursors: dict[str, int | None] = {name: s.position for name, s in self.streams.items()}
        for shard in sorted(self.shards.values(), key=lambda s: s.to_sequence):
            cursors[shard.stream] = shard.to_snapshot
        return cursors

    def is_idle(self) -> bool:
        """Nothing cut and waiting, nothing in flight."""
        return not self.shards and not self.leases


def add_shards(state: GroupState, shards: Iterable[Shard], through: int, through_sequence: int = 0) -> GroupState:
    """Record newly cut shards and move the planning cursor; re-adding a known shard is a no-op.

    A stream seen for the first time starts at the old planning cursor, so that is its position.
    """
    new = state.model_copy(deep=True)
    for shard in shards:
        new.shards.setdefault(shard.shard_id, shard)
        new.streams.setdefault(
            shard.stream, StreamState(position=shard.from_snapshot, position_sequence=state.planned_through_sequence)
        )
    new.planned_through = through
    new.planned_through_sequence = through_sequence
    return new


def apply_commits(
    state: GroupState, committed: Iterable[str], now_ms: int | None = None
) -> tuple[GroupState, list[Shard]]:
    """Mark shards committed, advance stream positions and retire leases with nothing left.

    Shards are applied in sequence order so a position only ever moves forward. With ``now_ms`` (the
    tick's time), each stream that committed rows records them in its bounded ``recent`` samples.
    """
    wanted = set(committed)
    new = state.model_copy(deep=True)
    done = sorted((s for s in new.shards.values() if s.shard_id in wanted), key=lambda s: s.to_sequence)
    for shard in done:
        stream = new.streams.setdefault(shard.stream, StreamState(position=shard.from_snapshot))
        if shard.to_sequence > stream.position_sequence:
            stream.position = shard.to_snapshot
            stream.position_sequence = shard.to_sequence
        stream.committed_shards += 1
        stream.committed_rows += shard.rows
        del new.shards[shard.shard_id]
    if now_ms is not None:
        for name in {shard.stream for shard in done}:
            rows = sum(shard.rows for shard in done if shard.stream == name)
            new.streams[name].recent = [*new.streams[name].recent, (now_ms, rows)][-RATE_SAMPLES:]
    for lease_id, lease in list(new.leases.items()):
        if not any(sid in new.shards for sid in lease.shard_ids):
            del new.leases[lease_id]
            new.leases_done += 1
    return new, done


def retire_streams(state: GroupState, now_ms: int, idle_ms: int) -> GroupState:
    """Fold out of the document the streams that are done: the registry grows with live streams only.

    A stream is done when nothing of it is cut or leased, it has committed nothing for ``idle_ms``,
    and its position is known and not past the planning cursor. Everything of it up to the cursor is then
    committed, so new data in it is cut from the cursor (``cut_shards``' start for an unknown
    stream), exactly where its own position would have put it. A stream whose position a reset or a
    rebuild left past the cursor stays: its floor keeps committed snapshots from being cut again.
    Its counts move to ``retired``, so the group's totals never go back.
    """
    if state.planned_through is not None and state.planned_through_sequence == 0:
        return state  # the cursor's sequence number is not known: nothing can be compared with it
    busy = {s.stream for s in state.shards.values()} | {n for lease in state.leases.values() for n in lease.streams}
    done = [
        name
        for name, stream in state.streams.items()
        if name not in busy
        and (stream.position is None or stream.position_sequence > 0)
        and stream.position_sequence <= state.planned_through_sequence
        and (stream.recent[-1][0] if stream.recent else 0) <= now_ms - idle_ms
    ]
    if not done:
        return state
    new = state.model_copy(deep=True)
    for name in done:
        stream = new.streams.pop(name)
        new.retired.streams += 1
        new.retired.shards += stream.committed_shards
        new.retired.rows += stream.committed_rows
    return new
