"""Synthetic events, for the demo and the tests alike: a source partitioned by region, one stream per region.

The same seed gives the same rows, so a test (``tests/factories.py`` serves these) and the demo see
data of one shape.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.catalog import Catalog
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import DoubleType, LongType, NestedField, StringType, TimestamptzType

REGIONS = ("eu", "us", "apac")
SCHEMA = Schema(
    NestedField(1, "event_id", LongType(), required=True),
    NestedField(2, "region", StringType(), required=True),
    NestedField(3, "event_ts", TimestamptzType(), required=True),
    NestedField(4, "amount", DoubleType(), required=True),
    NestedField(5, "user_id", LongType(), required=True),
)
EVENTS_START = datetime(2026, 1, 1, tzinfo=UTC)
SPEC = PartitionSpec(PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="region"))


def create_source(catalog: Catalog, identifier: str) -> Table:
    """Create the events table partitioned by region; an existing one is returned as it is."""
    catalog.create_namespace_if_not_exists(identifier.rsplit(".", 1)[0])
    return catalog.create_table_if_not_exists(identifier, schema=SCHEMA, partition_spec=SPEC)


def events(first_id: int, count: int, seed: int, regions: tuple[str, ...] = REGIONS) -> pa.Table:
    """``count`` events with ids from ``first_id``, spread over ``regions``; deterministic per seed."""
    rng = random.Random(seed)
    rows = [
        {
            "event_id": first_id + i,
            "region": regions[i % len(regions)],
            "event_ts": EVENTS_START + timedelta(seconds=first_id + i),
            "amount": round(rng.uniform(1, 100), 2),
            "user_id": rng.randrange(1, 500),
        }
        for i in range(count)
    ]
    return pa.Table.from_pylist(rows, schema=SCHEMA.as_arrow())


def append_batches(table: Table, batches: int, rows_per_batch: int, seed: int = 7) -> int:
    """Append ``batches`` snapshots of events after the table's highest id; returns rows added."""
    first = next_event_id(table)
    for batch in range(batches):
        table.append(events(first + batch * rows_per_batch, rows_per_batch, seed + first + batch))
    return batches * rows_per_batch


def next_event_id(table: Table) -> int:
    """One past the highest event id in the table (1 for an empty one), so appended ids never repeat."""
    table.refresh()
    if table.current_snapshot() is None:
        return 1
    ids = table.scan(selected_fields=("event_id",)).to_arrow().column("event_id")
    return int(pc.max(ids).as_py() or 0) + 1
