"""The dead-row table: rows isolated from their shard (``on_poison: isolate``), and their re-drives.

Each isolated row is one row here: its shard, its source file and position, the error the
transform raised on it, and the row itself as JSON, for a person to read. A re-drive appends a
``redriven`` row naming the sink snapshot that took it in. The table is append-only, so the latest
row per (shard, file, position) is that row's state, and the table is also its history.

What the sink holds is decided by the sink's commits, not by this table: the shard's commit lists
the rows it left out (``KEY_ISOLATED``) in the same Iceberg commit as its output, and a re-drive's
commit names the rows it added. This table is written before the shard's commit; a Borrower that
dies between the two leaves rows here that no commit left out, which ``redrive_rows`` never re-drives.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import IntegerType, LongType, NestedField, StringType

from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.shards import Window, window_label
from icegroup.iceberg.protocol.sink_commit import KEY_GROUP, KEY_ISOLATED, KEY_REDRIVE, KEY_REPLAY, parse_commit
from icegroup.iceberg.store.registry import NAMESPACE, load_state
from icegroup.iceberg.store.tables import ensure_namespace, load_optional, walk_back

ISOLATED = "isolated"
REDRIVEN = "redriven"

SCHEMA = Schema(
    NestedField(1, "shard_id", StringType(), required=True),
    NestedField(2, "stream", StringType(), required=True),
    NestedField(3, "lease_id", StringType(), required=True),
    NestedField(4, "attempt", IntegerType(), required=True),
    NestedField(5, "file", StringType(), required=True),
    NestedField(6, "pos", LongType(), required=True),
    NestedField(7, "action", StringType(), required=True),
    NestedField(8, "error", StringType(), required=True),
    NestedField(9, "row", StringType(), required=True),
    NestedField(10, "sink_snapshot", LongType(), required=False),
    NestedField(11, "at_ms", LongType(), required=True),
)


@dataclass(frozen=True)
class DeadRow:
    """The latest word on one isolated row."""

    shard_id: str
    stream: str
    lease_id: str
    attempt: int
    file: str
    pos: int
    action: str
    error: str
    row: str
    sink_snapshot: int | None
    at_ms: int

    @property
    def key(self) -> tuple[str, str, int]:
        """The row's identity: its shard, file and position."""
        return (self.shard_id, self.file, self.pos)


def dead_rows_identifier(group: str) -> str:
    """Where a group's isolated rows live."""
    return f"{NAMESPACE}.dead_rows_{group}"


def record_rows(catalog: Catalog, group: str, rows: list[DeadRow]) -> None:
    """Append rows; created at the first isolated row. pyiceberg re-bases a concurrent append."""
    if not rows:
        return
    ensure_namespace(catalog, NAMESPACE)
    table = catalog.create_table_if_not_exists(dead_rows_identifier(group), schema=SCHEMA)
    table.append(pa.Table.from_pylist([{**row.__dict__} for row in rows], schema=SCHEMA.as_arrow()))


def latest_rows(catalog: Catalog, group: str) -> dict[tuple[str, str, int], DeadRow]:
    """Each isolated row's latest state, by (shard, file, position); empty while none was ever isolated."""
    table = load_optional(catalog, dead_rows_identifier(group))
    if table is None or table.current_snapshot() is None:
        return {}
    out: dict[tuple[str, str, int], DeadRow] = {}
    for found in sorted((DeadRow(**r) for r in table.scan().to_arrow().to_pylist()), key=lambda r: r.at_ms):
        out[found.key] = found
    return out


def mark_redriven(catalog: Catalog, group: str, rows: list[DeadRow], sink_snapshot: int) -> list[DeadRow]:
    """Record that ``rows`` are in the sink since ``sink_snapshot``; returns the rows written."""
    now = int(time.time() * 1000)
    done = [
        DeadRow(
            **{**row.__dict__, "action": REDRIVEN, "sink_snapshot": sink_snapshot, "at_ms": max(now, row.at_ms + 1)}
        )
        for row in rows
    ]
    record_rows(catalog, group, done)
    return done


@dataclass(frozen=True)
class IsolatedShard:
    """Rows a shard's commit left out, as the sink's history records them, and what took them in since, if anything."""

    shard_id: str
    stream: str
    window_start_ms: int | None
    to_snapshot: int
    positions: dict[str, list[int]]
    committed_in: int
    redriven_in: int | None = None

    @property
    def rows(self) -> int:
        """How many rows the commit left out."""
        return sum(len(found) for found in self.positions.values())


