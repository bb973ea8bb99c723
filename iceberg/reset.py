"""Resets, the catalog half: resolve the target against the source, plan each stream's move, execute it.

Executing goes in the order that keeps a crash safe:

1. the sink's epoch fence goes up together with a marker naming the reset
   (``icegroup.reset.<group>``): no lease or replay of the old epoch can commit from then on, and a
   Leader that ticks sees the marker and stops, naming the command that completes the reset;
2. the plan is made again, on the sink's history as the fence left it, and its positions are
   recorded on the sink (``icegroup.resets.<group>``), so a run that completes the reset after a
   crash uses the same positions, whatever the clock or the source did meanwhile; upstream replays
   whose replaced commits the group consumes again are dropped from its follow record
   (``icegroup.follows.<group>``, ``iceberg/cascade.py``), so it stops at them and follows them again;
3. the output consumed again is deleted by shard id; 4. the registry is committed by
   compare-and-swap; 5. the marker is cleared.

Running the same reset again after a crash finds its marker and record and completes it in the
same epoch; every step is idempotent.
"""

from __future__ import annotations

import json
import re
import time
import warnings
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from pyiceberg.catalog import Catalog
from pyiceberg.table import Table

from iceberg.cascade import follows_after_reset
from iceberg.errors import RegistryConflict, ResetInterrupted, UsageError
from iceberg.failpoints import failpoint
from iceberg.fencing import raise_fences
from iceberg.groups import GroupConfig
from iceberg.heartbeats import read_beats
from iceberg.planning import APPEND, added_files, snapshot_info
from iceberg.protocol.lineage import (
    COL_SHARD,
    KEY_EPOCH,
    KEY_GROUP,
    KEY_RESET,
    ResetRecord,
    ShardRange,
    epoch_key,
    parse_resets,
    reset_key,
    resets_key,
)
from iceberg.protocol.phases import check_drift
from iceberg.protocol.replay import holder_alive
from iceberg.protocol.reset import Position, ResetTarget, StreamMove, reconsumed, reset_state, round_down
from iceberg.protocol.shards import SnapshotInfo, window_label
from iceberg.protocol.state import GroupState
from iceberg.registry import Loaded, commit_state, load_state
from iceberg.replays import sink_history
from iceberg.tables import load_optional, load_source, walk_back

DURATION = re.compile(r"^P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+)S)?)?$|^(\d+)([smhd])$")


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
            }
            for m in self.moves
        ]


def parse_duration(text: str) -> timedelta:
    """``PT1H``, ``P2DT3H``, or ``90s``/``15m``/``2h``/``3d``; an error names the forms."""
    found = DURATION.match(text.strip())
    if found is None or not any(found.groups()):
        raise UsageError(f"--by-duration: {text!r} is not a duration; write it like PT1H, P1DT12H, 15m or 2d")
    if found.group(5) is not None:
        unit = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}[found.group(6)]
        return timedelta(**{unit: int(found.group(5))})
    days, hours, minutes, seconds = (int(g or 0) for g in found.groups()[:4])
    return timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds)


def parse_datetime(text: str) -> int:
    """An ISO-8601 time (UTC if it names no zone) in epoch milliseconds; an error names the option."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(
            f"--to-datetime: {text!r} is not an ISO-8601 time; write it like 2026-11-23T14:05:00Z"
        ) from None
    return int((moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp() * 1000)


def chain(source: Table) -> list[SnapshotInfo]:
    """The source's main history still in its metadata, oldest first."""
    return [snapshot_info(s) for s in reversed(list(walk_back(source, None)))]


def earliest(history: list[SnapshotInfo]) -> Position:
    """Before the oldest snapshot still available (the table's beginning if nothing expired)."""
    if not history:
        return (None, 0)
    oldest = history[0]
    return (oldest.parent_id, max(oldest.sequence_number - 1, 0))


