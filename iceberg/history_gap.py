"""Planning across expired history: what the files live now hold that the group's position did not.

``iceberg/protocol/file_diff.py`` explains why this is exact for a table that only grew in the gap.
Here that idea meets the table: the manifests of the position's snapshot (kept by the group's
branch) and of the head are read, the data files live now but not at the position become the
planned files, and the snapshots that added them stand in for the expired ones. Each snapshot keeps
its real id and sequence number (a manifest entry records both), so lineage still names the source
snapshot that added each row. Shards cut from them read their files as of the head (``Plan.read_at``),
because the snapshots an incremental scan would walk have expired.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass

from pyiceberg.manifest import DataFile, ManifestContent, ManifestEntry, ManifestFile
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot

from icegroup.iceberg.errors import HistoryGap, SourceBlocked, SourceError
from icegroup.iceberg.protocol.file_diff import GapDiff, GapFigures, diff_live, gap_stop
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.shards import FileEntry, SnapshotInfo
from icegroup.iceberg.protocol.source_branch import ref_name
from icegroup.iceberg.protocol.stream_filter import may_match, pruning_predicate
from icegroup.iceberg.shards import (
    APPEND,
    Plan,
    file_entry,
    first_blocking,
    identity_columns,
    non_append_error,
    plan_increment,
    snapshot_info,
)
from icegroup.iceberg.store.tables import walk_back

# The reserved field id of a format-v3 row's ``_row_id`` (Iceberg's ``MetadataColumns.ROW_ID``).
ROW_ID_FIELD_ID = 2147483540
# Manifest path -> (manifest, its live entries).
_Entries = dict[str, tuple[ManifestFile, list[ManifestEntry]]]


@dataclass(frozen=True)
class Gap:
    """The expired stretch after a group's position: the files added in it, and what else changed."""

    position: int | None
    head: SnapshotInfo
    files: list[FileEntry]
    snapshots: list[SnapshotInfo]
    diff: GapDiff
    figures: GapFigures
    row_floor: int | None = None


def plan_source(
    table: Table,
    after: int | None,
    group: GroupConfig,
    followed: Callable[[], Collection[int]] = frozenset,
    ranges_pending: bool = False,
) -> Plan:
    """``plan_increment``, or, when the history after ``after`` has expired, the plan across the gap.

    With ``ranges_pending`` (shards planned by snapshot range are not committed yet) the gap waits:
    planning across it moves the group's branch to the head, whose ancestry no longer reaches those
    shards' snapshots, and another expiry could then take them.
    """
    try:
        return plan_increment(table, after, group, followed)
    except HistoryGap as gap:
        if ranges_pending:
            position_snapshot(table, gap.position, group)
            return Plan(appends=[], files=[], through=None, skipped=[], remaining=0)
        return plan_across_gap(table, group, gap, followed)


def plan_across_gap(
    table: Table, group: GroupConfig, gap: HistoryGap, followed: Callable[[], Collection[int]] = frozenset
) -> Plan:
    """Plan every file added since the group's position up to the head, in one step; stop at a rewrite.

    The plan reaches the head at once, whatever ``max_snapshots_per_tick`` says: there are no
    snapshots in between to stop at. A gap in which files live at the position went away (a
    compaction, an overwrite) is planned only on a format-v3 source, whose rows keep their row id
    through a rewrite: the rows from the table's next-row-id at the position on are exactly the new
    ones (``Shard.min_row_id``). Elsewhere, and where delete files appeared, the plan holds the stop
    (``blocked``), with the figures of what is in question.
    """
    tail = [snapshot_info(s) for s in reversed(list(walk_back(table, None)))]  # what is left after the gap
    stop = first_blocking(tail, group, followed)
    if stop is not None:
        return Plan(
            appends=[], files=[], through=None, skipped=[], remaining=0,
            blocked=non_append_error(table, tail[stop], group),
        )  # fmt: skip
    found = read_gap(table, gap.position, group)
    by_row_id = not found.diff.append_only and found.row_floor is not None and not found.diff.new_deletes
    if not found.diff.append_only and not by_row_id:
        message = gap_stop(group.name, group.source, gap.position, found.head.snapshot_id, found.figures)
        blocked = SourceBlocked(
            message,
            found.head.snapshot_id,
            "a compaction, delete or overwrite in expired history",
            f"icegroup reset {group.name} --to-latest --execute, or a new group",
        )
        return Plan(appends=[], files=[], through=None, skipped=[], remaining=0, blocked=blocked)
    predicate = pruning_predicate(group.filter, identity_columns(table))
    files = [entry for entry in found.files if may_match(predicate, dict(entry.identity))]
    return Plan(
        appends=found.snapshots,
        files=files,
        pruned=len(found.files) - len(files),
        through=found.head,
        skipped=[],
        remaining=0,
        read_at=found.head.snapshot_id,
        min_row_id=found.row_floor if by_row_id else None,
    )


