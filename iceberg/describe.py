"""What ``icegroup describe`` shows: per stream, position, head, lag and leases in flight.

Read-only: it plans the not-yet-planned snapshots the way a tick would, but commits nothing.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from pyiceberg.catalog import Catalog
from pyiceberg.table import Table

from icegroup.iceberg.cascade import followed
from icegroup.iceberg.errors import HistoryGap, UsageError
from icegroup.iceberg.history_gap import plan_source
from icegroup.iceberg.protocol.durations import format_duration, format_time
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.leader import reconcile
from icegroup.iceberg.protocol.liveness import Hold, hold_of
from icegroup.iceberg.protocol.renewal import renewed
from icegroup.iceberg.protocol.retention import DEFAULT_MAX_AGE_MS, staleness
from icegroup.iceberg.protocol.shards import Shard
from icegroup.iceberg.protocol.source_branch import ref_name
from icegroup.iceberg.protocol.state import GroupState
from icegroup.iceberg.protocol.status import counts_of, status_of, unknown_stream_position
from icegroup.iceberg.rebuild import sync_tables
from icegroup.iceberg.shards import added_files, blocked_at, snapshot_info
from icegroup.iceberg.store.dead_letters import open_in
from icegroup.iceberg.store.group_tables import load_group_tables
from icegroup.iceberg.store.heartbeats import read_beats
from icegroup.iceberg.store.registrations import read_registrations
from icegroup.iceberg.store.registry import load_state, state_as_of
from icegroup.iceberg.store.renewals import read_renewals
from icegroup.iceberg.store.source_branch import read_ref
from icegroup.iceberg.store.tables import load_source

MAX_AGE_PROPERTY = "history.expire.max-snapshot-age-ms"


@dataclass
class StreamView:
    """One stream of the group."""

    stream: str
    position: int | None
    head: int | None
    lag_snapshots: int
    lag_rows: int
    committed_shards: int
    committed_rows: int
    leases: list[str] = field(default_factory=list)
    oldest_unconsumed_ms: int | None = None
    rate_rows_s: float | None = None

    def age_at(self, now_ms: int) -> float | None:
        """Lag in time: the age of the oldest source commit the stream has not committed; None without lag."""
        return None if self.oldest_unconsumed_ms is None else max(now_ms - self.oldest_unconsumed_ms, 0) / 1000


@dataclass
class GroupView:
    """The whole group, as ``describe`` prints it."""

    group: str
    source: str
    sink: str
    epoch: int
    source_head: int | None
    planned_through: int | None
    pending_shards: int
    leases_in_flight: int
    leases_done: int
    unplanned_snapshots: int
    streams: list[StreamView]
    holds: list[Hold] = field(default_factory=list)
    retired_streams: int = 0
    retired_rows: int = 0
    leases_parked: int = 0
    as_of_ms: int = 0
    status: str = "caught up"
    historical: bool = False
    replays: list[str] = field(default_factory=list)
    retention: list[str] = field(default_factory=list)
    dead_letters: int = 0

    def hold_lines(self) -> list[str]:
        """Each lease in flight: its holder, its last heartbeat, and when it is re-granted if silent.

        A view of the past has no heartbeats (they are not kept); it shows each held lease's deadline,
        and what a lease nobody executed waited for.
        """
        if self.historical:
            return [
                h.describe(self.as_of_ms)
                if h.waits is not None
                else f"lease {h.lease_id}#{h.attempt} ({', '.join(h.streams)}) held by {h.holder}; deadline "
                f"{datetime.fromtimestamp(h.deadline_ms / 1000, tz=UTC).isoformat(timespec='seconds')}"
                for h in self.holds
            ]
        return [hold.describe(self.as_of_ms) for hold in self.holds]

    @property
    def lag_rows(self) -> int:
        """Rows appended to the source that the group has not committed yet."""
        return sum(s.lag_rows for s in self.streams)

    @property
    def lag_age_s(self) -> float | None:
        """The group's lag in time: the oldest unconsumed source commit of any stream, as of the view."""
        ages = [age for s in self.streams if (age := s.age_at(self.as_of_ms)) is not None]
        return max(ages, default=None)

    @property
    def lag_snapshots(self) -> int:
        """Source snapshots with rows the group has not committed yet (counted once per stream)."""
        return sum(s.lag_snapshots for s in self.streams)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form, for ``--json``."""
        data = asdict(self)
        data["lag_rows"] = self.lag_rows
        data["lag_snapshots"] = self.lag_snapshots
        data["lag_age_s"] = self.lag_age_s
        for stream, view in zip(data["streams"], self.streams, strict=True):
            stream["lag_age_s"] = view.age_at(self.as_of_ms)
        return data


def oldest(snapshots: set[int], committed_at: dict[int, int]) -> int | None:
    """When the oldest of these source snapshots was committed (from the metadata; an expired one is left out)."""
    return min((committed_at[snap] for snap in snapshots if snap in committed_at), default=None)


def describe_group(catalog: Catalog, group: GroupConfig) -> GroupView:
    """Describe a group as a tick would see it now, committing nothing.

    Its registry is reconciled with the sink's commits since the last tick, so a stream whose rows
    are already in the sink shows them, and a dry-run plan adds what arrived since then. A registry
    that is missing or behind the sink shows as the next tick would rebuild it.
    """
    tables = load_group_tables(catalog, group, load_state(catalog, group.name))
    source = tables.source
    now_ms = int(time.time() * 1000)
    synced = sync_tables(tables, fence=False)
    history = synced.history
    reconciled = reconcile(synced.state, history.commits, history.head, now_ms, group.lease_timeout_s).state
    state = renewed(reconciled, read_renewals(catalog, group.name), group.lease_timeout_s)
    letters = open_in(tables.open_dead_letters(), catalog.name)
    unconsumed = Unconsumed()
    for shard in state.shards.values():
        unconsumed.add(shard.stream, shard.snapshots, shard.rows, (shard.to_sequence, shard.to_snapshot))
    plan = plan_source(source, state.planned_through, group.model_copy(update={"non_append": "skip"}))
    try:
        stop = blocked_at(source, state.planned_through, group, lambda: followed(tables.sink, group.name))
    except HistoryGap:  # no snapshots to stop at: a stop is a rewrite across the gap, which the plan holds
        stop = (plan.blocked, False) if plan.blocked is not None else None
    blocked, appends_ahead = stop if stop is not None else (None, False)
    sequence = {s.snapshot_id: s.sequence_number for s in plan.appends}
    floors = {name: stream.position_sequence for name, stream in state.streams.items()}
    for entry in plan.files:
        if sequence[entry.snapshot_id] <= floors.get(entry.stream, 0):
            continue  # committed already: planning after a rebuild starts over from the group's start
        at = (sequence[entry.snapshot_id], entry.snapshot_id)
        unconsumed.add(entry.stream, [entry.snapshot_id], entry.record_count, at)
    replayed = (
        source.snapshot_by_id(blocked.snapshot_id) if blocked and blocked.followable and blocked.snapshot_id else None
    )
    if replayed is not None:  # an upstream replay the group stopped at: its new rows are what following it consumes
        info = snapshot_info(replayed)
        for entry in added_files(source, [info]):
            unconsumed.add(
                entry.stream, [entry.snapshot_id], entry.record_count, (info.sequence_number, entry.snapshot_id)
            )
    beats = {holder: b.beat_ms for holder, b in read_beats(catalog, group.name).items()}
    redrive = f"icegroup redrive {group.name} --execute"
    streams = stream_views(state, unconsumed, {s.snapshot_id: s.timestamp_ms for s in source.snapshots()})
    head = source.current_snapshot()
    return GroupView(
        **counts_of(group, state),
        source_head=head.snapshot_id if head else None,
        unplanned_snapshots=len(plan.appends) + plan.remaining,
        streams=streams,
        holds=[
            hold_of(lease, beats, group.session_timeout_s, redrive if set(lease.shard_ids) & set(letters) else None)
            for lease in state.leases.values()
        ],
        as_of_ms=now_ms,
        status=status_of(state, letters, unconsumed.lag_snapshots(), blocked, appends_ahead),
        dead_letters=len(set(letters) & set(state.shards)),
        replays=replay_lines(state, beats, now_ms),
        retention=retention_lines(source, group, streams, now_ms),
    )


@dataclass
class Unconsumed:
    """What each stream has not consumed yet: its source snapshots, its rows, and its newest (sequence, snapshot)."""

    snapshots: dict[str, set[int]] = field(default_factory=lambda: defaultdict(set))
    rows: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    heads: dict[str, tuple[int, int]] = field(default_factory=dict)

    def add(self, stream: str, snapshots: Iterable[int], rows: int, at: tuple[int, int]) -> None:
        """Count ``rows`` of ``snapshots`` as not consumed by ``stream``, the newest at (sequence, snapshot) ``at``."""
        self.snapshots[stream].update(snapshots)
        self.rows[stream] += rows
        self.heads[stream] = max(self.heads.get(stream, (0, 0)), at)

    def lag_snapshots(self) -> int:
        """The source snapshots not consumed, over every stream."""
        return sum(len(snapshots) for snapshots in self.snapshots.values())


def stream_views(state: GroupState, unconsumed: Unconsumed, committed_at: dict[int, int]) -> list[StreamView]:
    """Each stream the registry holds or has not consumed from: its position, head, lag and leases in flight."""
    leases_by_stream: dict[str, list[str]] = defaultdict(list)
    for lease in state.leases.values():
        for stream in lease.streams:
            leases_by_stream[stream].append(f"{lease.lease_id}#{lease.attempt}")
    views = []
    for name in sorted(set(state.streams) | set(unconsumed.snapshots)):
        progress = state.streams.get(name)
        position = progress.position if progress else unknown_stream_position(state)
        views.append(
            StreamView(
                stream=name,
                position=position,
                head=unconsumed.heads[name][1] if name in unconsumed.heads else position,
                lag_snapshots=len(unconsumed.snapshots[name]),
                lag_rows=unconsumed.rows[name],
                committed_shards=progress.committed_shards if progress else 0,
                committed_rows=progress.committed_rows if progress else 0,
                leases=leases_by_stream[name],
                oldest_unconsumed_ms=oldest(unconsumed.snapshots[name], committed_at),
                rate_rows_s=progress.rate_rows_s if progress else None,
            )
        )
    return views


def ref_line(source: Table, group: str) -> str:
    """What the group's source branch keeps against any engine's expiry (``iceberg/protocol/source_branch.py``)."""
    ref = read_ref(source, group)
    if ref is None:
        return (
            f"source branch {ref_name(group)}: none (the Leader sets it at its next tick; icegroup expire run "
            "elsewhere removes it once the group's registration lapsed)"
        )
    before = f" and the {ref.keep - 1} before it" if ref.keep > 1 else ""
    return (
        f"source branch {ref_name(group)}: at snapshot {ref.snapshot_id}; any engine's expire_snapshots keeps it"
        f"{before}. Newer snapshots it does not keep: if they expire, the group reads their rows from the files "
        "live now (a compaction among them stops it)"
    )


def retention_lines(source: Table, group: GroupConfig, streams: list[StreamView], now_ms: int) -> list[str]:
    """What keeps the group's history, and a forecast: would an expiry by age take its position before it catches up?

    ``icegroup expire`` never takes what the group needs while its registration is live. Expiry
    outside icegroup goes by the source's ``history.expire.max-snapshot-age-ms`` (Iceberg's default
    5 days); the forecast compares when that would take the oldest unconsumed snapshot with when the
    lag clears at the recent rate.
    """
    lines = []
    registration = read_registrations(source).get(group.name)
    if registration is None:
        lines.append("retention: not registered on the source yet (the Leader registers it at its next tick)")
    else:
        lapses = registration.seen_ms + registration.inactive_after_ms
        horizon = format_duration(group.replay_retention)
        lines.append(
            f"retention: icegroup expire keeps from source sequence {registration.pin_sequence} and {horizon} "
            f"back (registered; lapses {format_time(lapses)} unless a Leader ticks before)"
        )
    lines.append(ref_line(source, group.name))
    max_age = int(source.properties.get(MAX_AGE_PROPERTY, DEFAULT_MAX_AGE_MS))
    pending = [s.oldest_unconsumed_ms for s in streams if s.oldest_unconsumed_ms is not None]
    rates = [s.rate_rows_s for s in streams if s.rate_rows_s]
    lag = sum(s.lag_rows for s in streams)
    lines.append(staleness(min(pending, default=None), max_age, lag, sum(rates) or None, now_ms).line(max_age))
    return lines


def replay_lines(state: GroupState, beats: dict[str, int], now_ms: int) -> list[str]:
    """Each replay in flight: its window, generation, holder, and when its holder last beat."""
    lines = []
    for ticket in sorted(state.replays.values(), key=lambda t: t.window):
        since = datetime.fromtimestamp(ticket.started_at_ms / 1000, tz=UTC).isoformat(timespec="seconds")
        beat = beats.get(ticket.holder)
        heard = f"last heartbeat {(now_ms - beat) / 1000:.0f}s ago" if beat is not None else "no heartbeat yet"
        lines.append(
            f"window {ticket.window}: generation {ticket.generation} by {ticket.holder} since {since}; {heard}"
        )
    return lines


def describe_as_of(catalog: Catalog, group: GroupConfig, at_ms: int) -> GroupView:
    """The group as its registry held it at ``at_ms``: positions, pending shards and who held which lease.

    It shows the registry's own state then, not reconciled with the sink; lag counts the shards
    that were cut and not yet committed, and the source head is the source snapshot current then.
    """
    found = state_as_of(catalog, group.name, at_ms)
    if found is None:
        at = datetime.fromtimestamp(at_ms / 1000, tz=UTC).isoformat(timespec="seconds")
        raise UsageError(f"--as-of: group {group.name!r} had no registry yet at {at}; pick a later time")
    state, committed_ms = found
    source = load_source(catalog, group.source)
    then = [s for s in source.snapshots() if s.timestamp_ms <= at_ms]
    pending: dict[str, list[Shard]] = defaultdict(list)
    for shard in state.shards.values():
        pending[shard.stream].append(shard)
    leases_by_stream: dict[str, list[str]] = defaultdict(list)
    for lease in state.leases.values():
        for stream in lease.streams:
            leases_by_stream[stream].append(f"{lease.lease_id}#{lease.attempt}")
    streams = []
    for name in sorted(set(state.streams) | set(pending)):
        progress = state.streams.get(name)
        position = progress.position if progress else unknown_stream_position(state)
        cut = sorted(pending[name], key=lambda s: s.to_sequence)
        streams.append(
            StreamView(
                stream=name,
                position=position,
                head=cut[-1].to_snapshot if cut else position,
                lag_snapshots=len({sid for s in cut for sid in s.snapshots}),
                lag_rows=sum(s.rows for s in cut),
                committed_shards=progress.committed_shards if progress else 0,
                committed_rows=progress.committed_rows if progress else 0,
                leases=leases_by_stream[name],
            )
        )
    lag = sum(s.lag_snapshots for s in streams)
    return GroupView(
        **counts_of(group, state),
        source_head=max(then, key=lambda s: s.timestamp_ms).snapshot_id if then else None,
        unplanned_snapshots=0,
        streams=streams,
        holds=[hold_of(lease, {}, group.session_timeout_s) for lease in state.leases.values()],
        as_of_ms=committed_ms,
        status=status_of(state, {}, lag),
        historical=True,
    )
