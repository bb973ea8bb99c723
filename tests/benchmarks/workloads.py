"""The benchmark's source data: W1 (a few large snapshots), W2 (many small ones) and L's small appends.

Every arm of a workload reads the same source table, so the data is identical by construction.
Rows follow the tests' events schema (``tests/factories.py``), partitioned by region, so each
region is one stream. Columns are drawn with numpy from a fixed seed: building W1's five million
rows as Python dicts would take minutes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot
from pyspark.sql import SparkSession

from tests.factories import EVENTS_START, REGIONS, SCHEMA


@dataclass(frozen=True)
class Workload:
    """``snapshots`` appends of ``rows_per_snapshot`` rows each."""

    name: str
    snapshots: int
    rows_per_snapshot: int

    @property
    def rows(self) -> int:
        """Rows in the whole source."""
        return self.snapshots * self.rows_per_snapshot


W1 = Workload("W1", snapshots=12, rows_per_snapshot=420_000)
W2 = Workload("W2", snapshots=300, rows_per_snapshot=300)


def events(first_id: int, count: int, seed: int) -> pa.Table:
    """``count`` events with ids from ``first_id``, round-robin over the regions, drawn from ``seed``."""
    rng = np.random.default_rng(seed)
    ids = np.arange(first_id, first_id + count, dtype=np.int64)
    regions = np.array(REGIONS)[ids % len(REGIONS)]
    start_us = int(EVENTS_START.timestamp() * 1_000_000)
    columns = {
        "event_id": ids,
        "region": regions,
        "event_ts": pa.array(start_us + ids * 1_000_000, type=pa.timestamp("us", tz="UTC")),
        "amount": np.round(rng.uniform(1, 100, count), 2),
        "user_id": rng.integers(1, 500, count, dtype=np.int64),
    }
    return pa.Table.from_pydict(columns, schema=SCHEMA.as_arrow())


def append_events(table: Table, first_id: int, count: int, seed: int) -> Snapshot:
    """Commit one snapshot of ``count`` events; returns it (its commit time is the latency's start)."""
    table.append(events(first_id, count, seed))
    snapshot = table.current_snapshot()
    assert snapshot is not None
    return snapshot


def fill_with_spark(spark: SparkSession, table: str, workload: Workload, seed: int = 11) -> None:
    """``fill``, each snapshot one Spark ``INSERT`` into ``table`` (as Spark names it): for thousands of snapshots.

    pyiceberg writes each commit's whole table metadata in Python, so its appends slow down as
    snapshots accumulate: 3,000 of them would take about an hour, Spark's about ten minutes. The rows
    have the same ids, regions and times as ``events``; amounts and users are drawn by Spark's
    ``rand``, so they differ (each size is a source of its own). The columns are required, and
    ``range`` makes only the ids non-null to Spark, so the fill turns off the writer's null check.
    """
    start_us = int(EVENTS_START.timestamp() * 1_000_000)
    regions = ", ".join(f"'{region}'" for region in REGIONS)
    spark.conf.set("spark.sql.iceberg.check-nullability", "false")
    for index in range(workload.snapshots):
        first = 1 + index * workload.rows_per_snapshot
        spark.sql(
            f"INSERT INTO {table} SELECT id AS event_id, "
            f"element_at(array({regions}), CAST(id % {len(REGIONS)} AS INT) + 1) AS region, "
            f"timestamp_micros({start_us} + id * 1000000) AS event_ts, "
            f"round(1 + rand({seed + index}) * 99, 2) AS amount, "
            f"CAST(1 + floor(rand({seed + index + 1_000_000}) * 499) AS BIGINT) AS user_id "
            f"FROM range({first}, {first + workload.rows_per_snapshot}, 1, 1)"
        )


def fill(table: Table, workload: Workload, seed: int = 11) -> None:
    """Commit the workload's snapshots to an empty source table, event ids from 1."""
    for index in range(workload.snapshots):
        append_events(table, 1 + index * workload.rows_per_snapshot, workload.rows_per_snapshot, seed + index)