def position_snapshot(table: Table, position: int | None, group: GroupConfig) -> Snapshot | None:
    """The snapshot of the group's position (None: the table's start); an error when it is gone.

    The group's branch keeps it. Without it, nothing says which of today's files the group has read,
    and no waiting helps. A table dropped and created again under the source's name has none of the
    group's snapshots either: a reset cannot reach back past the new table's start, so the remedy
    for it is a new start of the group's state, which keeps the sink.
    """
    at = table.snapshot_by_id(position) if position is not None else None
    if position is not None and at is None:
        raise SourceError(
            f"group {group.name!r}: position {position} of source {group.source!r} is no longer in its metadata "
            f"(expired, or its branch {ref_name(group.name)} was removed, or the table was dropped and created "
            "again), and the snapshots after it are gone too, so nothing says which of the files live now the "
            f"group has read. Restore the source's history, or `icegroup reset {group.name} --to-latest "
            f"--execute` and accept the gap; for a table created again, `icegroup delete {group.name} --execute` "
            "(once no lease is in flight) and consume again: the group starts on the new table from its start "
            "config (the table's first snapshot by default), and the sink keeps its rows"
        )
    return at


def read_gap(table: Table, position: int | None, group: GroupConfig) -> Gap:
    """Compare the files live at ``position`` (None: the table's start) with those live at the head.

    The position's snapshot must still be in the metadata: the group's branch keeps it. Without
    it, nothing says which of today's files the group has read.
    """
    head = table.current_snapshot()
    if head is None:
        raise SourceError(f"group {group.name!r}: source {group.source!r} has no snapshot")
    at = position_snapshot(table, position, group)
    head_manifests = head.manifests(table.io)
    at_manifests = at.manifests(table.io) if at is not None else []
    shared = {m.manifest_path for m in head_manifests} & {m.manifest_path for m in at_manifests}
    head_data, head_deletes = live_entries(table, head_manifests, shared)
    at_data, at_deletes = live_entries(table, at_manifests, shared)
    diff = diff_live(_paths(at_data), _paths(head_data), _paths(at_deletes), _paths(head_deletes))
    added = _files(table, head_data, diff.added)
    removed_rows = sum(f.record_count for f in _data_files(at_data, diff.removed))
    figures = GapFigures(
        removed_files=len(diff.removed),
        removed_rows=removed_rows,
        added_files=len(added),
        added_rows=sum(f.record_count for f in added),
        new_deletes=len(diff.new_deletes),
    )
    return Gap(
        position=position,
        head=snapshot_info(head),
        files=added,
        snapshots=stand_ins(table, head, added, _sequences(head_data, diff.added)),
        diff=diff,
        figures=figures,
        row_floor=row_floor(table, at) if kept_row_ids(head_data, diff.added) >= removed_rows else None,
    )


def kept_row_ids(entries: _Entries, paths: frozenset[str]) -> int:
    """Rows among the files at ``paths`` that carry their ``_row_id`` (its column bounds are there).

    A writer that keeps row lineage (Iceberg 1.10 and later) writes each rewritten row's ``_row_id``
    into the file it rewrites it to; an older one (1.9) leaves it out, and the rows take new ids,
    which would read as new rows. So the rows of the files a rewrite removed must all be accounted
    for by rows that kept their ids, or the watermark is no proof; a copy-on-write delete that kept
    them leaves fewer, and stops the group too, which is safe.
    """
    return sum(
        e.data_file.record_count
        for _, live in entries.values()
        for e in live
        if e.data_file.file_path in paths and ROW_ID_FIELD_ID in (e.data_file.lower_bounds or {})
    )


