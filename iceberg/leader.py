"""The Leader tick: reconcile -> liveness -> plan -> grant -> fence and commit.

Reconciling first checks that the registry agrees with the sink. A registry that is missing while
the sink holds the group's commits, or that is behind the sink (restored from an older backup), is
rebuilt from the sink's commits (``protocol/rebuild.py``) in a new epoch.

The tick is the same whether a Dagster sensor or the headless ``consume`` loop runs it. It takes the
run observer as a function, so this module knows nothing of Dagster. Each phase's decisions are the
pure functions of ``iceberg/protocol/phases.py``; this module does the reads and the writes around
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

from iceberg.dead_letters import open_letters
from iceberg.errors import RegistryConflict, SinkError, SourceError, UsageError
from iceberg.failpoints import failpoint
from iceberg.fencing import raise_fences
from iceberg.groups import GroupConfig, StartAtSnapshot, StartAtTimestamp, check_filter
from iceberg.heartbeats import forget, read_beats
from iceberg.planning import plan_increment
from iceberg.protocol.lineage import COL_GROUP, COL_SHARD, epoch_key
from iceberg.protocol.liveness import RunState, holder_of
from iceberg.protocol.phases import (
    Liveness,
    Planned,
    check_config,
    check_drift,
    check_liveness,
    cut,
    grant,
    reconcile,
)
from iceberg.protocol.poison import STOPPED, DeadLetter
from iceberg.protocol.rebuild import rebuild_state, registry_behind
from iceberg.protocol.shards import Shard, snapshot_range
from iceberg.protocol.state import GroupState, Lease
from iceberg.registry import Loaded, commit_state, load_state
from iceberg.sink_history import SinkHistory, read_sink_history
from iceberg.tables import load_optional, load_source, walk_back

log = logging.getLogger(__name__)

RunObserver = Callable[[Lease], RunState]
# Heartbeat rows of holders that hold nothing are dropped once this many session timeouts old.
PRUNE_AFTER_TIMEOUTS = 10


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
    rebuilt: str | None = None

    @property
    def paused(self) -> bool:
        """``icegroup pause`` holds the group: leases in flight finish, nothing new is granted."""
        return self.state.paused_at_ms is not None

    def pause_message(self) -> str:
        """Why nothing new is granted, and how to go on."""
        group = self.state.group
        return f"group {group!r} is paused; `icegroup resume {group}` continues it from the same positions"

    @property
    def caught_up(self) -> bool:
        """Everything in the source up to its head is committed to the sink."""
        return self.state.is_idle() and self.state.planned_through == self.source_head

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
    start = table.snapshot_by_id(position) if position is not None else None
    return GroupState(
        group=group.name,
        source=group.source,
        sink=group.sink,
        start_position=position,
        planned_through=position,
        planned_through_sequence=start.sequence_number or 0 if start is not None else 0,
    )


@dataclass(frozen=True)
class Synced:
    """A registry state brought into agreement with the sink, before the sink's new commits are applied.

    ``state`` is the stored state, or the state rebuilt from the sink when the stored one is missing
    or behind (``rebuilt`` says why); ``history`` holds the commits still to apply.
    """

    state: GroupState
    history: SinkHistory
    rebuilt: str | None = None


def sync_with_sink(catalog: Catalog, group: GroupConfig, source: Table, loaded: Loaded, fence: bool = True) -> Synced:
    """Check the registry against the sink's commits since its cursor; rebuild it if it is missing or behind.

    A tick rebuilds with ``fence``: the sink's epoch fence goes up first (see ``rebuild``). Without
    it the rebuilt state is only shown (``describe``), and nothing is written.
    """
    stored = loaded.state
    history = read_sink_history(catalog, group.sink, group.name, stored.sink_cursor if stored else None)
    reason = disagreement(stored, history)
    if reason is None:
        return Synced(state=stored or initial_state(source, group), history=history)
    if fence and load_state(catalog, group.name).token != loaded.token:
        raise RegistryConflict(
            f"registry of group {group.name!r} moved while this Leader compared it with the sink; another Leader "
            "committed first"
        )
    epoch = max(stored.epoch if stored else 0, history.epoch) + 1
    rebuilt = rebuild(catalog, group, source, stored, epoch, reason, fence=fence)
    return Synced(
        state=rebuilt, history=SinkHistory(head=rebuilt.sink_cursor, commits=[], epoch=rebuilt.epoch), rebuilt=reason
    )


def disagreement(stored: GroupState | None, history: SinkHistory) -> str | None:
    """Why the stored registry cannot go on from the sink's commits since its cursor, or None."""
    if stored is not None:
        return registry_behind(stored, history.commits, history.epoch)
    if history.commits:
        return f"the registry is missing, and the sink holds {len(history.commits)} commits of the group"
    return None


