"""Incremental shard planning: read only what the snapshots after the group's position added.

Cost is one manifest list (the newest snapshot's, as long as the table's count of manifests) plus the
manifests the new snapshots wrote. Iceberg's ``BaseIncrementalAppendScan`` reads every new snapshot's
manifest list, which costs the gap times that length (``added_files``).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass

from pyiceberg.manifest import DataFile, ManifestContent, ManifestEntryStatus, ManifestFile
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import BooleanType, IntegerType, LongType, StringType
from pyiceberg.utils.concurrent import ExecutorFactory

from icegroup.iceberg.errors import HistoryGap, SourceBlocked
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.shards import FileEntry, PartitionValue, SnapshotInfo
from icegroup.iceberg.protocol.sink_commit import KEY_GROUP, KEY_REPLAY, KEY_RESET
from icegroup.iceberg.protocol.stream_filter import may_match, pruning_predicate
from icegroup.iceberg.store.tables import follows, history_cut_before, walk_back

APPEND = "append"
REPLACE = "replace"
PRUNABLE_TYPES = (StringType, IntegerType, LongType, BooleanType)


@dataclass(frozen=True)
class Plan:
    """What one tick found after the planning cursor.

    ``read_at`` is set when the snapshots that added ``files`` have expired (``iceberg/history_gap.py``):
    the shards cut from them read their files as of that snapshot, not by an incremental scan.
    ``min_row_id`` is set when those files also hold rows read before (a compaction in the gap, on a
    format-v3 source): only rows from that row id on are new.
    """

    appends: list[SnapshotInfo]
    files: list[FileEntry]
    through: SnapshotInfo | None
    skipped: list[SnapshotInfo]
    remaining: int
    blocked: SourceBlocked | None = None
    pruned: int = 0
    read_at: int | None = None
    min_row_id: int | None = None


def snapshot_info(snapshot: Snapshot) -> SnapshotInfo:
    """The metadata-only view of a snapshot that planning and shard cutting use."""
    return SnapshotInfo(
        snapshot_id=snapshot.snapshot_id,
        parent_id=snapshot.parent_snapshot_id,
        sequence_number=snapshot.sequence_number or 0,
        timestamp_ms=snapshot.timestamp_ms,
        schema_id=snapshot.schema_id,
        operation=snapshot.summary.operation.value if snapshot.summary else APPEND,
    )


def new_snapshots(table: Table, after: int | None, group: GroupConfig) -> list[SnapshotInfo]:
    """Snapshots on main after ``after``, oldest first; an unreachable position is an error.

    Reaching a parent that is no longer in the metadata before reaching ``after`` means history the
    group still needs was expired: ``HistoryGap``, which ``iceberg/history_gap.py`` plans across by
    comparing files, and whose message is the error where nothing can.
    """
    chain = list(walk_back(table, after))
    if chain:
        oldest = chain[-1]
        if not follows(table, oldest, after) or (after is None and history_cut_before(table, oldest)):
            where = "the table's start" if after is None else f"the group's position {after}"
            raise HistoryGap(
                f"group {group.name!r}: the history of source {group.source!r} after {where} has expired; the "
                f"oldest snapshot still reachable from its head is {oldest.snapshot_id}",
                after,
            )
    return [snapshot_info(s) for s in reversed(chain)]


def plan_increment(
    table: Table, after: int | None, group: GroupConfig, followed: Callable[[], Collection[int]] = frozenset
) -> Plan:
    """Plan at most ``max_snapshots_per_tick`` snapshots after ``after``: their added data files by stream.

    Planning stops *at* a non-append snapshot it cannot step over: the appends before it are planned,
    and ``blocked`` holds the error naming it (the tick raises it once nothing is left to run), so a
    chained group can consume everything before an upstream replay and then follow it. ``followed``
    (read once, only when needed) lists the upstream replays this group followed (``icegroup replay
    --follow-upstream``); those are stepped over. Files of streams the group's filter provably cannot
    match are left out (``pruning_predicate``; ``pruned`` counts them): no shard is cut for them, and
    an append that added only such files moves the planning cursor and nothing else.
    """
    pending = new_snapshots(table, after, group)
    batch = pending[: group.max_snapshots_per_tick]
    blocked: SourceBlocked | None = None
    stop = first_blocking(batch, group, followed)
    if stop is not None:
        blocked = non_append_error(table, batch[stop], group)
        batch = batch[:stop]
    appends = [info for info in batch if info.operation == APPEND]
    skipped = [info for info in batch if info.operation != APPEND]
    predicate = pruning_predicate(group.filter, identity_columns(table))
    found = added_files(table, appends)
    files = [entry for entry in found if may_match(predicate, dict(entry.identity))]
    return Plan(
        appends=appends,
        files=files,
        pruned=len(found) - len(files),
        through=batch[-1] if batch else None,
        skipped=skipped,
        remaining=len(pending) - len(batch),
        blocked=blocked,
    )


def first_blocking(
    snapshots: Sequence[SnapshotInfo], group: GroupConfig, followed: Callable[[], Collection[int]]
) -> int | None:
    """The index of the first snapshot planning cannot step over, if any.

    Appends are planned, compactions (``replace``) change no rows, and with ``non_append: skip``
    every other snapshot is stepped over too; so are the upstream replays this group followed
    (``followed``, read once and only when a candidate shows up).
    """
    stepped_over: Collection[int] | None = None
    for index, info in enumerate(snapshots):
        if info.operation in (APPEND, REPLACE) or group.non_append == "skip":
            continue
        if stepped_over is None:
            stepped_over = followed()
        if info.snapshot_id not in stepped_over:
            return index
    return None


def blocked_at(
    table: Table, after: int | None, group: GroupConfig, followed: Callable[[], Collection[int]]
) -> tuple[SourceBlocked, bool] | None:
    """Where planning after ``after`` will stop, from the snapshot log alone (no manifest is read).

    ``describe`` asks this of the whole history ahead of the group, where a tick plans only
    ``max_snapshots_per_tick`` of it. With the stop comes whether appends before it are still to be
    planned: a group with those is heading for the stop, not stopped at it yet.
    """
    pending = new_snapshots(table, after, group)
    stop = first_blocking(pending, group, followed)
    if stop is None:
        return None
    return non_append_error(table, pending[stop], group), any(info.operation == APPEND for info in pending[:stop])


def non_append_error(table: Table, info: SnapshotInfo, group: GroupConfig) -> SourceBlocked:
    """The error for a source snapshot that deleted rows: what it was, and this group's choices."""
    snapshot = table.snapshot_by_id(info.snapshot_id)
    props = snapshot.summary.additional_properties if snapshot is not None and snapshot.summary else {}
    by = props.get(KEY_GROUP, "?")
    where = f"group {group.name!r}: source snapshot {info.snapshot_id} of {group.source!r}"
    if KEY_REPLAY in props:
        follow = f"icegroup replay {group.name} --follow-upstream --execute"
        return SourceBlocked(
            f"{where} is a replay of window {props[KEY_REPLAY]} by group {by!r}: it replaced rows this group "
            f"consumed with their new version. Run `{follow}` to "
            "replay this group's windows that consumed them (the group then goes on past it), or set non_append: "
            f"skip to keep this group's output of the old version. Next time, `icegroup replay {by} --window "
            f"{props[KEY_REPLAY]} --cascade --execute` does both replays at once",
            info.snapshot_id,
            f"a replay of window {props[KEY_REPLAY]} upstream",
            f"run `{follow}`, set follow_upstream: true, or set non_append: skip",
            followable=True,
        )
    if KEY_RESET in props:
        return SourceBlocked(
            f"{where} is a reset ({props[KEY_RESET]}) of group {by!r}: it deleted rows this group consumed, which "
            "the upstream group consumes again. A downstream group cannot follow it without repeating or losing "
            "rows. Set non_append: skip to keep this group's output of the old version (the rows consumed again "
            "upstream are consumed again here too), or consume the upstream sink with a new group",
            info.snapshot_id,
            f"a reset of group {by!r} upstream",
            "set non_append: skip, or consume the upstream sink with a new group",
        )
    return SourceBlocked(
        f"{where} is an {info.operation!r} snapshot, which an append-only consumer cannot follow without losing "
        "or repeating rows. Set non_append: skip to ignore such snapshots, or consume the table "
        "with a new group starting after it.",
        info.snapshot_id,
        f"an {info.operation!r} snapshot",
        "set non_append: skip, or start a new group after it",
    )