def global_target(target: ResetTarget, group: GroupConfig, history: list[SnapshotInfo], now_ms: int) -> Position:
    """The one position every stream moves to, for targets that name a point in the source."""
    if target.how == "earliest":
        return earliest(history)
    if target.how == "latest":
        return (history[-1].snapshot_id, history[-1].sequence_number) if history else (None, 0)
    if target.how == "snapshot":
        wanted = int(target.value or "0")
        for info in history:
            if info.snapshot_id == wanted:
                return (info.snapshot_id, info.sequence_number)
        span = f"{history[0].snapshot_id} (oldest) to {history[-1].snapshot_id} (head)" if history else "none"
        raise UsageError(
            f"--to-snapshot: {wanted} is not in the history of {group.source!r} (its snapshots run from {span}); "
            "name one of them, or use --to-earliest"
        )
    if target.how == "datetime":
        cutoff = parse_datetime(target.value or "")
    else:
        cutoff = now_ms - int(parse_duration(target.value or "").total_seconds() * 1000)
    before = [info for info in history if info.timestamp_ms < cutoff]
    return (before[-1].snapshot_id, before[-1].sequence_number) if before else earliest(history)


def stream_snapshots(source: Table, history: list[SnapshotInfo]) -> dict[str, list[SnapshotInfo]]:
    """Per stream, the append snapshots that added files to it, oldest first."""
    appends = [info for info in history if info.operation == APPEND]
    by_id = {info.snapshot_id: info for info in appends}
    out: dict[str, dict[int, SnapshotInfo]] = {}
    for entry in added_files(source, appends):
        out.setdefault(entry.stream, {})[entry.snapshot_id] = by_id[entry.snapshot_id]
    return {stream: sorted(snaps.values(), key=lambda s: s.sequence_number) for stream, snaps in out.items()}


def checkpoint_positions(sink: Table | None, group: GroupConfig, checkpoint: int) -> dict[str, Position]:
    """Each stream's committed position as of a sink commit of the group."""
    if sink is None or sink.snapshot_by_id(checkpoint) is None:
        raise UsageError(
            f"--to-checkpoint: {checkpoint} is not a snapshot of {group.sink!r}; `icegroup checkpoints "
            f"{group.name}` lists the group's commits"
        )
    commits, _ = sink_history(sink, group.name)
    order = [s.snapshot_id for s in walk_back(sink, None)]
    if not any(c.snapshot_id == checkpoint for c in commits):
        raise UsageError(f"--to-checkpoint: sink snapshot {checkpoint} is not a commit of group {group.name!r}")
    older = set(order[order.index(checkpoint) :])
    positions: dict[str, Position] = {}
    for commit in commits:
        if commit.snapshot_id in older:
            for shard in commit.shards:
                if (shard.to_sequence or 0) > positions.get(shard.stream, (None, -1))[1]:
                    positions[shard.stream] = (shard.to_snapshot, shard.to_sequence or 0)
    return positions


def plan_reset(
    catalog: Catalog, group: GroupConfig, target: ResetTarget, keep_output: bool = False, now_ms: int | None = None
) -> ResetPlan:
    """Resolve ``target`` and plan every stream's move; nothing is written.

    A stream's current position is the furthest of the registry's and the sink's (the registry may
    lag the sink's commits); streams only the sink knows move too. Shards a reset made void are not
    counted. A reset whose marker is on the sink is completed with the positions it recorded.
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
    sink = load_optional(catalog, group.sink)
    history = chain(source)
    marker = reset_marker(sink, group)
    resumes = marker is not None and marker[0] > state.epoch and marker[0] == sink_epoch(sink, group)
    if resumes and marker is not None and marker[1] != target.describe():
        raise UsageError(
            f"group {group.name!r}: a reset ({marker[1]}) was interrupted in epoch {marker[0]}; complete it first: "
            f"`icegroup reset {group.name} {marker[1]} --execute`"
        )
    epoch = marker[0] if resumes and marker is not None else max(state.epoch, sink_epoch(sink, group)) + 1
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


def targets(
    target: ResetTarget,
    group: GroupConfig,
    state: GroupState,
    currents: dict[str, Position],
    source: Table,
    history: list[SnapshotInfo],
    sink: Table | None,
    now_ms: int,
) -> tuple[dict[str, Position], Position]:
    """Each stream's new position, and where planning goes on from, before rounding."""
    sequences = {info.snapshot_id: info.sequence_number for info in history}
    if target.how == "checkpoint":
        positions = checkpoint_positions(sink, group, int(target.value or "0"))
        start: Position = (state.start_position, sequences.get(state.start_position or -1, 0))
        news = {name: positions.get(name, start) for name in currents}
        return news, min(news.values(), key=lambda p: p[1], default=start)
    if target.how == "shift":
        per_stream = stream_snapshots(source, history)
        by = int(target.value or "0")
        news = {name: shifted(current, per_stream.get(name, []), by, history) for name, current in currents.items()}
        return news, min(news.values(), key=lambda p: p[1], default=earliest(history))
    planned = global_target(target, group, history, now_ms)
    return dict.fromkeys(currents, planned), planned


