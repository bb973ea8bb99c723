"""Sink commits without Spark: pyiceberg appends that carry what the fenced commit writes.

The rows carry their shard as a Borrower writes it (``shard_number``) and the snapshot summary
carries the lineage properties, exactly as a Borrower commits them, so Leader-side code (rebuild,
checkpoints, describe) can be tested against a real catalog without starting Spark.
"""

from __future__ import annotations

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import LongType, NestedField

from icegroup.iceberg.leader import tick
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.liveness import RunState
from icegroup.iceberg.protocol.sink_commit import COL_SHARD, commit_properties, shard_number
from icegroup.iceberg.protocol.state import GroupState, Lease

SINK_SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, COL_SHARD, LongType(), required=False),
)

# A sink with nothing but an id column, for tests whose rows carry no lineage.
ID_SCHEMA = Schema(NestedField(1, "id", LongType(), required=True))


def sink_of(catalog: Catalog, group: GroupConfig) -> Table:
    """The group's sink, created as the first Borrower would."""
    table = catalog.load_table(group.sink) if catalog.table_exists(group.sink) else None
    return table or catalog.create_table(group.sink, schema=SINK_SCHEMA)


def commit_lease(
    catalog: Catalog, group: GroupConfig, state: GroupState, lease: Lease, run_id: str | None = None
) -> None:
    """Commit every shard of ``lease`` to the sink, one commit per shard, as a Borrower does."""
    sink = sink_of(catalog, group)
    for shard_id in lease.shard_ids:
        shard = state.shards[shard_id]
        rows = [{"id": n, COL_SHARD: shard_number(shard_id)} for n in range(shard.rows)]
        props = commit_properties(
            group.name, group.source, lease.lease_id, lease.epoch, lease.attempt, [shard], lease.origin, run_id
        )
        sink.append(pa.Table.from_pylist(rows, schema=SINK_SCHEMA.as_arrow()), snapshot_properties=props)


def consume_all(catalog: Catalog, group: GroupConfig) -> None:
    """Tick and commit every granted lease, as Borrowers would, until the group is caught up."""
    for _ in range(50):
        result = tick(catalog, group, lambda _: RunState.MISSING)
        if result.caught_up:
            return
        for lease in result.launch:
            commit_lease(catalog, group, result.state, lease)
    raise AssertionError("the group did not catch up in 50 ticks")


def create_sink(catalog: Catalog, group: GroupConfig) -> Table:
    """A sink of one ``id`` column (``ID_SCHEMA``), as the first Borrower would have created it."""
    catalog.create_namespace_if_not_exists(group.sink.split(".")[0])
    return catalog.create_table(group.sink, schema=ID_SCHEMA)
