"""Small helpers over pyiceberg tables that several modules share."""

from __future__ import annotations

from collections.abc import Iterator

from pyiceberg.catalog import Catalog
from pyiceberg.catalog.sql import IcebergTables, SqlCatalog
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.manifest import ManifestEntryStatus
from pyiceberg.serializers import FromInputFile
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.types import LongType
from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from icegroup.iceberg.errors import SourceError
from icegroup.iceberg.protocol.sink_commit import COL_SHARD
from icegroup.iceberg.protocol.table_history import HistoryView, history_missing


def load_source(catalog: Catalog, identifier: str, field: str = "source") -> Table:
    """Load a table a group reads, with an error that names the config field; one served without history is refused."""
    try:
        table = catalog.load_table(identifier)
    except NoSuchTableError as exc:
        if is_view(catalog, identifier):
            raise SourceError(
                f"{field}: {identifier!r} in catalog {catalog.name!r} is an Iceberg view, not a table; a group "
                "consumes a table's snapshots, so name the table the view reads from"
            ) from exc
        raise SourceError(
            f"{field}: table {identifier!r} does not exist in catalog {catalog.name!r}; "
            "create it or correct the group's source"
        ) from exc
    check_history(table, identifier, field)
    return table


def check_history(table: Table, identifier: str, field: str = "source") -> None:
    """Refuse a table whose catalog serves it without its snapshot history (``protocol/table_history.py``)."""
    reason = history_missing(HistoryView(properties=table.properties))
    if reason is not None:
        raise SourceError(
            f"{field}: table {identifier!r} in catalog {table.catalog.name!r} cannot be consumed: {reason}. A group's "
            "position is a snapshot of the source and its exactly-once record is the sink's snapshot history, so "
            "icegroup needs a catalog that keeps a table's snapshots (Iceberg's JDBC, Hive, Glue or REST catalogs: "
            "Polaris, Lakekeeper, Iceberg's REST fixture). Nothing was read or written"
        )


def is_view(catalog: Catalog, identifier: str) -> bool:
    """Whether the catalog has ``identifier`` as a view (Spark writes them; pyiceberg reads none).

    A REST catalog answers it (``HEAD .../views/<name>``); pyiceberg's SQL catalog does not know
    views, so its table of tables is asked directly.
    """
    if not isinstance(catalog, SqlCatalog):
        return catalog.view_exists(identifier)
    namespace, _, name = identifier.rpartition(".")
    query = select(IcebergTables.iceberg_type).where(
        IcebergTables.catalog_name == catalog.name,
        IcebergTables.table_namespace == namespace,
        IcebergTables.table_name == name,
    )
    with Session(catalog.engine) as session:
        kind = session.execute(query).scalar_one_or_none()
    return kind is not None and kind.upper() == "VIEW"


def ensure_namespace(catalog: Catalog, namespace: str) -> None:
    """Create ``namespace`` unless it exists; losing the race to create it at the same moment is fine.

    pyiceberg's SQL catalog checks, then inserts: two processes starting together both see no
    namespace, and the second insert fails on the primary key instead of saying it already exists.
    """
    try:
        catalog.create_namespace_if_not_exists(namespace)
    except SQLAlchemyError:
        if not catalog.namespace_exists(namespace):
            raise


def table_uuid(table: Table) -> str | None:
    """The table's UUID as its metadata records it; None if it records none.

    Format v2 requires one, and Iceberg keeps it through a REPLACE TABLE and a registration of the
    table's own metadata: a new UUID under the same name is a table dropped and created again. Format v1
    may leave it out, and pyiceberg then makes up a new one at every load.
    """
    return str(table.metadata.table_uuid) if "table_uuid" in table.metadata.model_fields_set else None


def load_optional(catalog: Catalog, identifier: str) -> Table | None:
    """Load a table that may not exist yet, such as a sink before its first commit."""
    try:
        return catalog.load_table(identifier)
    except NoSuchTableError:
        return None


def oldest_snapshot_id(table: Table) -> int | None:
    """The oldest snapshot still reachable from main's head."""
    oldest = None
    for snapshot in walk_back(table, None):
        oldest = snapshot.snapshot_id
    return oldest


