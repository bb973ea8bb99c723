"""A sink created by an older icegroup keeps its shape: text shard ids and days, and its per-row lineage columns.

Sinks created now hold a shard id as a number and a day as a ``date``, and leave the group, lease
and epoch to the commit's summary. A sink created before that is written in its own shape, so its
readers, a replay's window filter and lineage keep working on old and new rows alike.
"""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import IntegerType, LongType, NestedField, StringType
from pyspark.sql import SparkSession

from icegroup.iceberg.config.lakehouse import LakehouseConfig
from icegroup.iceberg.errors import SinkError
from icegroup.iceberg.lineage_rows import by_rows
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.sink_commit import (
    COL_EPOCH,
    COL_FILE,
    COL_GROUP,
    COL_LEASE,
    COL_SHARD,
    COL_WINDOW,
    KEY_SHARDS,
    ROW_LINEAGE,
)
from icegroup.iceberg.verify import verify_group
from icegroup.spark_jobs.replay import replay_window
from icegroup.spark_jobs.sink.shape import align_to_sink, with_lineage
from tests.factories import MakeGroup, append_batches, create_source, today
from tests.integration.helpers import consumed, drive, quiet

pytestmark = pytest.mark.spark

# The lineage columns as an older icegroup created them, in that order.
OLDER_LINEAGE = (
    (COL_GROUP, StringType()),
    (COL_LEASE, StringType()),
    (COL_SHARD, StringType()),
    (COL_EPOCH, IntegerType()),
    (COL_WINDOW, StringType()),
    (COL_FILE, LongType()),
)


def create_older_sink(catalog: Catalog, group: GroupConfig) -> None:
    """The group's sink as an older icegroup's first Borrower created it: partitioned by a string window."""
    source = catalog.load_table(group.source)
    fields = [NestedField(f.field_id, f.name, f.field_type, required=False) for f in source.schema().fields]
    first = max(f.field_id for f in fields) + 1
    lineage = [NestedField(first + i, name, kind, required=False) for i, (name, kind) in enumerate(OLDER_LINEAGE)]
    window_id = next(f.field_id for f in lineage if f.name == COL_WINDOW)
    spec = PartitionSpec(PartitionField(window_id, 1000, IdentityTransform(), COL_WINDOW))
    catalog.create_namespace_if_not_exists(group.sink.split(".")[0])
    catalog.create_table(group.sink, schema=Schema(*fields, *lineage), partition_spec=spec)


def test_an_older_sink_gets_text_shard_ids_and_days_and_is_replayed_and_traced(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group(max_borrowers=1)
    append_batches(create_source(catalog, group.source), 2, 12)
    create_older_sink(catalog, group)

    drive(spark, lakehouse, group)

    assert verify_group(catalog, group, key="event_id").ok
    sink = catalog.load_table(group.sink)
    assert [(f.name, f.field_type) for f in sink.schema().fields[-len(OLDER_LINEAGE) :]] == list(OLDER_LINEAGE)
    rows = sink.scan().to_arrow()
    summaries = [s.summary.additional_properties for s in sink.snapshots() if s.summary]
    committed = {item["id"] for p in summaries if KEY_SHARDS in p for item in json.loads(p[KEY_SHARDS])}
    assert set(rows.column(COL_SHARD).to_pylist()) == committed, "each row's shard id, as text"
    assert set(rows.column(COL_WINDOW).to_pylist()) == {today(group)}, "each row's day, as its label"
    assert rows.column(COL_GROUP).null_count == rows.num_rows, "the group is in the commit's summary"

    found = by_rows(catalog, group, "event_id = 5")
    assert found.sink_rows
    assert sum(found.sink_rows.values()) == 1
    assert {e.shard_id for e in found.found} <= committed

    report = replay_window(spark, lakehouse, group, today(group), progress=quiet)
    assert report.rows_replaced == 24, "the window filter matches the text days"
    assert verify_group(catalog, group, key="event_id").ok
    replayed = catalog.load_table(group.sink).scan(selected_fields=(COL_SHARD, COL_WINDOW)).to_arrow()
    assert set(replayed.column(COL_SHARD).to_pylist()) == committed
    assert set(replayed.column(COL_WINDOW).to_pylist()) == {today(group)}

    sink = catalog.load_table(group.sink)
    unmigrated = {f.name: None for f in sink.schema().fields} | {"event_id": 999, COL_SHARD: sorted(committed)[0]}
    sink.append(pa.Table.from_pylist([unmigrated], schema=sink.schema().as_arrow()))
    note = by_rows(catalog, group, "event_id = 999").note
    assert "1 of them have no _ig_window" in note
    assert "icegroup migrate" in note


def test_a_day_sink_refuses_hour_windows_naming_the_setting(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group(max_borrowers=1)
    consumed(spark, lakehouse, catalog, group, 1, 6)
    sink = f"{lakehouse.catalog_name}.{group.sink}"
    hourly = with_lineage(spark.table(sink).drop(*ROW_LINEAGE), "0123456789abcdef", "2026-11-26-13:00")

    with pytest.raises(SinkError, match=r"replay_window: .* holds day windows .* restore replay_window: day"):
        align_to_sink(spark, sink, hourly)
