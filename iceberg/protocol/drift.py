"""A group's config against what it meets: what its registry remembers, and its source's schema now.

The Leader's tick checks them before it plans, and replay, reset, rebuild and pause check the
registry's memory before they act: a registry built for one source, sink or transform must not be
reused by another, and a filter must name columns the source still has.
"""

from __future__ import annotations

from pyiceberg.expressions.visitors import bind
from pyiceberg.schema import Schema

from icegroup.iceberg.errors import ConfigError, SourceError
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.state import ConfigChange, GroupState


def check_drift(state: GroupState, group: GroupConfig) -> None:
    """The registry remembers what the group consumed from and wrote to; a changed config must not reuse it."""
    for name, kept, now in (("source", state.source, group.source), ("sink", state.sink, group.sink)):
        if kept != now:
            raise ConfigError(
                f"group {group.name!r}: {name}: the config says {now!r} but the group's registry was built for "
                f"{kept!r}. Give the changed group a new name, or restore {name}: {kept}"
            )


def refuse_other_table(state: GroupState | None, table_uuid: str | None, group: GroupConfig) -> None:
    """Refuse a source table other than the one the group consumed: its positions name none of its snapshots.

    A table dropped and created again under the source's name has a new UUID. Without the UUID the
    tick would find that out only when a position is missing, and could not tell it from an expiry;
    a reset would measure the old table's positions against the new table's sequence numbers. So
    the tick refuses it before anything else reads the new table, and so does a reset, naming the
    one remedy: a new start of the group's state, which keeps the sink.
    """
    recorded = state.source_uuid if state is not None else None
    if recorded is None or table_uuid is None or recorded == table_uuid:
        return
    raise SourceError(
        f"group {group.name!r}: source {group.source!r} was dropped and created again: the table under that name "
        f"is {table_uuid}, and the group consumed table {recorded}, whose snapshots its positions name. Run "
        f"`icegroup delete {group.name} --execute` (once no lease is in flight; the sink keeps its rows) and consume "
        "again: the group then starts on the new table from its `start` (`earliest` by default, the new table's "
        "first snapshot; a `start` naming a snapshot of the old table must be changed first)"
    )


def recorded_table(state: GroupState, table_uuid: str | None) -> GroupState:
    """The state with the source table's UUID, which a state without one (new, from before UUIDs, rebuilt) adopts."""
    if state.source_uuid is not None or table_uuid is None:
        return state
    return state.model_copy(update={"source_uuid": table_uuid})


def check_config(state: GroupState, group: GroupConfig, now_ms: int, sink_head: int | None) -> GroupState:
    """Pin the filter and transform that make the sink's output; a change is refused or recorded.

    A registry without a hash (new, or written before hashes) adopts the config's. A changed hash
    stops the group, naming the choices, unless the group says ``on_change: continue``: then the
    change is recorded with the sink head it happened at, and leases from now on carry the new hash.
    """
    current = group.config_hash
    if state.config_hash == current:
        return state
    new = state.model_copy(deep=True)
    new.config_hash = current
    if state.config_hash is None:
        return new
    if group.on_change == "fail":
        raise ConfigError(
            f"group {group.name!r}: filter/transform changed since the sink's output was made (config hash "
            f"{state.config_hash} -> {current}), and on_change is fail. Choose one: restore the previous filter "
            "and transform; give the changed group a new name (a new registry, consuming from its start); or set "
            "on_change: continue (the change is recorded, earlier output stays as it was made, and `icegroup replay` "
            "remakes the windows you choose with the new config)"
        )
    new.config_changes.append(
        ConfigChange(at_ms=now_ms, old_hash=state.config_hash, new_hash=current, sink_snapshot=sink_head)
    )
    return new


def check_filter(group: GroupConfig, schema: Schema) -> None:
    """The filter may name only columns the source has now; checked at every tick, so also after a schema change."""
    if group.row_filter is None:
        return
    try:
        bind(schema, group.row_filter, case_sensitive=True)
    except ValueError as exc:
        columns = ", ".join(field.name for field in schema.fields)
        raise ConfigError(
            f"group {group.name!r}: filter: {group.filter!r} does not fit source {group.source!r} "
            f"({str(exc).splitlines()[0]}); its columns are {columns}. Fix the filter"
        ) from exc
