"""The Leader tick's decisions, phase by phase, as pure functions of the group's state.

A tick (``iceberg/leader.py``) is reconcile -> liveness -> plan -> grant -> fence and commit. The
tick reads the sink's commits, its Borrowers' run states, the dead letters and the source's new
snapshots; the phases here turn what it read into the next state and say what changed. None of
them touches a catalog, so each is tested on its own, and the tick's I/O stays in one place.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from datetime import time as dt_time

from icegroup.iceberg.errors import SourceError
from icegroup.iceberg.protocol.assignment import assign_leases
from icegroup.iceberg.protocol.borrower import taken
from icegroup.iceberg.protocol.dead_letters import park_poisoned_lease
from icegroup.iceberg.protocol.fences import fence_key
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.liveness import Decision, LeaseAction, RunState, holder_of, lease_action, regrant
from icegroup.iceberg.protocol.shards import FileEntry, Shard, SnapshotInfo, cut_shards, window_label
from icegroup.iceberg.protocol.sink_commit import SinkCommit
from icegroup.iceberg.protocol.state import GroupState, Lease, add_shards, apply_commits


@dataclass(frozen=True)
class Reconciled:
    """The state once the sink's new commits are applied, and the shards they committed."""

    state: GroupState
    committed: list[Shard]


@dataclass
class Liveness:
    """The state once dead, parked and re-driven leases are dealt with.

    ``fences`` are the sink properties to raise before the registry commit: each revoked or
    parked lease's fence moves to its next attempt, so the attempt it replaces can no longer commit.
    """

    state: GroupState
    launch: list[Lease] = field(default_factory=list)
    terminate: list[Lease] = field(default_factory=list)
    fences: dict[str, int] = field(default_factory=dict)
    revoked: list[tuple[Lease, Decision]] = field(default_factory=list)
    parked: list[tuple[Lease, Decision]] = field(default_factory=list)


@dataclass(frozen=True)
class Planned:
    """The state with the newly cut shards added and the planning cursor moved."""

    state: GroupState
    new_shards: list[Shard]


@dataclass(frozen=True)
class Granted:
    """The state with new leases for the free Borrower slots."""

    state: GroupState
    grants: list[Lease]


def reconcile(
    state: GroupState, commits: Iterable[SinkCommit], sink_head: int | None, now_ms: int, lease_timeout_s: int
) -> Reconciled:
    """Apply the sink commits found since the last tick: positions move, finished leases retire.

    A lease that committed since the last tick is alive, so its deadline moves on.
    """
    found = list(commits)
    new, committed = apply_commits(state, (shard.shard_id for commit in found for shard in commit.shards), now_ms)
    if sink_head is not None:
        new.sink_cursor = sink_head
    progressed = {commit.lease_id for commit in found}
    for lease_id, lease in new.leases.items():
        if lease_id in progressed:
            new.leases[lease_id] = lease.model_copy(update={"deadline_ms": now_ms + lease_timeout_s * 1000})
    return Reconciled(state=new, committed=committed)


