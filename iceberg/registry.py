"""The precondition registry: a group's state in its own Iceberg table, changed only by CAS.

Each group has a one-row table ``icegroup.registry_<group>``. A write is a pyiceberg overwrite whose
requirement is "main is still at the snapshot I read". The table sets ``commit.retry.num-retries=0``
because pyiceberg would otherwise re-base a stale commit onto the new head and the CAS would be lost
(see notes/iceberg.md). Two Leaders that read the same state cannot both commit: the second gets
``RegistryConflict`` and must discard its tick.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import IntegerType, LongType, NestedField, StringType

from iceberg.errors import RegistryConflict
from iceberg.protocol.state import GroupState

NAMESPACE = "icegroup"
SCHEMA = Schema(
    NestedField(1, "group_name", StringType(), required=True),
    NestedField(2, "epoch", IntegerType(), required=True),
    NestedField(3, "updated_at_ms", LongType(), required=True),
    NestedField(4, "state", StringType(), required=True),
)
PROPERTIES = {
    "commit.retry.num-retries": "0",
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": "20",
}


@dataclass
class Loaded:
    """A state as read, with the table handle whose head is the CAS precondition."""

    state: GroupState | None
    table: Table

    @property
    def token(self) -> int | None:
        """The registry snapshot the state was read at."""
        snapshot = self.table.current_snapshot()
        return snapshot.snapshot_id if snapshot else None


def registry_identifier(group: str) -> str:
    """Where a group's registry lives."""
    return f"{NAMESPACE}.registry_{group}"


def _open(catalog: Catalog, group: str) -> Table:
    catalog.create_namespace_if_not_exists(NAMESPACE)
    return catalog.create_table_if_not_exists(registry_identifier(group), schema=SCHEMA, properties=PROPERTIES)


def load_state(catalog: Catalog, group: str) -> Loaded:
    """Read a group's state; ``state`` is None for a group that has never ticked."""
    table = _open(catalog, group)
    if table.current_snapshot() is None:
        return Loaded(state=None, table=table)
    rows = table.scan().to_arrow().to_pylist()
    if not rows:
        return Loaded(state=None, table=table)
    return Loaded(state=GroupState.model_validate_json(rows[0]["state"]), table=table)


def commit_state(loaded: Loaded, state: GroupState) -> None:
    """Replace the state iff the registry is still at ``loaded.token``."""
    row = pa.Table.from_pylist(
        [
            {
                "group_name": state.group,
                "epoch": state.epoch,
                "updated_at_ms": int(time.time() * 1000),
                "state": state.model_dump_json(),
            }
        ],
        schema=SCHEMA.as_arrow(),
    )
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Delete operation did not match any records")
            loaded.table.overwrite(row)
    except CommitFailedException as exc:
        raise RegistryConflict(
            f"registry of group {state.group!r} moved past snapshot {loaded.token} while this Leader "
            f"worked ({exc}); another Leader committed first"
        ) from exc
