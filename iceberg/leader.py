"""The Leader tick: reconcile -> liveness -> plan -> grant -> record lineage -> fence and commit.

Planning waits while the group is paused or stopped, and while ``max_pending_shards`` shards are
cut and not committed: what it cuts then could not be granted, and would only grow the registry.
For the same reason, streams that are done (nothing pending, idle for ``retire_streams_after``)
are folded out of the registry document (``retire_streams``).

Reconciling first checks that the registry agrees with the sink. A registry that is missing while
the sink holds the group's commits, or that is behind the sink (restored from an older backup), is
rebuilt from the sink's commits in a new epoch (``iceberg/rebuild.py``). A new group starts as
``iceberg/start.py`` resolves it.

The tick is the same whether a Dagster sensor or the headless ``consume`` loop runs it. It takes the
run observer as a function, so this module knows nothing of Dagster. Each phase's decisions are the
pure functions of ``iceberg/protocol/leader.py``; this module does the reads and the writes around
them. Everything a tick decides is held back until the registry commit succeeds, so a tick that
loses the compare-and-swap has no effects at all.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from pyiceberg.catalog import Catalog
from pyiceberg.table import Table

from icegroup.iceberg.cascade import followed
from icegroup.iceberg.errors import BorrowerOutdated, SourceBlocked
from icegroup.iceberg.failpoints import failpoint
from icegroup.iceberg.history_gap import plan_source
from icegroup.iceberg.protocol.completion import MAX_PER_TICK, complete_windows, window_width_ms
from icegroup.iceberg.protocol.dead_letters import STOPPED, DeadLetter
from icegroup.iceberg.protocol.drift import check_config, check_drift, check_filter, recorded_table, refuse_other_table
from icegroup.iceberg.protocol.fences import replay_fence_key
from icegroup.iceberg.protocol.freshness import oldest_unconsumed_ms
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.leader import (
    Liveness,
    Planned,
    check_liveness,
    cut,
    grant,
    reconcile,
)
from icegroup.iceberg.protocol.lineage import WindowProvenance, window_provenance
from icegroup.iceberg.protocol.liveness import RunState
from icegroup.iceberg.protocol.replay import expire_replays
from icegroup.iceberg.protocol.shards import Shard, snapshot_range, window_label
from icegroup.iceberg.protocol.state import GroupState, Lease, retire_streams
from icegroup.iceberg.rebuild import Synced, sync_tables
from icegroup.iceberg.store.dead_letters import open_in
from icegroup.iceberg.store.fences import prune_fences, raise_fences
from icegroup.iceberg.store.group_tables import GroupTables, load_group_tables
from icegroup.iceberg.store.heartbeats import beats_of_holders
from icegroup.iceberg.store.lineage import entries, is_in, record_lineage
from icegroup.iceberg.store.registrations import register
from icegroup.iceberg.store.registry import commit_state, load_state
from icegroup.iceberg.store.renewals import renewals_applied
from icegroup.iceberg.store.source_branch import keep_ref
from icegroup.iceberg.store.tables import load_optional, table_uuid

log = logging.getLogger(__name__)

RunObserver = Callable[[Lease], RunState]


@dataclass
class TickResult:
    """What a tick decided; ``launch`` needs a Borrower now (new grants, re-grants, lost launches).

    ``complete`` holds the starts of the windows that became complete in this tick, each reported
    once (the sink's Dagster partitions are materialized then), and ``provenance`` what each was made
    from (windows without output have none). ``terminate`` holds the revoked
    attempts whose runs were still alive past their deadline. ``beats`` holds each holder's last
    heartbeat, and ``gone`` the holders whose process ended on this machine, for the Leader's census
    of its Borrower runs. ``blocked`` is the source snapshot planning stopped at while leases or
    shards before it are still open; once none are, the tick raises it instead.
    ``oldest_unconsumed_ms`` is when the oldest source commit the group has not consumed landed, for
    the sink's lag check. ``tables`` are the group's tables as the tick read them: what it reports
    (a window's table metadata, the audit, the source's version) is read from them, not loaded again.
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
    rebuilt: str | None = None
    complete: list[int] = field(default_factory=list)
    provenance: dict[int, WindowProvenance] = field(default_factory=dict)
    beats: dict[str, int] = field(default_factory=dict)
    gone: frozenset[str] = frozenset()
    blocked: SourceBlocked | None = None
    oldest_unconsumed_ms: int | None = None
    tables: GroupTables | None = None

    @property
    def paused(self) -> bool:
        """``icegroup pause`` holds the group: leases in flight finish, nothing new is granted."""
        return self.state.paused_at_ms is not None

    def pause_message(self) -> str:
        """Why nothing new is granted, and how to go on."""
        group = self.state.group
        return f"group {group!r} is paused; `icegroup resume {group}` continues it from the same positions"

    @property
    def more_windows_due(self) -> bool:
        """The tick reported as many windows complete as one tick may: the next one reports more."""
        return len(self.complete) >= MAX_PER_TICK

    @property
    def caught_up(self) -> bool:
        """Everything in the source up to its head is committed to the sink (windows may still be due)."""
        return self.state.is_idle() and self.state.planned_through == self.source_head

    @property
    def planning_behind(self) -> bool:
        """The tick cut new shards and stopped short of the source's head (``max_snapshots_per_tick``): more to plan."""
        return self.new_shards > 0 and self.blocked is None and self.state.planned_through != self.source_head

    def stop_message(self) -> str:
        """Why the group is stopped, naming each poison shard and the remedy."""
        shards = "; ".join(
            f"shard {d.shard_id} (stream {d.stream}, source snapshots "
            f"{snapshot_range(d.from_snapshot, d.to_snapshot)}): {d.error}"
            for d in self.stopped
        )
        group = self.state.group
        return (
            f"group {group!r} is stopped by poison shards: {shards}. Fix the transform or the data, then run "
            f"`icegroup redrive {group} --execute`"
        )


def tick(
    catalog: Catalog,
    group: GroupConfig,
    observe: RunObserver,
    owner_run_id: str | None = None,
    now_ms: int | None = None,
    pin_config: bool = True,
) -> TickResult:
    """Run one Leader tick for ``group``; raises ``RegistryConflict`` if another Leader won.

    ``pin_config`` False is a Borrower's own tick: it ticks only on a registry already pinned to
    ``group``'s filter and transform, as loaded and as levelled with the sink, and otherwise leaves
    it as it is (``BorrowerOutdated``), so a Borrower launched before a reload never pins its older
    config back, and a registry still to be created or pinned is the Leader's to do.
    """
    started = time.perf_counter()
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    loaded = load_state(catalog, group.name)
    if not pin_config:
        refuse_other_config(group, loaded.state)
    if loaded.state is not None:
        check_drift(loaded.state, group)
    tables = load_group_tables(catalog, group, loaded)
    source = tables.source
    source_uuid = table_uuid(source)
    refuse_other_table(loaded.state, source_uuid, group)  # before anything reads the table or the sink
    check_filter(group, source.schema())
    synced = level_with_sink(tables, now_ms)
    if not pin_config:
        refuse_other_config(group, synced.state)
    history = synced.history
    before = recorded_table(check_config(synced.state, group, now_ms, history.head), source_uuid)
    observed = {lease_id: observe(lease) for lease_id, lease in before.leases.items()}

    reconciled = reconcile(before, history.commits, history.head, now_ms, group.lease_timeout_s)
    sink_head = history.head
    letters = {  # read after the runs were observed: a Borrower records its letter before its run fails
        sid: d for sid, d in open_in(tables.open_dead_letters(), catalog.name).items() if sid in reconciled.state.shards
    }
    beats, gone = beats_of_holders(catalog, group, reconciled.state, now_ms)
    alive = renewals_applied(catalog, group, reconciled.state)
    live = liveness(group, alive, observed, letters, beats, gone, now_ms, sink_head, owner_run_id)
    replaying, replay_fences = expire_dead_replays(group, live.state, beats, gone, now_ms)
    stopped = [d for d in letters.values() if d.action == STOPPED]
    held = bool(stopped) or replaying.paused_at_ms is not None
    planned, blocked = (
        (Planned(replaying, []), None)
        if held or len(replaying.shards) >= group.max_pending_shards
        else plan(tables, replaying)
    )
    granted = grant(planned.state, group, now_ms, sink_head, stopped=held, owner_run_id=owner_run_id)
    head = source.current_snapshot()
    state, done = (
        (granted.state, [])
        if stopped or blocked
        else complete(source, group, granted.state, head.snapshot_id if head else None, now_ms)
    )
    state = retire_streams(state, now_ms, int(group.retire_streams_after.total_seconds() * 1000))
    if history.head is not None and history.head != before.sink_cursor:
        tables.lineage = record_lineage(catalog, group, before.shards, tables.sink, tables.open_lineage()).table
    provenance = provenance_of(tables, group, done)
    register(source, group, state, now_ms)
    keep_ref(source, group.name, state)  # any engine's expiry then keeps what the group still reads
    fence_and_commit(tables, state, {**live.fences, **replay_fences})
    if blocked is not None and not state.leases and not state.shards and not stopped and not held:
        # Stopped at a snapshot it cannot step over, with nothing left to run before it: say so. The state
        # is committed first; while leases are in flight the tick returns, naming the stop ahead.
        raise blocked

    return TickResult(
        state=state,
        complete=done,
        provenance=provenance,
        launch=[*live.launch, *granted.grants],
        terminate=live.terminate,
        parked=[d for d in letters.values() if d.action != STOPPED],
        stopped=stopped,
        committed=reconciled.committed,
        new_shards=len(planned.new_shards),
        regranted=len(live.revoked),
        source_head=head.snapshot_id if head else None,
        elapsed_ms=(time.perf_counter() - started) * 1000,
        rebuilt=synced.rebuilt,
        beats=beats,
        gone=gone,
        blocked=blocked,
        oldest_unconsumed_ms=oldest_unconsumed_ms(state, appends_of(source)),
        tables=tables,
    )


def refuse_other_config(group: GroupConfig, state: GroupState | None) -> None:
    """A Borrower's own tick goes on only on a registry pinned to its own config hash (``tick``'s ``pin_config``)."""
    pinned = state.config_hash if state is not None else None
    if pinned != group.config_hash:
        raise BorrowerOutdated(
            f"group {group.name!r}: the registry is pinned to config hash {pinned}, this Borrower runs "
            f"{group.config_hash}; it leaves ticking to the Leader"
        )


def level_with_sink(tables: GroupTables, now_ms: int) -> Synced:
    """The registry checked against the sink's commits, and rebuilt from them when missing or behind.

    A reset in flight makes the tick back off, and one that died stops it (``sync_tables``).
    """
    synced = sync_tables(tables, now_ms=now_ms)
    if synced.rebuilt is not None:
        log.warning(
            "group %s: rebuilding the registry from the sink (%s); epoch %d", tables.group.name, synced.rebuilt,
            synced.state.epoch,
        )  # fmt: skip
        if tables.sink is not None:
            tables.sink.refresh()  # the rebuild raised the epoch fence through a table of its own
    return synced


def appends_of(source: Table) -> list[tuple[int, int | None, int]]:
    """The source's append snapshots as (snapshot id, sequence number, commit time in ms)."""
    return [
        (s.snapshot_id, s.sequence_number, s.timestamp_ms)
        for s in source.snapshots()
        if s.summary is not None and s.summary.operation.value == "append"
    ]


def liveness(
    group: GroupConfig,
    state: GroupState,
    observed: dict[str, RunState],
    letters: dict[str, DeadLetter],
    beats: dict[str, int],
    gone: frozenset[str],
    now_ms: int,
    sink_head: int | None,
    owner_run_id: str | None,
) -> Liveness:
    """Revoke and re-grant dead leases, park poisoned ones, relaunch lost launches; logs each change."""
    live = check_liveness(state, group, observed, set(letters), now_ms, sink_head, owner_run_id, beats, gone)
    for lease, decision in live.revoked:
        log.warning(
            "group %s: lease %s attempt %d %s (%s); re-granting as attempt %d",
            group.name, lease.lease_id, lease.attempt, decision.phase.value, decision.reason, lease.attempt + 1,
        )  # fmt: skip
    for lease, decision in live.parked:
        log.warning("group %s: lease %s parked: %s", group.name, lease.lease_id, decision.reason)
    failpoint("leader.after_liveness")
    return live


def expire_dead_replays(
    group: GroupConfig, state: GroupState, beats: dict[str, int], gone: frozenset[str], now_ms: int
) -> tuple[GroupState, dict[str, int]]:
    """Drop the tickets of replays whose holder stopped beating or ended; returns the fences that keep them out."""
    kept, dead = expire_replays(state, beats, now_ms, group.session_timeout_s, gone)
    for ticket in dead:
        log.warning(
            "group %s: replay of window %s (generation %d, %s) stopped beating or ended; its window is granted again",
            group.name, ticket.window, ticket.generation, ticket.holder,
        )  # fmt: skip
    return kept, {replay_fence_key(group.name, t.window): t.generation + 1 for t in dead}


def complete(
    source: Table, group: GroupConfig, state: GroupState, head: int | None, now_ms: int
) -> tuple[GroupState, list[int]]:
    """Windows that nothing more can land in, and the state that remembers they were reported."""
    cursor = source.snapshot_by_id(state.planned_through) if state.planned_through is not None else None
    caught_up_at = now_ms if state.planned_through == head else None
    done = complete_windows(state, group, cursor.timestamp_ms if cursor else None, caught_up_at)
    if not done:
        return state, []
    return state.model_copy(update={"windows_complete_through_ms": done[-1] + window_width_ms(group)}), done


def plan(tables: GroupTables, state: GroupState) -> tuple[Planned, SourceBlocked | None]:
    """Read what the source's snapshots after the planning cursor added, and cut it into shards.

    Also returns the error of a non-append snapshot planning stopped at (``plan_increment``). History
    that expired after the cursor is planned across by comparing files (``iceberg/history_gap.py``).
    """
    group = tables.group

    def followed_now() -> frozenset[int]:
        # Asked only at a non-append snapshot: the sink as it is now, so a follow recorded during the tick counts.
        return followed(load_optional(tables.catalog, group.sink), group.name)

    ranges_pending = any(shard.read_snapshot is None for shard in state.shards.values())
    found = plan_source(tables.source, state.planned_through, group, followed_now, ranges_pending)
    if found.skipped:
        log.info("group %s: ignored %d replace/skipped snapshots", group.name, len(found.skipped))
    if found.pruned:
        log.debug("group %s: left out %d files of streams its filter cannot match", group.name, found.pruned)
    if found.through is None:
        return cut(state, group, found.appends, found.files, None), found.blocked
    through = found.through
    planned = cut(
        state, group, found.appends, found.files, through.snapshot_id, through.sequence_number, found.read_at,
        found.min_row_id,
    )  # fmt: skip
    return planned, found.blocked


def fence_and_commit(tables: GroupTables, state: GroupState, fences: dict[str, int]) -> None:
    """Raise the fences of revoked and parked leases on the sink, then commit the state by CAS.

    Fences go first: once the registry names a lease's next attempt, the attempt it replaces must
    already be unable to commit. A state that did not change is not committed again. Once the
    registry no longer holds a lease, its fence is pruned from the sink (``prune_fences``): only
    after this tick's commit won, so a stale Leader never prunes.
    """
    group, loaded, sink = tables.group, tables.registry, tables.sink
    retired = loaded.state is not None and bool(set(loaded.state.leases) - set(state.leases))
    if fences and sink is None:
        sink = load_optional(tables.catalog, group.sink)  # a Borrower may have created it since the tick began
    if fences:
        if sink is not None:
            raise_fences(sink, fences)
        failpoint("leader.after_fence")
    if loaded.state is None or state != loaded.state:
        commit_state(loaded, state)
        failpoint("leader.after_registry")
    if retired and sink is not None:
        prune_fences(sink, group.name, state.leases)


def provenance_of(tables: GroupTables, group: GroupConfig, starts: list[int]) -> dict[int, WindowProvenance]:
    """What each window the tick found complete (by start) was made from: one read of their lineage partitions."""
    lineage = tables.open_lineage() if starts else None
    if lineage is None:
        return {}
    labels = {window_label(start, group.replay_window): start for start in starts}
    return window_provenance(entries(lineage, is_in("window", labels)), labels)