def isolated_in_sink(sink: Table, group: str, replay_window: Window, epoch: int) -> dict[str, IsolatedShard]:
    """Each shard of ``group`` whose newest commit left rows out, by shard id, read from the sink's commit summaries.

    The summaries, not the dead-row table, decide: the rows a commit left out are exactly the ones
    its output lacks, whatever a Borrower that died recorded before it. The rows are in the sink
    again (``redriven_in``) once a re-drive of the shard, or a replay of its window (which reads all
    of the shard's source rows), was committed after that commit. Commits of an earlier epoch are
    left out: a reset or a rebuild since re-consumes what it moved back over under new shard ids.
    """
    found: dict[str, IsolatedShard] = {}
    redrives: dict[str, int] = {}  # newer than the commit being looked at, as the walk goes back in time
    replays: dict[str, int] = {}
    for snapshot in walk_back(sink, None):
        summary = snapshot.summary.additional_properties if snapshot.summary is not None else {}
        if summary.get(KEY_GROUP) != group:
            continue
        if KEY_REDRIVE in summary:
            redrives.setdefault(summary[KEY_REDRIVE], snapshot.snapshot_id)
        if KEY_REPLAY in summary:
            replays.setdefault(summary[KEY_REPLAY], snapshot.snapshot_id)
        commit = parse_commit(snapshot.snapshot_id, snapshot.timestamp_ms, summary, 0)
        if KEY_ISOLATED not in summary or commit is None or commit.epoch < epoch:
            continue
        ranges = {shard.shard_id: shard for shard in commit.shards}
        for shard_id, positions in json.loads(summary[KEY_ISOLATED]).items():
            if shard_id in found:
                continue
            shard = ranges[shard_id]
            window = window_label(shard.window_start_ms, replay_window) if shard.window_start_ms is not None else None
            since = redrives.get(shard_id) or (replays.get(window) if window is not None else None)
            found[shard_id] = IsolatedShard(
                shard_id, shard.stream, shard.window_start_ms, shard.to_snapshot, positions, snapshot.snapshot_id, since
            )
    return found


def pending_redrives(catalog: Catalog, group: GroupConfig) -> list[IsolatedShard]:
    """The shards whose isolated rows are not in the sink yet, oldest commit first."""
    table = load_optional(catalog, group.sink)
    state = load_state(catalog, group.name).state
    shards = isolated_in_sink(table, group.name, group.replay_window, state.epoch).values() if table and state else []
    return sorted((s for s in shards if s.redriven_in is None), key=lambda s: s.committed_in)


def mark_taken_in(catalog: Catalog, group: str, shard: IsolatedShard, sink_snapshot: int) -> int:
    """Mark the shard's isolated dead rows re-driven in ``sink_snapshot``; returns how many were still open."""
    wanted = {(shard.shard_id, path, pos) for path, positions in shard.positions.items() for pos in positions}
    still = [row for key, row in latest_rows(catalog, group).items() if key in wanted and row.action == ISOLATED]
    mark_redriven(catalog, group, still, sink_snapshot)
    return len(still)


def taken_in_unmarked(catalog: Catalog, group: GroupConfig) -> list[IsolatedShard]:
    """Shards whose isolated rows a replay or re-drive took in, while the dead-row table still says isolated."""
    table = load_optional(catalog, group.sink)
    state = load_state(catalog, group.name).state
    if table is None or state is None:
        return []
    open_rows = {row.shard_id for row in latest_rows(catalog, group.name).values() if row.action == ISOLATED}
    found = isolated_in_sink(table, group.name, group.replay_window, state.epoch).values()
    return [s for s in found if s.redriven_in is not None and s.shard_id in open_rows]


def committed_whole(catalog: Catalog, group: GroupConfig) -> list[tuple[DeadRow, int]]:
    """Isolated dead rows whose shard then committed without leaving them out, with the sink snapshot that did.

    A Borrower records the rows it isolated before the commit that leaves them out. If it dies in
    between, the next attempt can commit the shard whole (the transform was fixed, or the failure
    went away): the rows are in that commit's output, and no re-drive will ever find them, since no
    commit left them out. Their records are behind, as after a replay of their window.
    """
    sink = load_optional(catalog, group.sink)
    state = load_state(catalog, group.name).state
    if sink is None or state is None:
        return []
    still = [row for row in latest_rows(catalog, group.name).values() if row.action == ISOLATED]
    if not still:
        return []
    left_out = isolated_in_sink(sink, group.name, group.replay_window, state.epoch)
    committed: dict[str, int] = {}
    for snapshot in walk_back(sink, None):
        summary = snapshot.summary.additional_properties if snapshot.summary is not None else {}
        commit = parse_commit(snapshot.snapshot_id, snapshot.timestamp_ms, summary, 0)
        if commit is None or commit.group != group.name or commit.epoch < state.epoch:
            continue
        for shard in commit.shards:
            committed.setdefault(shard.shard_id, snapshot.snapshot_id)
    found = []
    for row in still:
        isolated = left_out.get(row.shard_id)
        if row.shard_id in committed and (isolated is None or row.pos not in isolated.positions.get(row.file, [])):
            found.append((row, committed[row.shard_id]))
    return found
