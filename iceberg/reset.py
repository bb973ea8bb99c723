"""Resets, the catalog half: plan each stream's move (``iceberg/reset_targets.py`` resolves the target), execute it.

Executing goes in the order that keeps a crash safe:

1. the sink's epoch fence goes up together with a marker naming the reset and its holder
   (``icegroup.reset.<group>``): no lease or replay of the old epoch can commit from then on. A
   Leader that ticks sees the marker and backs off while the holder beats (``ResetInFlight``); once
   the holder died, it stops, naming the command that completes the reset (``ResetInterrupted``). The
   reset must raise the fence itself (another reset that took the same epoch first wins alone), so
   a marker of the registry's epoch is always the marker of the reset that committed it;
2. the plan is made again, on the sink's history as the fence left it, and its positions are
   recorded on the sink (``icegroup.resets.<group>``), so a run that completes the reset after a
   crash uses the same positions, whatever the clock or the source did meanwhile; upstream replays
   whose replaced commits the group consumes again are dropped from its follow record
   (``icegroup.follows.<group>``, ``iceberg/cascade.py``), so it stops at them and follows them again;
3. the output consumed again is deleted by shard id; 4. the registry is committed by
   compare-and-swap; 5. the marker is cleared.

Running the same reset again after a crash finds its marker and record and completes it in the
same epoch; every step is idempotent. The reset beats for itself in the heartbeat store from before
its fence until after its marker is cleared (as a replay beats for its ticket), so that a tick can
tell a reset in flight from one that died.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from functools import partial

from pyiceberg.catalog import Catalog
from pyiceberg.table import Table

from icegroup.iceberg.cascade import follows_after_reset
from icegroup.iceberg.errors import RegistryConflict, UsageError
from icegroup.iceberg.failpoints import failpoint
from icegroup.iceberg.protocol.drift import check_drift, refuse_other_table
from icegroup.iceberg.protocol.fences import epoch_key
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.replay import holder_alive
from icegroup.iceberg.protocol.reset import (
    Position,
    ResetMarker,
    ResetTarget,
    StreamMove,
    reconsumed,
    reset_state,
    round_down,
)
from icegroup.iceberg.protocol.shards import window_label
from icegroup.iceberg.protocol.sink_commit import (
    KEY_EPOCH,
    KEY_GROUP,
    KEY_RESET,
    ResetRecord,
    ShardRange,
    parse_resets,
    reset_key,
    resets_key,
)
from icegroup.iceberg.protocol.state import GroupState
from icegroup.iceberg.reset_targets import chain, check_reachable, count_skipped, targets
from icegroup.iceberg.retry import again_while_losing
from icegroup.iceberg.store.fences import raise_fences
from icegroup.iceberg.store.heartbeats import heartbeat, read_beats
from icegroup.iceberg.store.registry import Loaded, commit_or_lose, kept_moving, load_state
from icegroup.iceberg.store.reset_marker import judge_reset, marker_of
from icegroup.iceberg.store.sink import delete_shards, remove_property
from icegroup.iceberg.store.sink_history import sink_history
from icegroup.iceberg.store.tables import load_optional, load_source, table_uuid


@dataclass
class ResetPlan:
    """What a reset does: each stream's move, the windows whose output is replaced, the new state."""

    group: str
    target: ResetTarget
    epoch: int
    moves: list[StreamMove]
    windows: list[str]
    keep_output: bool
    state: GroupState
    completes_interrupted: bool = False
    loaded: Loaded | None = None
    already_committed: bool = False

    @property
    def replaced_shards(self) -> list[str]:
        """Shard ids whose rows the reset deletes from the sink."""
        if self.keep_output:
            return []
        return sorted({s.shard_id for move in self.moves for s in move.reconsumed})

    def rows(self) -> list[dict[str, object]]:
        """Per stream, as the dry run shows it."""
        return [
            {
                "stream": m.stream,
                "current": m.current[0],
                "new": m.new[0],
                "direction": m.direction,
                "reconsumed_snapshots": m.reconsumed_snapshots,
                "reconsumed_rows": m.reconsumed_rows,
                "skipped_snapshots": m.skipped_snapshots,
                "skipped_rows": m.skipped_rows,
                "skipped_rows_expired": m.skipped_expired_rows,
            }
            for m in self.moves
        ]