def rebuild(
    catalog: Catalog,
    group: GroupConfig,
    source: Table,
    stored: GroupState | None,
    epoch: int,
    reason: str,
    fence: bool,
) -> GroupState:
    """The group's state rebuilt from every commit of it in the sink, in ``epoch``.

    With ``fence``, the sink's epoch fence is raised to ``epoch`` *before* the history is read. A
    lease of an older epoch can then no longer commit, so no commit lands that the rebuild did not
    see, and none of the ranges it re-cuts can be committed twice. If another Leader raised the
    fence that far already, it is rebuilding too, and this one backs off. A pause carries over.
    """
    sink = load_optional(catalog, group.sink)
    if sink is None:
        raise UsageError(f"group {group.name!r}: the sink {group.sink!r} does not exist; there is nothing to rebuild")
    if fence and not raise_fences(sink, {epoch_key(group.name): epoch}):
        raise RegistryConflict(
            f"group {group.name!r}: the sink's epoch fence is at {epoch} already: another Leader is rebuilding the "
            "registry; another Leader committed first"
        )
    history = read_sink_history(catalog, group.sink, group.name, None)
    if not history.commits:
        raise UsageError(
            f"group {group.name!r}: the sink {group.sink!r} holds no commits of the group, so there is nothing to "
            "rebuild the registry from; without a registry, the group's next tick starts it from its `start`"
        )
    check_history_complete(catalog, group, history)
    above = [c for c in history.commits if c.epoch >= epoch]
    if above:
        raise SinkError(
            f"group {group.name!r}: sink snapshot {above[0].snapshot_id} was committed in epoch {above[0].epoch}, "
            f"not below the epoch fence {epoch} a rebuild would start; the sink's epoch property was lowered by "
            "hand? Restore it, then rebuild"
        )
    sequences = {s.snapshot_id: s.sequence_number or 0 for s in source.snapshots()}
    state = rebuild_state(group, history.commits, sequences, history.head, epoch)
    state.paused_at_ms = stored.paused_at_ms if stored is not None else None
    log.info(
        "group %s: registry rebuilt from %d sink commits (%s); epoch %d, streams at %s",
        group.name, len(history.commits), reason, state.epoch,
        ", ".join(f"{name}@{s.position}" for name, s in sorted(state.streams.items())),
    )  # fmt: skip
    return state


@dataclass(frozen=True)
class RegistryRebuild:
    """What ``icegroup rebuild`` found: the stored state, the one rebuilt from the sink, and how they disagree."""

    stored: GroupState | None
    rebuilt: GroupState
    disagreement: str | None
    committed: bool


def rebuild_registry(catalog: Catalog, group: GroupConfig, execute: bool) -> RegistryRebuild:
    """Rebuild a group's registry from the sink; with ``execute``, raise the epoch fence and commit it.

    A tick does this by itself when the registry is missing or behind the sink. The command is for
    an operator who wants to see the sink's view first, or to replace a registry that is wrong in a
    way the sink does not show (say, edited by hand).
    """
    loaded = load_state(catalog, group.name)
    if loaded.state is not None:
        check_drift(loaded.state, group)
    source = load_source(catalog, group.source)
    stored = loaded.state
    history = read_sink_history(catalog, group.sink, group.name, stored.sink_cursor if stored else None)
    found = disagreement(stored, history)
    epoch = max(stored.epoch if stored else 0, history.epoch) + 1
    rebuilt = rebuild(catalog, group, source, stored, epoch, found or "asked for by icegroup rebuild", fence=execute)
    if execute:
        fence_and_commit(catalog, group, loaded, rebuilt, {})
    return RegistryRebuild(stored=stored, rebuilt=rebuilt, disagreement=found, committed=execute)


