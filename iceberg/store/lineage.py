"""The lineage table: a group's provenance, one Iceberg table per group, recorded by the Leader.

``icegroup.lineage_<group>`` holds an entry per (committed shard, source file) (see
``iceberg/protocol/lineage.py``). It is partitioned by replay window and by a bucket of the
source file, so a backwards query (a window, a sink row's window) and a forwards one (a source
file) each read a fraction of it.

The Leader records it from the sink's commits, like the registry: each tick whose sink moved walks
the sink's snapshots after the last one recorded, and commits their entries with that snapshot as
the table's cursor (``icegroup.lineage.through``). The commit is a compare-and-swap
(``commit.retry.num-retries=0``), so two Leaders cannot record the same commits twice, and it goes
before the registry's commit, so a registry that has reconciled a commit has its lineage recorded.
It outlives what it describes: entries keep their files after the source's snapshots expired and
their sink snapshots after the sink was compacted.

A question is answered from the table and from the sink's commits it has not recorded yet
(``lineage_now``), by the same rules, so an answer never waits for a tick.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.expressions.parser import parse as parse_filter
from pyiceberg.expressions.visitors import bind
from pyiceberg.io.pyarrow import expression_to_pyarrow
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.transforms import BucketTransform, IdentityTransform
from pyiceberg.types import IntegerType, LongType, NestedField, StringType

from icegroup.iceberg.errors import RegistryConflict, UsageError
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.lineage import LineageEntry, consumed, replayed, voided
from icegroup.iceberg.protocol.shards import Shard
from icegroup.iceberg.protocol.sink_commit import KEY_GROUP, KEY_RESET, parse_resets, resets_key
from icegroup.iceberg.store.metadata_commit import on_head
from icegroup.iceberg.store.registry import NAMESPACE, load_state
from icegroup.iceberg.store.sink_history import deleted_through, walk_commits
from icegroup.iceberg.store.tables import ensure_namespace, follows, load_optional

log = logging.getLogger(__name__)

KEY_THROUGH = "icegroup.lineage.through"
KEY_THROUGH_SEQUENCE = "icegroup.lineage.through-sequence"
FILE_BUCKETS = 8
_STRING, _LONG, _INT = StringType(), LongType(), IntegerType()
_TYPES = {
    "group": (_STRING, True),
    "window": (_STRING, True),
    "stream": (_STRING, True),
    "shard_id": (_STRING, True),
    "from_snapshot": (_LONG, False),
    "to_snapshot": (_LONG, True),
    "to_sequence": (_LONG, False),
    "source_file": (_STRING, False),
    "source_snapshot": (_LONG, False),
    "file_records": (_LONG, False),
    "file_bytes": (_LONG, False),
    "shard_rows": (_LONG, False),
    "sink_snapshot": (_LONG, True),
    "committed_at_ms": (_LONG, True),
    "kind": (_STRING, True),
    "generation": (_INT, True),
    "lease_id": (_STRING, True),
    "attempt": (_INT, True),
    "epoch": (_INT, True),
    "run_id": (_STRING, False),
    "config_hash": (_STRING, False),
}
SCHEMA = Schema(
    *(
        NestedField(i, f.name, _TYPES[f.name][0], required=_TYPES[f.name][1])
        for i, f in enumerate(dataclasses.fields(LineageEntry), start=1)
    )
)
SPEC = PartitionSpec(
    PartitionField(SCHEMA.find_field("window").field_id, 1000, IdentityTransform(), "window"),
    PartitionField(SCHEMA.find_field("source_file").field_id, 1001, BucketTransform(FILE_BUCKETS), "file_bucket"),
)
PROPERTIES = {
    "commit.retry.num-retries": "0",
    # Every tick that commits appends a manifest; merging keeps the manifest list short.
    "commit.manifest-merge.enabled": "true",
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": "20",
    # Exact bounds, so queries by sink snapshot or shard skip the files that cannot hold them.
    "write.metadata.metrics.default": "full",
}


def lineage_identifier(group: str) -> str:
    """The group's lineage table."""
    return f"{NAMESPACE}.lineage_{group}"


