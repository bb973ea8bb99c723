"""A group's lineage at this moment: the lineage table's entries, and the sink's commits it has not recorded yet.

The Leader records lineage at its tick after a commit, so the newest output (the commit a user just
made, the replay ``make demo`` ends with) is in the sink before it is in the lineage table. A
question about it is answered from the commits themselves, by the same rules the Leader records
them with (``pending_lineage``), so an answer never waits for a tick and gives what the tick
will record.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pyiceberg.catalog import Catalog
from pyiceberg.expressions.parser import parse as parse_filter
from pyiceberg.expressions.visitors import bind
from pyiceberg.io.pyarrow import expression_to_pyarrow
from pyiceberg.table import Table

from icegroup.iceberg.errors import UsageError
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.lineage import LineageEntry
from icegroup.iceberg.store.lineage import (
    SCHEMA,
    Pending,
    entries,
    load_lineage,
    pending_lineage,
    recorded_through,
    shard_entries,
    to_arrow,
)
from icegroup.iceberg.store.registry import load_state
from icegroup.iceberg.store.tables import load_optional


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