def stream_key(spec_id: int, path: str) -> str:
    """A stream is one partition of one spec: ``<spec id>:<partition path>``."""
    return f"{spec_id}:{path or 'unpartitioned'}"


def identity_values(spec: PartitionSpec, schema: Schema, data_file: DataFile) -> tuple[tuple[str, PartitionValue], ...]:
    """Source column = value for each identity partition field of a plain type.

    Every file of a stream shares these values, so they are an exact filter for the stream that
    Iceberg can prune files with, where a shard is read as of a snapshot. Fields with other transforms
    or types are left out; that read's filter on ``_file`` keeps it exact without them.
    """
    values = []
    for position, field in enumerate(spec.fields):
        column = schema.find_field(field.source_id)
        if isinstance(field.transform, IdentityTransform) and isinstance(column.field_type, PRUNABLE_TYPES):
            values.append((schema.find_column_name(field.source_id) or column.name, data_file.partition[position]))
    return tuple(values)


def identity_columns(table: Table) -> frozenset[str]:
    """Columns some partition spec of the table holds by identity, as ``identity_values`` names them."""
    schema = table.schema()
    columns = set()
    for spec in table.specs().values():
        for field in spec.fields:
            if field.source_id not in schema.field_ids:
                continue  # dropped since that spec was current
            column = schema.find_field(field.source_id)
            if isinstance(field.transform, IdentityTransform) and isinstance(column.field_type, PRUNABLE_TYPES):
                columns.add(schema.find_column_name(field.source_id) or column.name)
    return frozenset(columns)