@dataclass(frozen=True)
class Recorded:
    """What one recording pass did: entries added, windows superseded by replays, shards voided by resets."""

    added: int = 0
    superseded: tuple[str, ...] = ()
    voided: int = 0
    through: int | None = None
    table: Table | None = field(default=None, compare=False, repr=False)


def load_lineage(catalog: Catalog, group: str) -> Table | None:
    """The group's lineage table; None before its first sink commit was recorded."""
    return load_optional(catalog, lineage_identifier(group))


def recorded_through(table: Table) -> int | None:
    """The last sink snapshot whose commits the table holds."""
    snapshot = table.current_snapshot()
    if snapshot is None or snapshot.summary is None:
        return None
    value = snapshot.summary.additional_properties.get(KEY_THROUGH)
    return int(value) if value is not None else None


def recorded_sequence(table: Table) -> int:
    """The sink sequence number of the table's cursor (0 when it was not recorded)."""
    snapshot = table.current_snapshot()
    if snapshot is None or snapshot.summary is None:
        return 0
    return int(snapshot.summary.additional_properties.get(KEY_THROUGH_SEQUENCE, "0"))


def walked_to(snapshots: list[Snapshot], cursor: int, sink: Table) -> bool:
    """Whether a walk back from the sink's head (``snapshots``, oldest first) reached the snapshot after ``cursor``."""
    if not snapshots:
        return True
    return follows(sink, snapshots[0], cursor)


@dataclass(frozen=True)
class Pending:
    """The sink's commits after the lineage table's cursor, as entries: what the next recording pass commits.

    ``entries`` are the new entries; ``superseded`` windows and ``drop_shards`` are stored entries
    that replays replaced and resets voided. ``head`` is the sink snapshot they run through (None:
    nothing to record) and ``commits`` counts the group's commits among them.
    """

    entries: list[LineageEntry] = field(default_factory=list)
    superseded: frozenset[str] = frozenset()
    drop_shards: frozenset[str] = frozenset()
    head: Snapshot | None = None
    cursor: int | None = None
    commits: int = 0

    def current(self, stored: Iterable[LineageEntry]) -> list[LineageEntry]:
        """Stored entries as they stand once these commits are recorded, without the new entries."""
        return [e for e in stored if e.window not in self.superseded and e.shard_id not in self.drop_shards]


def pending_lineage(
    group: GroupConfig, shards: Mapping[str, Shard], sink: Table | None, table: Table | None
) -> Pending:
    """The entries of the sink's commits since the lineage table's cursor, read and not recorded.

    ``sink`` and ``table`` (the lineage table) as loaded (None: they do not exist yet); ``shards``
    are the registry's shards before the commits are reconciled: they still name their files.
    """
    head = sink.current_snapshot() if sink is not None else None
    if sink is None or head is None:
        return Pending()
    # A group started again after `icegroup delete` records from where the deleted group's commits end.
    cursor = recorded_through(table) if table is not None else deleted_through(sink, group.name)
    if cursor == head.snapshot_id or (table is not None and recorded_sequence(table) >= (head.sequence_number or 1)):
        return Pending(cursor=cursor)  # recorded through this head, or past it (the table was read after the sink)
    walked = list(walk_commits(sink, cursor))
    walked.reverse()
    if table is not None and cursor is not None and not walked_to([w.snapshot for w in walked], cursor, sink):
        # Sink snapshots back to the cursor were expired by hand: keep to what is newer than it.
        after = recorded_sequence(table)
        log.warning(
            "group %s: sink history back to lineage cursor %d is expired; recording after sequence %d",
            group.name, cursor, after,
        )  # fmt: skip
        walked = [w for w in walked if (w.snapshot.sequence_number or 0) > after]
    pending: list[LineageEntry] = []
    superseded: set[str] = set()
    drop_shards: set[str] = set()
    commits = 0
    for written in walked:
        props = written.snapshot.summary.additional_properties if written.snapshot.summary is not None else {}
        commit, replay = written.commit, written.replay
        if commit is not None and commit.group == group.name:
            pending.extend(consumed(commit, shards, group.replay_window))
            commits += 1
            continue
        if replay is not None and replay.group == group.name:
            stored = [] if replay.window in superseded or table is None else window_entries(table, replay.window)
            earlier = [e for e in stored if e.shard_id not in drop_shards]
            mine = [e for e in pending if e.window == replay.window]
            pending = [e for e in pending if e.window != replay.window] + replayed(replay, earlier + mine)
            superseded.add(replay.window)
            commits += 1
        elif KEY_RESET in props and props.get(KEY_GROUP) == group.name:
            resets = parse_resets(sink.properties.get(resets_key(group.name), ""))
            newest = max((r.epoch for r in resets), default=0)
            stored = [] if table is None else entries(table, f"epoch < {newest}")
            drop_shards |= voided(stored, resets)
            gone = voided(pending, resets)
            pending = [e for e in pending if e.shard_id not in gone]
            commits += 1
    return Pending(pending, frozenset(superseded), frozenset(drop_shards), head, cursor, commits)


