"""The dead-letter table: shards that failed ``max_deliver`` times, and their re-drives.

A Borrower that gives up on a poison shard appends a row here and fails its run. The Leader reads
the table every tick: a shard whose latest row is ``parked`` holds its lease (and so its stream)
still while the other streams go on; ``stopped`` stops the whole group. ``icegroup redrive``
appends ``redriven`` rows, and the Leader grants the shard again. The table is append-only, so it
is also the history of every poison shard and what was done about it. The record and the rules
that need no table are in ``iceberg/protocol/dead_letters.py``.
"""

from __future__ import annotations

import time

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import IntegerType, LongType, NestedField, StringType

from icegroup.iceberg.protocol.dead_letters import REDRIVEN, DeadLetter, is_open, latest_per_shard
from icegroup.iceberg.store.registry import NAMESPACE
from icegroup.iceberg.store.tables import ensure_namespace, load_optional

SCHEMA = Schema(
    NestedField(1, "shard_id", StringType(), required=True),
    NestedField(2, "stream", StringType(), required=True),
    NestedField(3, "lease_id", StringType(), required=True),
    NestedField(4, "attempt", IntegerType(), required=True),
    NestedField(5, "action", StringType(), required=True),
    NestedField(6, "error", StringType(), required=True),
    NestedField(7, "from_snapshot", LongType(), required=False),
    NestedField(8, "to_snapshot", LongType(), required=True),
    NestedField(9, "at_ms", LongType(), required=True),
)


# Per (catalog, table): the snapshot last read, and each shard's latest row as of it.
_LATEST: dict[tuple[str, str], tuple[int, dict[str, DeadLetter]]] = {}


def dead_letter_identifier(group: str) -> str:
    """Where a group's dead letters live."""
    return f"{NAMESPACE}.dead_letter_{group}"


def _open(catalog: Catalog, group: str) -> Table:
    ensure_namespace(catalog, NAMESPACE)
    return catalog.create_table_if_not_exists(dead_letter_identifier(group), schema=SCHEMA)


def record(catalog: Catalog, group: str, letters: list[DeadLetter]) -> None:
    """Append rows; pyiceberg re-bases a concurrent append, so Borrowers never lose a row to a race."""
    rows = [{**letter.__dict__} for letter in letters]
    _open(catalog, group).append(pa.Table.from_pylist(rows, schema=SCHEMA.as_arrow()))


def latest(catalog: Catalog, group: str) -> dict[str, DeadLetter]:
    """Each shard's latest row; empty while no shard was ever poison.

    The Leader asks every tick, and the table changes only when a shard turns poison or is re-driven:
    the answer is kept per table snapshot, so a tick reads the table's metadata, not its rows.
    """
    return latest_in(load_optional(catalog, dead_letter_identifier(group)), catalog.name)


def latest_in(table: Table | None, catalog_name: str) -> dict[str, DeadLetter]:
    """``latest`` of a dead-letter table already loaded (None: no shard was ever poison)."""
    snapshot = table.current_snapshot() if table is not None else None
    if table is None or snapshot is None:
        return {}
    key = (catalog_name, ".".join(table.name()))
    cached = _LATEST.get(key)
    if cached is None or cached[0] != snapshot.snapshot_id:
        cached = _LATEST[key] = (snapshot.snapshot_id, scan_letters(table))
    return dict(cached[1])


def scan_letters(table: Table) -> dict[str, DeadLetter]:
    """Each shard's latest row, read from every row of the table."""
    return latest_per_shard(DeadLetter(**row) for row in table.scan().to_arrow().to_pylist())


def open_letters(catalog: Catalog, group: str) -> dict[str, DeadLetter]:
    """Shards that are parked or stopped and not re-driven since."""
    return {sid: d for sid, d in latest(catalog, group).items() if is_open(d)}


def open_in(table: Table | None, catalog_name: str) -> dict[str, DeadLetter]:
    """``open_letters`` of a dead-letter table already loaded."""
    return {sid: d for sid, d in latest_in(table, catalog_name).items() if is_open(d)}


def redrive(catalog: Catalog, group: str, shard_ids: list[str] | None = None) -> list[DeadLetter]:
    """Release parked or stopped shards (all of them by default) so the Leader grants them again."""
    pending = open_letters(catalog, group)
    chosen = [pending[s] for s in sorted(set(shard_ids) if shard_ids is not None else pending) if s in pending]
    now = int(time.time() * 1000)
    released = [
        DeadLetter(**{**d.__dict__, "action": REDRIVEN, "error": "", "at_ms": max(now, d.at_ms + 1)}) for d in chosen
    ]
    if released:
        record(catalog, group, released)
    return released
