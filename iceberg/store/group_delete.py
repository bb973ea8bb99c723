"""``icegroup delete``: remove everything a group keeps, and never its sink's data.

A group keeps its registry, lineage, dead-letter and dead-row tables (``icegroup.registry_<group>``,
``lineage_<group>``, ``dead_letters_<group>``, ``dead_rows_<group>``), its heartbeat rows, its
registration and branch on the source (``icegroup.consumer.<group>``, ``icegroup-<group>``) and, on
the sink, its markers (``icegroup.reset(s).<group>``, ``icegroup.follows.<group>``,
``icegroup.canary.<group>``). All of it goes; the sink's rows and snapshots stay.

The sink's fences stay, and the epoch fence goes up by one: a Borrower of the deleted group still
alive past its lease's deadline (a zombie) is refused by the epoch, as after a reset, and the group
started again takes that epoch (its lease ids, which carry the epoch, are new too). Removing the
fences instead would let such a zombie commit into the new group.

The sink's history still holds the group's commits, and a Leader that finds no registry rebuilds it
from them. So the delete records, in the same fence commit, the sink snapshot it happened at
(``icegroup.deleted.<group>``): commits up to there belong to the deleted group, and a consume
afterwards starts a new group from its ``start`` config.

``check_deletable`` still refuses while a lease is before its deadline: its Borrower is most likely
alive and working, and the delete would only waste that work.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchTableError

from icegroup.iceberg.errors import ConfigError, UsageError
from icegroup.iceberg.protocol.fences import epoch_key
from icegroup.iceberg.protocol.sink_commit import follows_key, reset_key, resets_key
from icegroup.iceberg.protocol.source_branch import ref_name
from icegroup.iceberg.protocol.state import GroupState
from icegroup.iceberg.store.canaries import canary_key
from icegroup.iceberg.store.dead_letters import dead_letter_identifier
from icegroup.iceberg.store.dead_rows import dead_rows_identifier
from icegroup.iceberg.store.fences import raise_fences
from icegroup.iceberg.store.heartbeats import forget, read_beats
from icegroup.iceberg.store.lineage import lineage_identifier
from icegroup.iceberg.store.registrations import registration_key
from icegroup.iceberg.store.registry import load_state, registry_identifier
from icegroup.iceberg.store.sink_history import deleted_key
from icegroup.iceberg.store.source_branch import drop_refs
from icegroup.iceberg.store.tables import load_optional


@dataclass
class Footprint:
    """What a group keeps: the tables, properties and heartbeats ``icegroup delete`` removes."""

    group: str
    sink: str
    source: str
    tables: list[str] = field(default_factory=list)
    sink_properties: list[str] = field(default_factory=list)
    sink_snapshot: int | None = None
    registration: str | None = None
    source_branch: str | None = None
    heartbeats: list[str] = field(default_factory=list)
    state: GroupState | None = None

    def empty(self) -> bool:
        """Whether the group keeps nothing (never consumed, or deleted already)."""
        return not (self.tables or self.sink_properties or self.registration or self.source_branch or self.heartbeats)


def owned_property(group: str, key: str) -> bool:
    """Whether a sink property is one of ``group``'s markers, which a delete removes (its fences stay)."""
    return key in {reset_key(group), resets_key(group), follows_key(group), canary_key(group)}


def footprint(catalog: Catalog, group: str, source: str, sink: str) -> Footprint:
    """Everything ``group`` keeps in ``catalog``, read without writing anything."""
    found = Footprint(group=group, sink=sink, source=source)
    found.state = load_state(catalog, group).state
    owned = (registry_identifier(group), lineage_identifier(group), dead_letter_identifier(group))
    for identifier in (*owned, dead_rows_identifier(group)):
        if load_optional(catalog, identifier) is not None:
            found.tables.append(identifier)
    sink_table = load_optional(catalog, sink)
    if sink_table is not None:
        found.sink_properties = sorted(k for k in sink_table.properties if owned_property(group, k))
        head = sink_table.current_snapshot()
        found.sink_snapshot = head.snapshot_id if head is not None else None
    source_table = load_optional(catalog, source)
    if source_table is not None and registration_key(group) in source_table.properties:
        found.registration = registration_key(group)
    if source_table is not None and ref_name(group) in source_table.metadata.refs:
        found.source_branch = ref_name(group)
    try:
        found.heartbeats = sorted(read_beats(catalog, group))
    except ConfigError:  # a catalog with no database for heartbeats keeps none
        found.heartbeats = []
    return found


def leases_in_flight(found: Footprint, now_ms: int) -> list[str]:
    """The group's leases that may still commit: in the registry and before their deadline."""
    if found.state is None:
        return []
    return sorted(
        f"{lease.lease_id}#{lease.attempt}" for lease in found.state.leases.values() if lease.deadline_ms > now_ms
    )


def check_deletable(found: Footprint, now_ms: int) -> None:
    """Refuse to delete a group whose leases may still commit: their fences are what stops them."""
    flight = leases_in_flight(found, now_ms)
    if flight:
        raise UsageError(
            f"delete: group {found.group!r} has {len(flight)} lease(s) in flight ({', '.join(flight)}); deleting "
            f"now would let them commit into a group that no longer exists. Run `icegroup pause {found.group}`, "
            f"let them finish (`icegroup describe {found.group}` shows none in flight) or pass their deadline, "
            "then delete again"
        )


def delete_group(catalog: Catalog, found: Footprint) -> None:
    """Remove what ``found`` lists: first the sink's epoch fence goes up, with the marker; then the rest.

    The sink's data is not touched: its properties change in one commit with no new snapshot.
    """
    sink_table = load_optional(catalog, found.sink)
    if sink_table is not None:
        head = sink_table.current_snapshot()
        fenced = int(sink_table.properties.get(epoch_key(found.group), "0"))
        epoch = max(found.state.epoch if found.state else 0, fenced)
        marker = {deleted_key(found.group): str(head.snapshot_id)} if head is not None else {}
        raise_fences(sink_table, {epoch_key(found.group): epoch + 1}, also=marker)
        owned = [k for k in sink_table.properties if owned_property(found.group, k)]
        if owned:
            sink_table.transaction().remove_properties(*owned).commit_transaction()
    for identifier in found.tables:
        try:
            catalog.drop_table(identifier)
        except NoSuchTableError:
            continue
    source_table = load_optional(catalog, found.source)
    if source_table is not None:
        drop_refs(source_table, [found.group])  # before the registration: a delete run again finds what is left
    if source_table is not None and registration_key(found.group) in source_table.refresh().properties:
        source_table.transaction().remove_properties(registration_key(found.group)).commit_transaction()
    forget(catalog, found.group, found.heartbeats)