def check_reachable(
    group: GroupConfig, history: list[SnapshotInfo], moves: list[StreamMove], planned: int | None
) -> None:
    """A stream moved back can only be consumed again from source history that is still there.

    Every snapshot of the shards consumed again must still be in the history, and so must the
    snapshot planning restarts after (``planned``), or planning would stop at it. Sequence numbers
    alone cannot tell: a source that is another group's sink skips the numbers its staged (write-
    audit-publish) snapshots took, so its oldest snapshot need not be number 1. Commits that recorded
    no snapshot list fall back to comparing sequence numbers with the oldest snapshot's.
    """
    floor = earliest(history)
    present = {s.snapshot_id for s in history}
    for move in moves:
        if move.direction != "back":
            continue
        listed = all(shard.snapshots for shard in move.reconsumed)
        needed = {snap for shard in move.reconsumed for snap in shard.snapshots}
        if (listed and not needed <= present) or (not listed and move.new[1] < floor[1]):
            raise UsageError(
                f"group {group.name!r}: stream {move.stream} would move back to sequence {move.new[1]}, the start "
                f"of the committed shard it falls in, but {group.source!r}'s history before snapshot "
                f"{history[0].snapshot_id if history else None} has expired, so those rows cannot be consumed again; "
                "pick a later target"
            )
    if history and planned not in present and planned != history[0].parent_id:
        raise UsageError(
            f"group {group.name!r}: planning would restart after snapshot {planned}, which is no longer in "
            f"{group.source!r}'s history (it runs from {history[0].snapshot_id}); pick a later target, or "
            "--to-earliest"
        )


def shifted(current: Position, snapshots: list[SnapshotInfo], by: int, history: list[SnapshotInfo]) -> Position:
    """A stream's position moved by ``by`` of its own snapshots (negative: back), within what exists."""
    done = [s for s in snapshots if s.sequence_number <= current[1]]
    index = min(max(len(done) + by, 0), len(snapshots))
    if index == 0:
        return earliest(history)
    moved = snapshots[index - 1]
    return (moved.snapshot_id, moved.sequence_number)


def count_skipped(source: Table, history: list[SnapshotInfo], moves: list[StreamMove]) -> None:
    """Fill in the rows that forward moves skip, from the files the skipped snapshots added."""
    forward = [m for m in moves if m.direction == "forward"]
    if not forward:
        return
    low, high = min(m.current[1] for m in forward), max(m.new[1] for m in forward)
    appends = [i for i in history if i.operation == APPEND and low < i.sequence_number <= high]
    sequence = {i.snapshot_id: i.sequence_number for i in appends}
    files = added_files(source, appends)
    for move in forward:
        mine = [
            f for f in files if f.stream == move.stream and move.current[1] < sequence[f.snapshot_id] <= move.new[1]
        ]
        move.skipped_rows = sum(f.record_count for f in mine)
        move.skipped_snapshots = len({f.snapshot_id for f in mine})


def sink_epoch(sink: Table | None, group: GroupConfig) -> int:
    """The sink's epoch fence for the group."""
    return int(sink.properties.get(epoch_key(group.name), "0")) if sink is not None else 0


def reset_marker(sink: Table | None, group: GroupConfig) -> tuple[int, str] | None:
    """The epoch and target of the reset whose marker is on the sink (set with its fence, cleared after it)."""
    return parse_marker(sink.properties.get(reset_key(group.name), "") if sink is not None else "")


