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

from pyiceberg.catalog import Catalog
from pyiceberg.table import Table

from iceberg.assignment import assign_leases
from iceberg.errors import SourceError
from iceberg.groups import GroupConfig, StartAtSnapshot, StartAtTimestamp
from iceberg.liveness import LeaseAction, RunState, lease_action, regrant
from iceberg.planning import plan_increment
from iceberg.registry import commit_state, load_state
from iceberg.shards import Shard, cut_shards
from iceberg.sink_history import read_sink_history
from iceberg.state import GroupState, Lease, add_shards, apply_commits
from iceberg.tables import load_source, walk_back

log = logging.getLogger(__name__)

RunObserver = Callable[[Lease], RunState]


@dataclass
class TickResult:
    """What a tick decided; ``launch`` needs a Borrower now (new grants, re-grants, lost launches)."""

    state: GroupState
    launch: list[Lease] = field(default_factory=list)
    committed: list[Shard] = field(default_factory=list)
    new_shards: int = 0
    regranted: int = 0
    committed_registry: bool = False
    source_head: int | None = None
    elapsed_ms: float = 0.0

    @property
    def caught_up(self) -> bool:
        """Everything in the source up to its head is committed to the sink."""
        return self.state.is_idle() and self.state.planned_through == self.source_head


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
    position = resolve_start(table, group)
    sequence = 0
    if position is not None:
        snapshot = table.snapshot_by_id(position)
        sequence = snapshot.sequence_number or 0 if snapshot else 0
    return GroupState(
        group=group.name,
        source=group.source,
        sink=group.sink,
        start_position=position,
        planned_through=position,
        planned_sequence=sequence,
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
    source = load_source(catalog, group.source)
    before = loaded.state or initial_state(source, group)

    observed = {lease_id: observe(lease) for lease_id, lease in before.leases.items()}
    history = read_sink_history(catalog, group.sink, group.name, before.sink_cursor)
    state, committed = apply_commits(before, history.shard_ids())
    state.sink_cursor = history.head if history.head is not None else state.sink_cursor

    launch: list[Lease] = []
    regranted = 0
    for lease_id, lease in list(state.leases.items()):
        action = lease_action(lease, observed.get(lease_id, RunState.MISSING), now_ms)
        if action is LeaseAction.REGRANT:
            state.leases[lease_id] = regrant(lease, now_ms, group.lease_timeout_s, owner_run_id)
            launch.append(state.leases[lease_id])
            regranted += 1
            log.warning("group %s: re-granting lease %s as attempt %d", group.name, lease_id, lease.attempt + 1)
        elif action is LeaseAction.LAUNCH:
            launch.append(lease)

    plan = plan_increment(source, state.planned_through, group)
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
        state = add_shards(state, new_shards, plan.through.snapshot_id, plan.through.sequence_number)

    grants = assign_leases(state, group, now_ms, history.head, owner_run_id)
    for lease in grants:
        state.leases[lease.lease_id] = lease
    launch.extend(grants)

    changed = loaded.state is None or state != before
    if changed:
        commit_state(loaded, state)
    head = source.current_snapshot()
    return TickResult(
        state=state,
        launch=launch,
        committed=committed,
        new_shards=len(new_shards),
        regranted=regranted,
        committed_registry=changed,
        source_head=head.snapshot_id if head else None,
        elapsed_ms=(time.perf_counter() - started) * 1000,
    )