def record_lineage(
    catalog: Catalog, group: GroupConfig, shards: Mapping[str, Shard], sink: Table | None, table: Table | None
) -> Recorded:
    """Record the entries of the sink's commits since the lineage table's cursor; one CAS commit, or none.

    ``sink`` and ``table`` (the lineage table) are as the tick loaded them (None: they do not exist
    yet); the catalog creates the lineage table at the first commit to record, and
    ``Recorded.table`` is the table as it stands after this pass. ``shards`` are the registry's
    shards before this tick reconciles: the ones the new commits committed still name their files.
    Raises ``RegistryConflict`` if another Leader recorded first.
    """
    found = pending_lineage(group, shards, sink, table)
    if found.head is None:
        return Recorded(through=found.cursor, table=table)
    if not found.entries and not found.superseded and not found.drop_shards:
        return Recorded(through=found.cursor, table=table)
    head = found.head
    table = table if table is not None else create_lineage(catalog, group.name)
    commit_entries(
        table, found.entries, set(found.superseded), set(found.drop_shards), head.snapshot_id, head.sequence_number or 0
    )
    log.info(
        "group %s: lineage recorded through sink snapshot %d: %d entries, %d windows superseded, %d shards voided",
        group.name, head.snapshot_id, len(found.entries), len(found.superseded), len(found.drop_shards),
    )  # fmt: skip
    return Recorded(
        len(found.entries), tuple(sorted(found.superseded)), len(found.drop_shards), head.snapshot_id, table
    )


def commit_entries(
    table: Table,
    pending: list[LineageEntry],
    superseded: set[str],
    drop_shards: set[str],
    through: int,
    through_sequence: int,
) -> None:
    """Drop superseded windows and voided shards, add the new entries: one transaction, one CAS."""
    marker = {KEY_THROUGH: str(through), KEY_THROUGH_SEQUENCE: str(through_sequence)}
    drops = []
    if superseded:
        drops.append(is_in("window", superseded))
    if drop_shards:
        drops.append(is_in("shard_id", drop_shards))
    try:
        with on_head(table) as head, head.transaction() as tx:  # one CAS on main's head (``metadata_commit``)
            if drops:
                tx.delete(" OR ".join(drops), snapshot_properties={} if pending else marker)
            if pending:
                tx.append(to_arrow(pending), snapshot_properties=marker)
    except CommitFailedException as exc:
        raise RegistryConflict(f"lineage table {'.'.join(table.name())} moved while recording it: {exc}") from exc


def create_lineage(catalog: Catalog, group: str) -> Table:
    """Create the group's lineage table; losing the race to another Leader is fine."""
    ensure_namespace(catalog, NAMESPACE)
    return catalog.create_table_if_not_exists(
        lineage_identifier(group), SCHEMA, partition_spec=SPEC, properties=PROPERTIES
    )