def parse_marker(text: str) -> tuple[int, str] | None:
    """A reset marker's epoch and target; None for no marker."""
    if not text:
        return None
    marker = json.loads(text)
    return int(marker["epoch"]), str(marker["target"])


def check_interrupted(marker_text: str, group: GroupConfig, stored_epoch: int) -> None:
    """``ResetInterrupted`` when a reset fenced the sink but did not commit the registry."""
    marker = parse_marker(marker_text)
    if marker is not None and marker[0] > stored_epoch:
        epoch, target = marker
        raise ResetInterrupted(
            f"group {group.name!r}: a reset ({target}) raised the sink's epoch to {epoch} but did not commit the "
            f"registry (it was interrupted); run `icegroup reset {group.name} {target} --execute` again to complete it"
        )


def execute_reset(
    catalog: Catalog, group: GroupConfig, target: ResetTarget, keep_output: bool = False, retries: int = 5
) -> ResetPlan:
    """Execute a reset in the order the module docstring gives; returns the plan it carried out."""
    for attempt in range(retries):
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
        plan = plan_reset(catalog, group, target, keep_output)
        if sink is not None:
            marker = json.dumps({"epoch": plan.epoch, "target": target.describe()})
            raise_fences(sink, {epoch_key(group.name): plan.epoch}, also={reset_key(group.name): marker})
            if sink_epoch(sink, group) != plan.epoch:
                raise RegistryConflict(
                    f"group {group.name!r}: the sink's epoch moved past {plan.epoch} (a rebuild?); run the reset again"
                )
            failpoint("reset.after_fence")
            plan = plan_reset(catalog, group, target, keep_output)
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
        try:
            commit_state(plan.loaded or loaded, plan.state)
        except RegistryConflict:
            time.sleep(0.2 * (attempt + 1))
            continue
        if sink is not None:
            with sink.transaction() as tx:
                tx.remove_properties(reset_key(group.name))
        return plan
    raise RegistryConflict(f"group {group.name!r}: the registry kept moving under {retries} tries to reset it")


def recorded_resets(sink: Table, group: GroupConfig, plan: ResetPlan) -> str:
    """The sink's reset records with this reset's added (once): what replays and later resets leave out."""
    records = [r for r in parse_resets(sink.properties.get(resets_key(group.name), "")) if r.epoch != plan.epoch]
    positions = {m.stream: m.new[1] for m in plan.moves} | {"*": plan.state.planned_through_sequence}
    snapshots = {m.stream: m.new[0] for m in plan.moves} | {"*": plan.state.planned_through}
    records.append(ResetRecord(plan.epoch, positions, snapshots))
    return json.dumps([r.to_json() for r in records], separators=(",", ":"))


def delete_output(sink: Table, group: GroupConfig, plan: ResetPlan) -> None:
    """Delete the rows of the re-consumed shards, in one commit that names the reset."""
    ids = ", ".join(f"'{shard_id}'" for shard_id in plan.replaced_shards)
    sink.refresh()
    with warnings.catch_warnings():
        # A reset run again after a crash finds the rows already deleted: that is the expected no-op.
        warnings.filterwarnings("ignore", "Delete operation did not match any records")
        sink.delete(
            delete_filter=f"{COL_SHARD} IN ({ids})",
            snapshot_properties={KEY_GROUP: group.name, KEY_RESET: plan.target.describe(), KEY_EPOCH: str(plan.epoch)},
        )


def refuse_while_replaying(catalog: Catalog, group: GroupConfig, state: GroupState) -> None:
    """A reset waits for replays in flight: both would rewrite the same output."""
    beats = {h: b.beat_ms for h, b in read_beats(catalog, group.name).items()}
    now_ms = int(time.time() * 1000)
    live = [t for t in state.replays.values() if holder_alive(t, beats, now_ms, group.session_timeout_s)]
    if live:
        held = ", ".join(f"{t.window} by {t.holder}" for t in live)
        raise UsageError(f"group {group.name!r}: replays are in flight ({held}); wait for them to finish, then reset")
