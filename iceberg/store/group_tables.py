"""A group's tables as one Leader tick (or one ``describe``) loads them: each opened once, then passed down.

A tick reads the registry, the source, the sink, the lineage table and the dead-letter table, and
several of its phases need the same one. Opening each once and handing this value down, instead of
a catalog and a name, costs one metadata read per table and lets every phase see the same snapshot
of it. What a tick writes goes through the table objects held here, which pyiceberg refreshes on
commit; the catalog stays at hand for the tables a tick creates (the lineage table) and for reads
that must be fresh on purpose (a rebuild's second look at the registry).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pyiceberg.catalog import Catalog
from pyiceberg.table import Table

from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.store.dead_letters import dead_letter_identifier
from icegroup.iceberg.store.lineage import lineage_identifier
from icegroup.iceberg.store.registry import Loaded
from icegroup.iceberg.store.tables import load_optional, load_source


@dataclass
class GroupTables:
    """The registry as loaded, the source and sink of one group, and its lineage and dead-letter tables once opened.

    ``sink`` is None while it does not exist (the first Borrower creates it). The lineage table is
    opened at the first phase that needs it (``open_lineage``: an idle tick records nothing and
    reports no window, so it never does). The dead-letter table is opened by ``open_dead_letters``
    once the tick has seen its runs: a Borrower records a poison shard *before* its run fails, so a
    letter read after the run's state is never missed.
    """

    catalog: Catalog
    group: GroupConfig
    registry: Loaded
    source: Table
    sink: Table | None
    lineage: Table | None = None
    dead_letters: Table | None = None
    lineage_opened: bool = field(default=False, repr=False)

    def open_lineage(self) -> Table | None:
        """The lineage table, opened once (None while the Leader has recorded nothing)."""
        if not self.lineage_opened:
            self.lineage = load_optional(self.catalog, lineage_identifier(self.group.name))
            self.lineage_opened = True
        return self.lineage

    def open_dead_letters(self) -> Table | None:
        """Open the group's dead-letter table (None while no shard was ever poison); kept for the tick."""
        self.dead_letters = load_optional(self.catalog, dead_letter_identifier(self.group.name))
        return self.dead_letters


def load_group_tables(catalog: Catalog, group: GroupConfig, registry: Loaded) -> GroupTables:
    """The group's tables for one tick, with the registry as ``registry``: the source and the sink opened once."""
    return GroupTables(
        catalog=catalog,
        group=group,
        registry=registry,
        source=load_source(catalog, group.source),
        sink=load_optional(catalog, group.sink),
    )