def plan_reset(
    catalog: Catalog,
    group: GroupConfig,
    target: ResetTarget,
    keep_output: bool = False,
    now_ms: int | None = None,
    holder: str | None = None,
) -> ResetPlan:
    """Resolve ``target`` and plan every stream's move; nothing is written.

    A stream's current position is the furthest of the registry's and the sink's (the registry may
    lag the sink's commits); streams only the sink knows move too. Shards a reset made void are not
    counted. A reset whose marker is on the sink is completed with the positions it recorded, once
    its holder died; while it is in flight (its holder, not ``holder``, still beats) this raises
    ``ResetInFlight``.
    """
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    loaded = load_state(catalog, group.name)
    if loaded.state is None:
        raise UsageError(
            f"group {group.name!r} has no registry yet: it has consumed nothing, so there is nothing to reset"
        )
    state = loaded.state
    check_drift(state, group)
    source = load_source(catalog, group.source)
    refuse_other_table(state, table_uuid(source), group)  # its positions are not the new table's to move
    sink = load_optional(catalog, group.sink)
    history = chain(source)
    marker = marker_of(sink, group)
    resumes = marker is not None and marker.epoch > state.epoch and marker.epoch == sink_epoch(sink, group)
    if resumes and marker is not None and marker.holder is not None and marker.holder != holder:
        in_flight = judge_reset(catalog, group, marker, now_ms)
        if in_flight is not None:
            raise in_flight
    if resumes and marker is not None and marker.target != target.describe():
        raise UsageError(
            f"group {group.name!r}: a reset ({marker.target}) was interrupted in epoch {marker.epoch}; complete it "
            f"first: `icegroup reset {group.name} {marker.target} --execute`"
        )
    epoch = marker.epoch if resumes and marker is not None else max(state.epoch, sink_epoch(sink, group)) + 1
    records = parse_resets(sink.properties.get(resets_key(group.name), "")) if sink is not None else []
    own = next((r for r in records if r.epoch == epoch), None)
    committed = committed_ranges(sink, group, [r for r in records if r.epoch != epoch])
    sequences = {info.snapshot_id: info.sequence_number for info in history}
    sequences.update({s.to_snapshot: s.to_sequence or 0 for ranges in committed.values() for s in ranges})
    currents: dict[str, Position] = {name: (s.position, s.position_sequence) for name, s in state.streams.items()}
    for name, ranges in committed.items():
        last = max(ranges, key=lambda s: s.to_sequence or 0)
        if (last.to_sequence or 0) > currents.get(name, (None, -1))[1]:
            currents[name] = (last.to_snapshot, last.to_sequence or 0)
    if own is not None:
        news = {name: (own.snapshots.get(name, own.snapshots.get("*")), own.positions.get(name, own.positions["*"]))
                for name in currents}  # fmt: skip
        planned: Position = (own.snapshots.get("*"), own.positions["*"])
    else:
        news, planned = targets(target, group, state, currents, source, history, sink, now_ms)
    moves = []
    for name in sorted(currents):
        ranges = committed.get(name, [])
        new = news[name]
        if own is None and new[1] < currents[name][1]:
            new = round_down(new, ranges, sequences)
        moves.append(StreamMove(name, currents[name], new, reconsumed=reconsumed(new, ranges)))
    planned = min([planned, *(m.new for m in moves)], key=lambda p: p[1])
    check_reachable(group, history, moves, planned[0])
    count_skipped(source, history, moves)
    windows = sorted({s.window_start_ms for m in moves for s in m.reconsumed if s.window_start_ms is not None})
    return ResetPlan(
        group=group.name,
        target=target,
        epoch=epoch,
        moves=moves,
        windows=[window_label(w, group.replay_window) for w in windows],
        keep_output=keep_output,
        state=reset_state(state, moves, planned, epoch, windows),
        completes_interrupted=resumes,
        loaded=loaded,
    )


