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

from icegroup.iceberg.errors import LostRace, RegistryConflict
from icegroup.iceberg.protocol.state import GroupState
from icegroup.iceberg.store.metadata_commit import on_head
from icegroup.iceberg.store.tables import ensure_namespace, load_optional

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
    """A state as read, with the table handle whose head is the CAS precondition.

    ``table`` is None for a group that has never committed: its registry table is created by its
    first commit, so a tick that fails its start-up checks leaves nothing behind.
    """

    state: GroupState | None
    table: Table | None
    catalog: Catalog
    group: str

    @property
    def token(self) -> int | None:
        """The registry snapshot the state was read at."""
        snapshot = self.table.current_snapshot() if self.table is not None else None
        return snapshot.snapshot_id if snapshot else None


def registry_identifier(group: str) -> str:
    """Where a group's registry lives."""
    return f"{NAMESPACE}.registry_{group}"


def _open(catalog: Catalog, group: str) -> Table:
    ensure_namespace(catalog, NAMESPACE)
    return catalog.create_table_if_not_exists(registry_identifier(group), schema=SCHEMA, properties=PROPERTIES)


def load_state(catalog: Catalog, group: str) -> Loaded:
    """Read a group's state; ``state`` is None for a group that has never ticked. Creates nothing."""
    table = load_optional(catalog, registry_identifier(group))
    if table is None or table.current_snapshot() is None:
        return Loaded(state=None, table=table, catalog=catalog, group=group)
    rows = table.scan().to_arrow().to_pylist()
    state = GroupState.model_validate_json(rows[0]["state"]) if rows else None
    return Loaded(state=state, table=table, catalog=catalog, group=group)


def state_as_of(catalog: Catalog, group: str, at_ms: int) -> tuple[GroupState, int] | None:
    """The group's state as its registry held it at ``at_ms``, and when that state was committed.

    Every registry commit is a snapshot of the registry table, so its history is the group's; it is
    kept for as long as the registry table's snapshots are (icegroup expires none of them yet).
    None when the registry did not exist yet at ``at_ms``.
    """
    table = load_optional(catalog, registry_identifier(group))
    if table is None:
        return None
    earlier = [s for s in table.snapshots() if s.timestamp_ms <= at_ms]
    if not earlier:
        return None
    snapshot = max(earlier, key=lambda s: (s.timestamp_ms, s.sequence_number or 0))
    rows = table.scan(snapshot_id=snapshot.snapshot_id).to_arrow().to_pylist()
    if not rows:
        return None
    return GroupState.model_validate_json(rows[0]["state"]), snapshot.timestamp_ms


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
    table = loaded.table
    if table is None:
        table = _open(loaded.catalog, loaded.group)
        if table.current_snapshot() is not None:
            raise RegistryConflict(
                f"registry of group {state.group!r} was created and committed by another Leader while this one "
                "worked; another Leader committed first"
            )
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Delete operation did not match any records")
            with on_head(table) as head:  # no copies of the registry's history per commit (``metadata_commit``)
                head.overwrite(row)
    except CommitFailedException as exc:
        raise RegistryConflict(
            f"registry of group {state.group!r} moved past snapshot {loaded.token} while this Leader "
            f"worked ({exc}); another Leader committed first"
        ) from exc


def commit_or_lose(loaded: Loaded, state: GroupState) -> None:
    """``commit_state``, with a lost swap raised as ``LostRace`` so that ``again_while_losing`` tries again."""
    try:
        commit_state(loaded, state)
    except RegistryConflict as exc:
        raise LostRace(str(exc)) from exc


def kept_moving(group: str, tries: int, doing: str) -> RegistryConflict:
    """The error of a registry change that lost every one of its ``tries`` to other writers."""
    return RegistryConflict(f"group {group!r}: the registry kept moving under {tries} tries to {doing}")
