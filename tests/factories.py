"""Test data: factories for shards, leases and dead letters, and a synthetic events source.

The factories fill every field with the values the tests used to spell out by hand, so a test
names only what it is about; ``tests/conftest.py`` serves them as the ``make_shard``,
``make_lease`` and ``make_dead_letter`` fixtures. The events source is the tests' own (the demo
has its own in ``infra/demo_data.py``): a table partitioned by ``identity(region)``, so each
region is one stream.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.catalog import Catalog
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import DoubleType, LongType, NestedField, StringType, TimestamptzType

from iceberg.protocol.assignment import make_lease_id
from iceberg.protocol.dead_letters import DeadLetter
from iceberg.protocol.group import GroupConfig
from iceberg.protocol.shards import Shard
from iceberg.protocol.state import GroupState, Lease
from iceberg.store.group_tables import GroupTables, load_group_tables
from iceberg.store.registry import Loaded, load_state

GROUP = "orders"
STREAM = "0/region=eu"
WINDOW_START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z, the day every test shard falls in

# Shards, leases and dead letters


def shard(n: int = 1, *, stream: str = STREAM, **overrides: Any) -> Shard:
    """The ``n``-th one-snapshot shard of ``stream``: source snapshots 100+n-1 (exclusive) to 100+n."""
    rows = overrides.get("rows", 10)
    fields: dict[str, Any] = {
        "shard_id": f"{n:016x}",
        "stream": stream,
        "from_snapshot": 100 + n - 1,
        "to_snapshot": 100 + n,
        "to_sequence": n,
        "schema_id": 0,
        "window_start_ms": WINDOW_START_MS,
        "snapshots": [100 + n],
        "files": [f"wh/{stream}/{n}.parquet"],
        "rows": rows,
        "bytes": rows * 10,
    }
    return Shard(**{**fields, **overrides})


# The warm Borrower run that factory leases are taken by; pass owner_run_id=None for a lease still waiting.
BORROWER_RUN = "borrower-run-1"


def lease(shard_ids: list[str], *, streams: list[str] | None = None, **overrides: Any) -> Lease:
    """A first attempt at epoch 0 of ``shard_ids`` (on ``streams``, default the one stream), taken by a Borrower."""
    epoch = overrides.get("epoch", 0)
    fields: dict[str, Any] = {
        "lease_id": make_lease_id(GROUP, epoch, shard_ids),  # distinct shards, distinct leases, as granted
        "epoch": epoch,
        "window_start_ms": WINDOW_START_MS,
        "shard_ids": shard_ids,
        "streams": [STREAM] if streams is None else streams,
        "granted_at_ms": 0,
        "deadline_ms": 60_000,
        "sink_snapshot_at_grant": None,
        "owner_run_id": BORROWER_RUN,
    }
    return Lease(**{**fields, **overrides})


def dead_letter(shard_id: str, action: str, **overrides: Any) -> DeadLetter:
    """A dead letter with ``action`` for a shard over source snapshots 101..103 that divided by zero."""
    fields: dict[str, Any] = {
        "shard_id": shard_id,
        "stream": STREAM,
        "lease_id": "fedcba9876543210",
        "attempt": 2,
        "action": action,
        "error": "ZeroDivisionError: division by zero",
        "from_snapshot": 101,
        "to_snapshot": 103,
        "at_ms": 1_000,
    }
    return DeadLetter(**{**fields, **overrides})


def group_state(shards: list[Shard], leases: list[Lease] | None = None, **overrides: Any) -> GroupState:
    """The state of group ``orders`` holding these pending shards and leases."""
    fields: dict[str, Any] = {
        "group": GROUP,
        "source": "demo.events",
        "sink": "demo.events_out",
        "start_position": None,
        "planned_through": max((s.to_snapshot for s in shards), default=None),
        "shards": {s.shard_id: s for s in shards},
        "leases": {x.lease_id: x for x in leases or []},
    }
    return GroupState(**{**fields, **overrides})


class MakeShard(Protocol):
    """The ``make_shard`` fixture's type: ``tests.factories.shard``."""

    def __call__(self, n: int = 1, *, stream: str = STREAM, **overrides: Any) -> Shard:
        """Build a shard."""
        ...


class MakeLease(Protocol):
    """The ``make_lease`` fixture's type: ``tests.factories.lease``."""

    def __call__(self, shard_ids: list[str], *, streams: list[str] | None = None, **overrides: Any) -> Lease:
        """Build a lease."""
        ...


class MakeDeadLetter(Protocol):
    """The ``make_dead_letter`` fixture's type: ``tests.factories.dead_letter``."""

    def __call__(self, shard_id: str, action: str, **overrides: Any) -> DeadLetter:
        """Build a dead letter."""
        ...


# The events source

REGIONS = ("eu", "us", "apac")
SCHEMA = Schema(
    NestedField(1, "event_id", LongType(), required=True),
    NestedField(2, "region", StringType(), required=True),
    NestedField(3, "event_ts", TimestamptzType(), required=True),
    NestedField(4, "amount", DoubleType(), required=True),
    NestedField(5, "user_id", LongType(), required=True),
)
SPEC = PartitionSpec(PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="region"))
EVENTS_START = datetime(2026, 1, 1, tzinfo=UTC)


def create_source(catalog: Catalog, identifier: str) -> Table:
    """The events table partitioned by identity(region), one stream per region; an existing one as it is."""
    catalog.create_namespace_if_not_exists(identifier.rsplit(".", 1)[0])
    return catalog.create_table_if_not_exists(identifier, schema=SCHEMA, partition_spec=SPEC)


def events(first_id: int, count: int, seed: int, regions: tuple[str, ...] = REGIONS) -> pa.Table:
    """``count`` events with ids from ``first_id``, round-robin over ``regions``; the same for the same seed."""
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
    """Append ``batches`` snapshots of events with ids after the table's highest; returns the rows added."""
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


def tables_of(catalog: Catalog, group: GroupConfig, loaded: Loaded | None = None) -> GroupTables:
    """The group's tables as a Leader tick opens them, with the registry as ``loaded`` (default: as it is now)."""
    return load_group_tables(catalog, group, loaded if loaded is not None else load_state(catalog, group.name))


def no_spark() -> Any:
    """A SparkSession factory for paths that must not start Spark: calling it fails the test."""
    raise AssertionError("Spark was started, but nothing here needed it")