def committed_ranges(sink: Table | None, group: GroupConfig, resets: list[ResetRecord]) -> dict[str, list[ShardRange]]:
    """Per stream, the shard ranges committed to the sink whose output no reset deleted."""
    commits, replays = sink_history(sink, group.name) if sink is not None else ([], [])
    found = [(c.epoch, s) for c in commits for s in c.shards] + [(r.epoch, s) for r in replays for s in r.covers]
    out: dict[str, dict[str, ShardRange]] = {}
    for epoch, shard in found:
        if not any(reset.voids(epoch, shard) for reset in resets):
            out.setdefault(shard.stream, {})[shard.shard_id] = shard
    return {stream: list(ranges.values()) for stream, ranges in out.items()}


def sink_epoch(sink: Table | None, group: GroupConfig) -> int:
    """The sink's epoch fence for the group."""
    return int(sink.properties.get(epoch_key(group.name), "0")) if sink is not None else 0


def reset_marker(sink: Table | None, group: GroupConfig) -> tuple[int, str] | None:
    """The epoch and target of the reset whose marker is on the sink (set with its fence, cleared after it)."""
    marker = marker_of(sink, group)
    return None if marker is None else (marker.epoch, marker.target)


def execute_reset(
    catalog: Catalog, group: GroupConfig, target: ResetTarget, keep_output: bool = False, retries: int = 5
) -> ResetPlan:
    """Execute a reset in the order the module docstring gives, beating for it; returns the plan it carried out.

    The plan's ``completes_interrupted`` says whether this run completed a reset that had died: its
    marker was on the sink when this run began (this run's own marker does not count).
    """
    holder = f"reset-{uuid.uuid4().hex[:12]}"
    found = marker_of(load_optional(catalog, group.sink), group)
    with heartbeat(catalog, group.name, holder, interval_s=group.session_timeout_s / 3):
        plan = run_reset(catalog, group, target, keep_output, retries, holder)
    plan.completes_interrupted = found is not None and found.epoch == plan.epoch
    return plan


def run_reset(
    catalog: Catalog, group: GroupConfig, target: ResetTarget, keep_output: bool, retries: int, holder: str
) -> ResetPlan:
    """The reset's steps, each try on what is there now; ``holder`` beats for it meanwhile."""
    at_ms = int(time.time() * 1000)

    def attempt() -> ResetPlan:
        loaded = load_state(catalog, group.name)
        if loaded.state is None:
            raise UsageError(f"group {group.name!r} has no registry yet: it has consumed nothing to reset")
        refuse_while_replaying(catalog, group, loaded.state)
        sink = load_optional(catalog, group.sink)
        if sink is None and loaded.state.leases:
            raise UsageError(
                f"group {group.name!r}: leases are in flight and the sink does not exist yet, so they cannot be "
                f"fenced; `icegroup pause {group.name}`, wait for them, then reset"
            )
        finished = finish_committed(sink, group, target, keep_output, loaded)
        if finished is not None:
            return finished
        plan = plan_reset(catalog, group, target, keep_output, holder=holder)
        if sink is not None:
            marker = ResetMarker(plan.epoch, target.describe(), holder, at_ms).to_json()
            fresh = not plan.completes_interrupted
            raised = raise_fences(
                sink, {epoch_key(group.name): plan.epoch}, also={reset_key(group.name): marker}, strict=fresh
            )
            if fresh and not raised:
                raise RegistryConflict(
                    f"group {group.name!r}: another reset (or a rebuild) took epoch {plan.epoch} while this one "
                    "planned; see `icegroup describe`, then run the reset again"
                )
            if sink_epoch(sink, group) != plan.epoch:
                raise RegistryConflict(
                    f"group {group.name!r}: the sink's epoch moved past {plan.epoch} (a rebuild?); run the reset again"
                )
            failpoint("reset.after_fence")
            plan = plan_reset(catalog, group, target, keep_output, holder=holder)
            source = load_source(catalog, group.source)
            records = follows_after_reset(source, sink, group.name, plan.state.planned_through_sequence)
            if not keep_output:
                records[resets_key(group.name)] = recorded_resets(sink, group, plan)
            if records:
                raise_fences(sink, {}, also=records)
            if plan.replaced_shards:
                delete_output(sink, group, plan)
                failpoint("reset.after_delete")
            sink.refresh()
            head = sink.current_snapshot()
            plan.state.sink_cursor = head.snapshot_id if head is not None else plan.state.sink_cursor
        commit_or_lose(plan.loaded or loaded, plan.state)
        failpoint("reset.after_registry")
        if sink is not None:
            clear_marker(sink, group)
        return plan

    gave_up = partial(kept_moving, group.name, retries, "reset it")
    return again_while_losing(f"group {group.name}: reset", attempt, retries, 0.2, gave_up)