def check_liveness(
    state: GroupState,
    group: GroupConfig,
    observed: Mapping[str, RunState],
    poisoned: Collection[str],
    now_ms: int,
    sink_head: int | None,
    owner_run_id: str | None = None,
    beats: Mapping[str, int] | None = None,
    gone: Collection[str] = (),
) -> Liveness:
    """Decide every lease's next step from its run's state, its heartbeat, its deadline and the poisoned shards.

    Dead leases are revoked and re-granted at the next attempt; leases with a poisoned shard are
    cut down to the poisoned streams and parked; leases whose run never started are launched again.
    ``observed`` maps a lease id to its run's state (missing: no run seen); ``beats`` maps a holder
    (``holder_of``) to the time of its last heartbeat; ``gone`` holds the holders whose process ended.
    """
    beats = beats or {}
    new = state.model_copy(deep=True)
    out = Liveness(state=new)
    for lease_id, lease in state.leases.items():
        is_poisoned = any(sid in poisoned for sid in lease.shard_ids)
        run = observed.get(lease_id, RunState.MISSING)
        holder = holder_of(lease)
        decision = lease_action(
            lease, run, now_ms, is_poisoned, beats.get(holder), group.session_timeout_s, holder_gone=holder in gone
        )
        if decision.action is LeaseAction.REGRANT:
            if decision.terminate:
                out.terminate.append(lease)
            new.leases[lease_id] = regrant(lease, now_ms, group.lease_timeout_s, owner_run_id, sink_head, new.origin)
            out.fences[fence_key(group.name, lease_id)] = lease.attempt + 1
            out.launch.append(new.leases[lease_id])
            out.revoked.append((lease, decision))
        elif decision.action is LeaseAction.PARK:
            new.leases[lease_id] = park_poisoned_lease(state, lease, poisoned)
            out.fences[fence_key(group.name, lease_id)] = lease.attempt + 1
            out.parked.append((lease, decision))
        else:
            if decision.phase is not lease.phase:
                new.leases[lease_id] = lease.model_copy(update={"phase": decision.phase})
            if decision.action is LeaseAction.LAUNCH and lease.owner_run_id is None and owner_run_id is not None:
                # The tick's own process (``consume``) is a Borrower that starts now: it takes the lease.
                new.leases[lease_id] = taken(lease, owner_run_id, now_ms, group.lease_timeout_s)
                out.launch.append(new.leases[lease_id])
            elif decision.action is LeaseAction.LAUNCH:
                out.launch.append(new.leases[lease_id])
    return out


def check_windows(group: GroupConfig, shards: Iterable[Shard]) -> None:
    """Every shard must fall in a sink partition; checked before anything is committed."""
    first = int(datetime.combine(group.window_start, dt_time(), tzinfo=UTC).timestamp() * 1000)
    early = [s for s in shards if s.window_start_ms < first]
    if early:
        raise SourceError(
            f"group {group.name!r}: window_start: {group.window_start} is after source snapshot "
            f"{early[0].to_snapshot}, so its rows have no sink partition; set window_start to "
            f"{window_label(early[0].window_start_ms, 'day')} or earlier"
        )


def cut(
    state: GroupState,
    group: GroupConfig,
    appends: list[SnapshotInfo],
    files: list[FileEntry],
    through: int | None,
    through_sequence: int = 0,
    read_at: int | None = None,
    min_row_id: int | None = None,
) -> Planned:
    """Cut what planning read into shards and move the planning cursor to ``through``.

    ``appends`` and ``files`` are the append snapshots after the cursor and the data files they
    added; ``through`` is the last snapshot planned (None: nothing new, the state stays as it is)
    and ``through_sequence`` its sequence number. ``read_at``: the files' snapshots have expired,
    and the shards read them as of that snapshot (``iceberg/history_gap.py``); ``min_row_id``: and
    only their rows from that row id on are new.
    """
    if through is None:
        return Planned(state=state, new_shards=[])
    shards = cut_shards(
        group=group.name,
        epoch=state.epoch,
        snapshots=appends,
        files=files,
        stream_cursors=state.stream_cursors(),
        plan_from=state.planned_through,
        caps=group.shard_caps,
        window=group.replay_window,
        floors={name: stream.position_sequence for name, stream in state.streams.items()},
        read_at=read_at,
        min_row_id=min_row_id,
    )
    check_windows(group, shards)
    return Planned(state=add_shards(state, shards, through, through_sequence), new_shards=shards)


def grant(
    state: GroupState,
    group: GroupConfig,
    now_ms: int,
    sink_head: int | None,
    stopped: bool,
    owner_run_id: str | None = None,
) -> Granted:
    """Grant pending shards to the free Borrower slots; a stopped or paused group grants nothing."""
    if stopped:
        return Granted(state=state, grants=[])
    grants = assign_leases(state, group, now_ms, sink_head, owner_run_id)
    new = state.model_copy(deep=True)
    for lease in grants:
        new.leases[lease.lease_id] = lease
    return Granted(state=new, grants=grants)