def check_history_complete(catalog: Catalog, group: GroupConfig, history: SinkHistory) -> None:
    """Every shard whose rows are in the sink must have its commit in the sink's history.

    A history cut short (sink snapshots expired) would rebuild positions that are too old, and the
    group would consume again what the sink already holds; the rows' lineage column tells.
    """
    sink = load_optional(catalog, group.sink)
    if sink is None or history.head is None:
        return
    rows = sink.scan(
        row_filter=f"{COL_GROUP} = '{group.name}'", selected_fields=(COL_SHARD,), snapshot_id=history.head
    ).to_arrow()
    missing = set(rows.column(COL_SHARD).to_pylist()) - history.shard_ids()
    if missing:
        raise SinkError(
            f"group {group.name!r}: cannot rebuild the registry from {group.sink!r}: it holds rows of {len(missing)} "
            f"shards (e.g. {sorted(missing)[0]}) whose commits are no longer in its history (expired sink "
            "snapshots), so positions rebuilt from what is left would consume them again. Restore the registry "
            "from a backup, or consume into a new sink under a new group name"
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
    check_filter(group, source.schema())
    synced = sync_with_sink(catalog, group, source, loaded)
    if synced.rebuilt is not None:
        log.warning(
            "group %s: rebuilding the registry from the sink (%s); epoch %d", group.name, synced.rebuilt,
            synced.state.epoch,
        )  # fmt: skip
    history = synced.history
    before = check_config(synced.state, group, now_ms, history.head)
    observed = {lease_id: observe(lease) for lease_id, lease in before.leases.items()}

    reconciled = reconcile(before, history.commits, history.head, now_ms, group.lease_timeout_s)
    sink_head = history.head
    letters = {sid: d for sid, d in open_letters(catalog, group.name).items() if sid in reconciled.state.shards}
    beats = read_heartbeats(catalog, group, reconciled.state, now_ms)
    live = liveness(group, reconciled.state, observed, letters, beats, now_ms, sink_head, owner_run_id)
    planned = plan(source, group, live.state)
    stopped = [d for d in letters.values() if d.action == STOPPED]
    held = bool(stopped) or planned.state.paused_at_ms is not None
    granted = grant(planned.state, group, now_ms, sink_head, stopped=held, owner_run_id=owner_run_id)
    fence_and_commit(catalog, group, loaded, granted.state, live.fences)

    head = source.current_snapshot()
    return TickResult(
        state=granted.state,
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
    )


def read_heartbeats(catalog: Catalog, group: GroupConfig, state: GroupState, now_ms: int) -> dict[str, int]:
    """Each holder's last heartbeat; rows of holders long gone and holding nothing are pruned."""
    beats = read_beats(catalog, group.name)
    holding = {holder_of(lease) for lease in state.leases.values()}
    gone = [
        h
        for h, b in beats.items()
        if h not in holding and now_ms - b.beat_ms > PRUNE_AFTER_TIMEOUTS * 1000 * group.session_timeout_s
    ]
    forget(catalog, group.name, gone)
    return {holder: b.beat_ms for holder, b in beats.items()}


def liveness(
    group: GroupConfig,
    state: GroupState,
    observed: dict[str, RunState],
    letters: dict[str, DeadLetter],
    beats: dict[str, int],
    now_ms: int,
    sink_head: int | None,
    owner_run_id: str | None,
) -> Liveness:
    """Revoke and re-grant dead leases, park poisoned ones, relaunch lost launches; logs each change."""
    live = check_liveness(state, group, observed, set(letters), now_ms, sink_head, owner_run_id, beats)
    for lease, decision in live.revoked:
        log.warning(
            "group %s: lease %s attempt %d %s (%s); re-granting as attempt %d",
            group.name, lease.lease_id, lease.attempt, decision.phase.value, decision.reason, lease.attempt + 1,
        )  # fmt: skip
    for lease, decision in live.parked:
        log.warning("group %s: lease %s parked: %s", group.name, lease.lease_id, decision.reason)
    failpoint("leader.after_liveness")
    return live


def plan(source: Table, group: GroupConfig, state: GroupState) -> Planned:
    """Read what the source's snapshots after the planning cursor added, and cut it into shards."""
    found = plan_increment(source, state.planned_through, group)
    if found.skipped:
        log.info("group %s: ignored %d replace/skipped snapshots", group.name, len(found.skipped))
    if found.through is None:
        return cut(state, group, found.appends, found.files, None)
    return cut(state, group, found.appends, found.files, found.through.snapshot_id, found.through.sequence_number)


def fence_and_commit(
    catalog: Catalog, group: GroupConfig, loaded: Loaded, state: GroupState, fences: dict[str, int]
) -> None:
    """Raise the fences of revoked and parked leases on the sink, then commit the state by CAS.

    Fences go first: once the registry names a lease's next attempt, the attempt it replaces must
    already be unable to commit. A state that did not change is not committed again.
    """
    if fences:
        sink = load_optional(catalog, group.sink)
        if sink is not None:
            raise_fences(sink, fences)
        failpoint("leader.after_fence")
    if loaded.state is None or state != loaded.state:
        commit_state(loaded, state)
        failpoint("leader.after_registry")