def finish_committed(
    sink: Table | None, group: GroupConfig, target: ResetTarget, keep_output: bool, loaded: Loaded
) -> ResetPlan | None:
    """Clear the marker of a reset whose registry commit won (it was stopped before clearing it).

    Returns that reset's plan, with no moves left to make, when this call asks for the same reset:
    running the command again completes the reset rather than moving the group once more. A
    marker of another target is only cleared, and this reset goes on. None when there is no such marker.
    """
    marker = marker_of(sink, group)
    if sink is None or loaded.state is None or marker is None or marker.epoch != loaded.state.epoch:
        return None
    clear_marker(sink, group)
    if marker.target != target.describe():
        return None
    return ResetPlan(
        group=group.name, target=target, epoch=marker.epoch, moves=[], windows=[], keep_output=keep_output,
        state=loaded.state, completes_interrupted=True, loaded=loaded, already_committed=True,
    )  # fmt: skip


def clear_marker(sink: Table, group: GroupConfig) -> None:
    """Remove the reset's marker from the sink: the reset is complete."""
    remove_property(sink, reset_key(group.name), f"clearing the marker of the reset of group {group.name!r}")


def recorded_resets(sink: Table, group: GroupConfig, plan: ResetPlan) -> str:
    """The sink's reset records with this reset's added (once): what replays and later resets leave out."""
    records = [r for r in parse_resets(sink.properties.get(resets_key(group.name), "")) if r.epoch != plan.epoch]
    positions = {m.stream: m.new[1] for m in plan.moves} | {"*": plan.state.planned_through_sequence}
    snapshots = {m.stream: m.new[0] for m in plan.moves} | {"*": plan.state.planned_through}
    records.append(ResetRecord(plan.epoch, positions, snapshots))
    return json.dumps([r.to_json() for r in records], separators=(",", ":"))


def delete_output(sink: Table, group: GroupConfig, plan: ResetPlan) -> None:
    """Delete the rows of the re-consumed shards, in one commit that names the reset."""
    properties = {KEY_GROUP: group.name, KEY_RESET: plan.target.describe(), KEY_EPOCH: str(plan.epoch)}
    delete_shards(
        sink, plan.replaced_shards, properties, f"deleting the output the reset of group {group.name!r} replaces"
    )


def refuse_while_replaying(catalog: Catalog, group: GroupConfig, state: GroupState) -> None:
    """A reset waits for replays in flight: both would rewrite the same output."""
    beats = {h: b.beat_ms for h, b in read_beats(catalog, group.name).items()}
    now_ms = int(time.time() * 1000)
    live = [t for t in state.replays.values() if holder_alive(t, beats, now_ms, group.session_timeout_s)]
    if live:
        held = ", ".join(f"{t.window} by {t.holder}" for t in live)
        raise UsageError(f"group {group.name!r}: replays are in flight ({held}); wait for them to finish, then reset")