def added_files(table: Table, appends: list[SnapshotInfo]) -> list[FileEntry]:
    """Data files added by the given append snapshots, oldest snapshot first, opening only manifests written by them.

    One manifest list, the newest snapshot's, names the manifests the others wrote too: reading each
    snapshot's own list instead costs the square of the gap, since every list is as long as the
    table's count of manifests. A merge-append in the gap keeps each merged file's entry, now
    ``EXISTING``, with the snapshot that added it. A snapshot whose files that list does not account
    for (its summary's ``added-data-files``: a delete, overwrite or manifest rewrite after it took
    some, or a writer that keeps no counts) is read from its own list, as Iceberg's incremental scan
    reads every one. Manifests are read in parallel,
    which on object storage turns one round trip per manifest into a few.
    """
    ids = {s.snapshot_id for s in appends}
    snapshots = [s for s in (table.snapshot_by_id(info.snapshot_id) for info in appends) if s is not None]
    if not snapshots:
        return []
    found = files_in(table, ids, snapshots[-1].manifests(table.io))
    unaccounted = [s for s in snapshots if len(found.get(s.snapshot_id, ())) != added_data_files(s)]
    if unaccounted:
        own = [m for s in unaccounted for m in s.manifests(table.io) if m.added_snapshot_id == s.snapshot_id]
        again = files_in(table, {s.snapshot_id for s in unaccounted}, own, (ManifestEntryStatus.ADDED,))
        found.update({s.snapshot_id: again.get(s.snapshot_id, {}) for s in unaccounted})
    return [entry for s in snapshots for entry in found.get(s.snapshot_id, {}).values()]


def added_data_files(snapshot: Snapshot) -> int | None:
    """How many data files ``snapshot`` added, as its summary says; None when its writer keeps no such counts.

    Iceberg's writers (Java's and pyiceberg's) leave a count out when it is 0, but always write the total.
    """
    counts = snapshot.summary.additional_properties if snapshot.summary else {}
    if "added-data-files" in counts:
        return int(counts["added-data-files"])
    return 0 if "total-data-files" in counts else None


def files_in(
    table: Table,
    ids: set[int],
    manifests: Iterable[ManifestFile],
    statuses: Collection[ManifestEntryStatus] = (ManifestEntryStatus.ADDED, ManifestEntryStatus.EXISTING),
) -> dict[int, dict[str, FileEntry]]:
    """The live files that snapshots ``ids`` added, by snapshot and path, from the data manifests they wrote.

    A merge-append keeps a merged file's entry, now ``EXISTING``, with the snapshot that added it.
    """
    specs = table.specs()
    schema = table.schema()
    wanted = {m.manifest_path: m for m in manifests if m.content == ManifestContent.DATA and m.added_snapshot_id in ids}

    def read(manifest: ManifestFile) -> list[FileEntry]:
        spec = specs[manifest.partition_spec_id]
        return [
            file_entry(spec, schema, entry.data_file, entry.snapshot_id)
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True)
            if entry.status in statuses and entry.snapshot_id in ids
        ]

    found: dict[int, dict[str, FileEntry]] = {}
    for entries in ExecutorFactory.get_or_create().map(read, wanted.values()):
        for entry in entries:
            found.setdefault(entry.snapshot_id, {})[entry.path] = entry
    return found


def file_entry(spec: PartitionSpec, schema: Schema, data_file: DataFile, snapshot_id: int) -> FileEntry:
    """What planning keeps of a data file that ``snapshot_id`` added."""
    return FileEntry(
        stream=stream_key(spec.spec_id, spec.partition_to_path(data_file.partition, schema)),
        snapshot_id=snapshot_id,
        path=data_file.file_path,
        record_count=data_file.record_count,
        size_bytes=data_file.file_size_in_bytes,
        identity=identity_values(spec, schema, data_file),
    )