def row_floor(table: Table, position: Snapshot | None) -> int | None:
    """The table's next-row-id at ``position`` (None: its start): every row from it on was added after.

    Only a format-v3 table assigns row ids (row lineage), and a rewrite keeps them. None where the
    table has none, or the position's snapshot predates them.
    """
    if table.metadata.format_version < 3:
        return None
    if position is None:
        return 0
    if position.first_row_id is None or position.added_rows is None:
        return None
    return position.first_row_id + position.added_rows


def live_added_between(table: Table, low: int, high: int) -> list[tuple[FileEntry, int]]:
    """Data files live at the head whose data sequence number is in (``low``, ``high``], with that number.

    They hold the rows committed in that stretch that are still in the table, whether or not its
    snapshots remain: what a move across expired history skips. A compaction in the stretch can
    carry rows over to a later number, and a delete removes some, so the figure is what is live,
    not what was committed. Manifests added at or before ``low`` cannot hold such files and are not read.
    """
    head = table.current_snapshot()
    if head is None:
        return []
    specs, schema = table.specs(), table.schema()
    found = []
    for manifest in head.manifests(table.io):
        if manifest.content != ManifestContent.DATA or manifest.sequence_number <= low:
            continue
        spec = specs[manifest.partition_spec_id]
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
            sequence = entry.sequence_number or 0
            if low < sequence <= high:
                found.append((file_entry(spec, schema, entry.data_file, entry.snapshot_id or 0), sequence))
    return found


def live_entries(table: Table, manifests: list[ManifestFile], shared: set[str]) -> tuple[_Entries, _Entries]:
    """The live entries of the data manifests and of the delete manifests, by path; ``shared`` ones are not read.

    A manifest both snapshots list holds the same live files in both, so it cannot differ.
    """
    data: _Entries = {}
    deletes: _Entries = {}
    for manifest in manifests:
        if manifest.manifest_path in shared:
            continue
        entries = list(manifest.fetch_manifest_entry(table.io, discard_deleted=True))
        (data if manifest.content == ManifestContent.DATA else deletes)[manifest.manifest_path] = (manifest, entries)
    return data, deletes


def stand_ins(table: Table, head: Snapshot, files: list[FileEntry], sequences: dict[int, int]) -> list[SnapshotInfo]:
    """The snapshots that added ``files``, oldest first; an expired one is rebuilt from its manifest entries.

    An expired snapshot keeps its id and sequence number (every manifest entry records both). Its
    commit time is gone; it takes that of the oldest snapshot still reachable after the gap, which
    is no earlier than its own, so windows stay in commit order. Its schema is taken to be the
    head's, which is the schema its files are read with.
    """
    reachable = {s.snapshot_id: s for s in table.snapshots()}
    after_gap = head
    while after_gap.parent_snapshot_id in reachable:
        after_gap = reachable[after_gap.parent_snapshot_id]
    infos = {}
    for entry in files:
        snapshot = reachable.get(entry.snapshot_id)
        infos[entry.snapshot_id] = (
            snapshot_info(snapshot)
            if snapshot is not None
            else SnapshotInfo(
                snapshot_id=entry.snapshot_id,
                parent_id=None,
                sequence_number=sequences.get(entry.snapshot_id, 0),
                timestamp_ms=after_gap.timestamp_ms,
                schema_id=head.schema_id,
                operation=APPEND,
            )
        )
    return sorted(infos.values(), key=lambda info: info.sequence_number)


def _paths(entries: _Entries) -> dict[str, list[str]]:
    return {path: [e.data_file.file_path for e in live] for path, (_, live) in entries.items()}


def _data_files(entries: _Entries, paths: frozenset[str]) -> list[DataFile]:
    return [e.data_file for _, live in entries.values() for e in live if e.data_file.file_path in paths]


def _sequences(entries: _Entries, paths: frozenset[str]) -> dict[int, int]:
    return {
        e.snapshot_id: e.sequence_number or 0
        for _, live in entries.values()
        for e in live
        if e.data_file.file_path in paths and e.snapshot_id is not None
    }


def _files(table: Table, entries: _Entries, paths: frozenset[str]) -> list[FileEntry]:
    specs, schema = table.specs(), table.schema()
    return [
        file_entry(specs[manifest.partition_spec_id], schema, e.data_file, e.snapshot_id or 0)
        for manifest, live in entries.values()
        for e in live
        if e.data_file.file_path in paths
    ]
