"""Small helpers over pyiceberg tables that several modules share."""

from __future__ import annotations

from collections.abc import Iterator

from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot

from iceberg.errors import SourceError


def load_source(catalog: Catalog, identifier: str, field: str = "source") -> Table:
    """Load a table a group reads, with an error that names the config field."""
    try:
        return catalog.load_table(identifier)
    except NoSuchTableError as exc:
        raise SourceError(
            f"{field}: table {identifier!r} does not exist in catalog {catalog.name!r}; "
            "create it or correct the group's source"
        ) from exc


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