def to_arrow(found: Iterable[LineageEntry]) -> pa.Table:
    """Entries as rows of the table's schema."""
    return pa.Table.from_pylist([dataclasses.asdict(e) for e in found], schema=SCHEMA.as_arrow())


def quoted(value: str) -> str:
    """A string literal of pyiceberg's filter syntax."""
    return "'" + value.replace("'", "''") + "'"


def is_in(column: str, values: Iterable[str]) -> str:
    """``column IN (...)`` in pyiceberg's filter syntax."""
    return f"{column} IN ({', '.join(quoted(v) for v in sorted(values))})"


def entries(table: Table, row_filter: str) -> list[LineageEntry]:
    """The entries matching ``row_filter``; partition and column bounds prune the files read."""
    return [LineageEntry(**row) for row in table.scan(row_filter=row_filter).to_arrow().to_pylist()]


def window_entries(table: Table, window: str) -> list[LineageEntry]:
    """The entries of one replay window: one partition's files."""
    return entries(table, f"window = {quoted(window)}")


def shard_entries(table: Table, windows_by_shard: Mapping[str, str]) -> list[LineageEntry]:
    """The entries of the given shards, each read from its own window's partition."""
    if not windows_by_shard:
        return []
    clauses = [
        f"(window = {quoted(window)} AND {is_in('shard_id', (s for s, w in windows_by_shard.items() if w == window))})"
        for window in sorted(set(windows_by_shard.values()))
    ]
    return entries(table, " OR ".join(clauses))


@dataclass(frozen=True)
class LineageNow:
    """The lineage table (None before its first recording) and the entries of the commits after its cursor."""

    table: Table | None
    pending: Pending

    @property
    def through(self) -> int | None:
        """The last sink snapshot the table has recorded."""
        return recorded_through(self.table) if self.table is not None else None

    @property
    def unrecorded(self) -> int:
        """How many of the group's sink commits the table has not recorded yet (they are answered all the same)."""
        return self.pending.commits

    def entries(self, row_filter: str) -> list[LineageEntry]:
        """The current entries matching ``row_filter`` (pyiceberg's filter syntax on the entries' fields)."""
        stored = entries(self.table, row_filter) if self.table is not None else []
        return self.pending.current(stored) + matching(self.pending.entries, row_filter)

    def shard_entries(self, windows_by_shard: Mapping[str, str]) -> list[LineageEntry]:
        """The current entries of the given shards, each in its own window."""
        stored = shard_entries(self.table, windows_by_shard) if self.table is not None else []
        new = [e for e in self.pending.entries if windows_by_shard.get(e.shard_id) == e.window]
        return self.pending.current(stored) + new


def lineage_now(catalog: Catalog, group: GroupConfig) -> LineageNow:
    """The group's lineage as it stands, or an error when the group has committed nothing yet.

    The sink is read first, then the registry, then the lineage table: the Leader records a commit's
    lineage before its registry drops the commit's shards, so every commit in the sink read that the
    table read has not recorded still has its shards, and their files, in the registry read.
    """
    sink = load_optional(catalog, group.sink)
    state = load_state(catalog, group.name).state
    table = load_lineage(catalog, group.name)
    pending = pending_lineage(group, state.shards if state is not None else {}, sink, table)
    if table is None and not pending.commits:
        raise UsageError(
            f"group {group.name!r} has no lineage recorded yet: it has committed no output to {group.sink} "
            f"(run `icegroup consume {group.name}` or let its sensor tick)"
        )
    return LineageNow(table, pending)


def matching(found: list[LineageEntry], row_filter: str) -> list[LineageEntry]:
    """The entries among ``found`` that ``row_filter`` keeps, evaluated as the table's scan would."""
    if not found:
        return []
    kept = to_arrow(found).filter(expression_to_pyarrow(bind(SCHEMA, parse_filter(row_filter), case_sensitive=True)))
    return [LineageEntry(**row) for row in kept.to_pylist()]
