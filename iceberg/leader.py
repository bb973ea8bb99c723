"""One Leader tick: reconcile, check liveness, plan, assign, and commit the registry by CAS.

The tick is the same whether a Dagster sensor or the headless ``consume`` loop runs it. It takes the
run observer as a function, so this module knows nothing of Dagster. Everything it decides is held
back until the registry commit succeeds; a tick that loses the CAS has no effects at all.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from datetime import time as dt_time

from pyiceberg.catalog import Catalog
from pyiceberg.table import Table

from iceberg.assignment import assign_leases
from iceberg.dead_letter import STOPPED, DeadLetter, open_letters
from iceberg.errors import ConfigError, IcegroupError, SourceError
from iceberg.failpoints import failpoint
from iceberg.fencing import raise_fences
from iceberg.groups import GroupConfig, StartAtSnapshot, StartAtTimestamp
from iceberg.lineage import fence_key
from iceberg.liveness import LeaseAction, RunState, lease_action, regrant
from iceberg.planning import plan_increment
from iceberg.registry import commit_state, load_state
from iceberg.shards import Shard, cut_shards, window_label
from iceberg.sink_history import read_sink_history
from iceberg.state import GroupState, Lease, LeasePhase, add_shards, apply_commits
from iceberg.tables import load_optional, load_source, walk_back

log = logging.getLogger(__name__)

RunObserver = Callable[[Lease], RunState]


class GroupStopped(IcegroupError):
    """A poison shard stopped the group (``on_poison: stop``); it waits for ``icegroup redrive``."""


@dataclass
class TickResult:
    """What a tick decided; ``launch`` needs a Borrower now (new grants, re-grants, lost launches).

    ``terminate`` holds the revoked attempts whose runs were still alive past their deadline.
    """

    state: GroupState
    launch: list[Lease] = field(default_factory=list)
    terminate: list[Lease] = field(default_factory=list)
    parked: list[DeadLetter] = field(default_factory=list)
    stopped: list[DeadLetter] = field(default_factory=list)
    committed: list[Shard] = field(default_factory=list)
    new_shards: int = 0
    regranted: int = 0
    source_head: int | None = None
    elapsed_ms: float = 0.0

    @property
    def caught_up(self) -> bool:
        """Everything in the source up to its head is committed to the sink."""
        return self.state.is_idle() and self.state.planned_through == self.source_head

    def stop_message(self) -> str:
        """Why the group is stopped, naming each poison shard and the remedy."""
        shards = "; ".join(
            f"shard {d.shard_id} (stream {d.stream}, source snapshots {d.from_snapshot}..{d.to_snapshot}): {d.error}"
            for d in self.stopped
        )
        group = self.state.group
        return (
            f"group {group!r} is stopped by poison shards: {shards}. Fix the transform or the data, then run "
            f"`icegroup redrive {group}`"
        )


def resolve_start(table: Table, group: GroupConfig) -> int | None:
    """The snapshot a new group consumes after, from its ``start`` setting."""
    chain = list(walk_back(table, None))
    head = chain[0].snapshot_id if chain else None
    start = group.start
    if start == "latest" or not chain:
        return head
    if start == "earliest":
        return chain[-1].parent_snapshot_id
    if isinstance(start, StartAtSnapshot):
        for snapshot in chain:
            if snapshot.snapshot_id == start.snapshot_id:
                return snapshot.parent_snapshot_id
        raise SourceError(
            f"group {group.name!r}: start.snapshot_id: {start.snapshot_id} is not a snapshot on the main "
            f"branch of {group.source!r}; pick one from its snapshots table or use earliest/latest"
        )
    if isinstance(start, StartAtTimestamp):
        cutoff = int(start.timestamp.timestamp() * 1000)
        later = [s for s in chain if s.timestamp_ms >= cutoff]
        return later[-1].parent_snapshot_id if later else head
    raise SourceError(f"group {group.name!r}: start: unsupported value {start!r}")


def initial_state(table: Table, group: GroupConfig) -> GroupState:
    """State of a group that has never ticked."""
    if table.format_version < 2:
        raise SourceError(
            f"group {group.name!r}: source {group.source!r} is an Iceberg format-version 1 table, whose "
            "snapshots carry no sequence numbers to order streams by; upgrade it with "
            "ALTER TABLE ... SET TBLPROPERTIES ('format-version'='2')"
        )
    position = resolve_start(table, group)
    return GroupState(
        group=group.name, source=group.source, sink=group.sink, start_position=position, planned_through=position
    )


def check_windows(group: GroupConfig, shards: list[Shard]) -> None:
    """Every shard must fall in a sink partition; checked before anything is committed."""
    first = int(datetime.combine(group.window_start, dt_time(), tzinfo=UTC).timestamp() * 1000)
    early = [s for s in shards if s.window_start_ms < first]
    if early:
        raise SourceError(
            f"group {group.name!r}: window_start: {group.window_start} is after source snapshot "
            f"{early[0].to_snapshot}, so its rows have no sink partition; set window_start to "
            f"{window_label(early[0].window_start_ms, 'day')} or earlier"
        )


def check_drift(state: GroupState, group: GroupConfig) -> None:
    """The registry remembers what the group consumed from and wrote to; a changed config must not reuse it."""
    for name, kept, now in (("source", state.source, group.source), ("sink", state.sink, group.sink)):
        if kept != now:
            raise ConfigError(
                f"group {group.name!r}: {name}: the config says {now!r} but the group's registry was built for "
                f"{kept!r}. Give the changed group a new name, or restore {name}: {kept}"
            )


def park(state: GroupState, lease: Lease, letters: dict[str, DeadLetter]) -> Lease:
    """The lease cut down to its poisoned streams, parked, at a new attempt.

    Its other streams' pending shards go back to the pool, so they are granted again and go on. The
    attempt moves on (and its fence with it), so the Borrower that gave up commits nothing more.
    """
    pending = [sid for sid in lease.shard_ids if sid in state.shards]
    streams = {state.shards[sid].stream for sid in pending if sid in letters}
    return lease.model_copy(
        update={
            "phase": LeasePhase.PARKED,
            "attempt": lease.attempt + 1,
            "shard_ids": [sid for sid in pending if state.shards[sid].stream in streams],
            "streams": sorted(streams),
        }
    )


def tick(
    catalog: Catalog,
    group: GroupConfig,
    observe: RunObserver,
    owner_run_id: str | None = None,
    now_ms: int | None = None,
) -> TickResult:
    """Run one Leader tick for ``group``; raises ``RegistryConflict`` if another Leader won."""
    started = time.perf_counter()
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    loaded = load_state(catalog, group.name)
    if loaded.state is not None:
        check_drift(loaded.state, group)
    source = load_source(catalog, group.source)
    before = loaded.state or initial_state(source, group)

    observed = {lease_id: observe(lease) for lease_id, lease in before.leases.items()}
    history = read_sink_history(catalog, group.sink, group.name, before.sink_cursor)
    state, committed = apply_commits(before, history.shard_ids())
    letters = {sid: d for sid, d in open_letters(catalog, group.name).items() if sid in state.shards}
    state.sink_cursor = history.head if history.head is not None else state.sink_cursor
    progressed = {c.lease_id for c in history.commits}
    for lease_id, lease in state.leases.items():
        if lease_id in progressed:
            state.leases[lease_id] = lease.model_copy(update={"deadline_ms": now_ms + group.lease_timeout_s * 1000})

    launch: list[Lease] = []
    terminate: list[Lease] = []
    fences: dict[str, int] = {}
    for lease_id, lease in list(state.leases.items()):
        poisoned = any(sid in letters for sid in lease.shard_ids)
        decision = lease_action(lease, observed.get(lease_id, RunState.MISSING), now_ms, poisoned)
        if decision.action is LeaseAction.REGRANT:
            if decision.terminate:
                terminate.append(lease)
            state.leases[lease_id] = regrant(lease, now_ms, group.lease_timeout_s, owner_run_id, history.head)
            fences[fence_key(group.name, lease_id)] = lease.attempt + 1
            launch.append(state.leases[lease_id])
            log.warning(
                "group %s: lease %s attempt %d %s (%s); re-granting as attempt %d",
                group.name, lease_id, lease.attempt, decision.phase.value, decision.reason, lease.attempt + 1,
            )  # fmt: skip
            continue
        if decision.action is LeaseAction.PARK:
            state.leases[lease_id] = park(state, lease, letters)
            fences[fence_key(group.name, lease_id)] = lease.attempt + 1
            log.warning("group %s: lease %s parked: %s", group.name, lease_id, decision.reason)
            continue
        if decision.phase is not lease.phase:
            state.leases[lease_id] = lease.model_copy(update={"phase": decision.phase})
        if decision.action is LeaseAction.LAUNCH:
            launch.append(lease)
    regranted = sum(1 for lease in launch if lease.attempt > before.leases[lease.lease_id].attempt)
    failpoint("leader.after_liveness")

    plan = plan_increment(source, state.planned_through, group)
    if plan.skipped:
        log.info("group %s: ignored %d replace/skipped snapshots", group.name, len(plan.skipped))
    new_shards: list[Shard] = []
    if plan.through is not None:
        new_shards = cut_shards(
            group=group.name,
            epoch=state.epoch,
            snapshots=plan.appends,
            files=plan.files,
            stream_cursors=state.stream_cursors(),
            plan_from=state.planned_through,
            caps=group.shard_caps,
            window=group.replay_window,
        )
        check_windows(group, new_shards)
        state = add_shards(state, new_shards, plan.through.snapshot_id)

    stopped = [d for d in letters.values() if d.action == STOPPED]
    grants = [] if stopped else assign_leases(state, group, now_ms, history.head, owner_run_id)
    for lease in grants:
        state.leases[lease.lease_id] = lease
    launch.extend(grants)

    if fences:
        sink = load_optional(catalog, group.sink)
        if sink is not None:
            raise_fences(sink, fences)
        failpoint("leader.after_fence")
    if loaded.state is None or state != before:
        commit_state(loaded, state)
        failpoint("leader.after_registry")
    head = source.current_snapshot()
    return TickResult(
        state=state,
        launch=launch,
        terminate=terminate,
        parked=[d for d in letters.values() if d.action != STOPPED],
        stopped=stopped,
        committed=committed,
        new_shards=len(new_shards),
        regranted=regranted,
        source_head=head.snapshot_id if head else None,
        elapsed_ms=(time.perf_counter() - started) * 1000,
    )