def walk_back(table: Table, stop_at: int | None) -> Iterator[Snapshot]:
    """Snapshots of main from the head back to, not including, ``stop_at`` (metadata only).

    Stops early at the root or at a parent that is no longer in the metadata (expired).
    """
    by_id = {s.snapshot_id: s for s in table.snapshots()}
    snapshot = table.current_snapshot()
    while snapshot is not None and snapshot.snapshot_id != stop_at:
        yield snapshot
        if snapshot.parent_snapshot_id is None:
            return
        snapshot = by_id.get(snapshot.parent_snapshot_id)


def history_cut_before(table: Table, oldest: Snapshot) -> bool:
    """Whether ``oldest``, the first snapshot left on main, holds files from snapshots before it.

    Java Iceberg's expiry leaves the expired parent's id on ``oldest``. pyiceberg's clears it, and
    the sequence number alone cannot tell: staged snapshots take numbers too, and icegroup's sinks
    stage every shard and drop the staged snapshot after publishing it. What matters is whether a
    read from the table's start, one snapshot at a time, sees every live row: it does exactly when
    every file ``oldest`` holds is one it added. Otherwise reading every live row at once is the
    exact way on. Read only for a parentless first snapshot after a table's first commit, so rarely.
    """
    if oldest.parent_snapshot_id is not None:
        return True
    if (oldest.sequence_number or 0) <= 1:
        return False
    manifests = oldest.manifests(table.io)
    if any(m.added_snapshot_id != oldest.snapshot_id for m in manifests):
        return True
    return any(
        entry.snapshot_id != oldest.snapshot_id or entry.status != ManifestEntryStatus.ADDED
        for manifest in manifests
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=False)
    )


def former_parent(table: Table, snapshot_id: int) -> int | None:
    """The parent ``snapshot_id`` had before pyiceberg's ``expire_snapshots`` cleared it, from older metadata files.

    pyiceberg drops an expired snapshot and sets its surviving child's parent to none, where Java
    Iceberg leaves the id dangling. The table's earlier metadata files (its metadata log, newest
    first) still name the parent. Read only when a walk back ends at such a root, so rarely.
    """
    for entry in reversed(table.metadata.metadata_log):
        try:
            older = FromInputFile.table_metadata(table.io.new_input(entry.metadata_file))
        except (OSError, ValueError):
            continue
        parents = [s.parent_snapshot_id for s in older.snapshots if s.snapshot_id == snapshot_id]
        if parents and parents[0] is not None:
            return parents[0]
    return None


def follows(table: Table, snapshot: Snapshot, position: int | None) -> bool:
    """Whether ``snapshot`` is the child of ``position``, by a parent id pyiceberg's expiry cleared too."""
    parent = snapshot.parent_snapshot_id
    return parent == position or (parent is None and former_parent(table, snapshot.snapshot_id) == position)


def parent_of(table: Table, snapshot: Snapshot) -> int | None:
    """``snapshot``'s parent id, the one pyiceberg's expiry cleared included (None: the table's first snapshot).

    Raises ``LookupError`` when history before it was cut and the parent can no longer be found.
    """
    if snapshot.parent_snapshot_id is not None or not history_cut_before(table, snapshot):
        return snapshot.parent_snapshot_id
    parent = former_parent(table, snapshot.snapshot_id)
    if parent is None:
        raise LookupError(f"the parent of snapshot {snapshot.snapshot_id} is no longer in any metadata file")
    return parent


def shard_columns(table: Table, schema_id: int | None) -> list[tuple[str, str]] | None:
    """Top-level columns of the schema a shard was written with: (name now, name then).

    A reader projects onto the table's current schema; renaming and selecting these gives a
    transform the columns the shard's rows were written with, not ones added later. Columns dropped
    since cannot be read back and are left out. None when the shard has no schema id.
    """
    if schema_id is None:
        return None
    then = table.schemas().get(schema_id)
    if then is None:
        return None
    now = table.schema()
    columns = []
    for field in then.fields:
        try:
            columns.append((now.find_field(field.field_id).name, field.name))
        except ValueError:
            continue
    return columns


def expire_snapshots(catalog: Catalog, identifier: str, snapshot_ids: list[int]) -> None:
    """Expire these snapshots of the table in one commit; ``CommitFailedException`` if the table moved meanwhile."""
    catalog.load_table(identifier).maintenance.expire_snapshots().by_ids(snapshot_ids).commit()


def shards_as_numbers(table: Table) -> bool:
    """Whether a sink's rows hold their shard id as a number (``shard_number``); an older sink holds text."""
    fields = {f.name: f for f in table.schema().fields}
    return COL_SHARD in fields and isinstance(fields[COL_SHARD].field_type, LongType)
