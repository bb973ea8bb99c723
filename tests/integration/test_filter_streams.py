"""A filter on a partition column narrows the streams planned and the lag, and the rows still arrive exactly once."""

from __future__ import annotations

from collections import Counter

import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.table import Table
from pyiceberg.transforms import DayTransform, IdentityTransform
from pyspark.sql import SparkSession

from icegroup.iceberg.config.lakehouse import LakehouseConfig
from icegroup.iceberg.describe import describe_group
from icegroup.iceberg.lag import lag_of
from icegroup.iceberg.leader import tick
from icegroup.iceberg.protocol.liveness import RunState
from icegroup.iceberg.store.registry import load_state
from icegroup.iceberg.verify import verify_group
from tests.factories import SCHEMA, MakeGroup, create_source, events, next_event_id
from tests.integration.helpers import drive, sink_ids

pytestmark = pytest.mark.spark


def append(source: Table, count: int, regions: tuple[str, ...]) -> None:
    first = next_event_id(source)
    source.append(events(first, count, seed=first, regions=regions))


def source_ids(source: Table, row_filter: str) -> Counter[int]:
    source.refresh()
    return Counter(source.scan(row_filter=row_filter).to_arrow().column("event_id").to_pylist())


def test_a_group_filtered_to_one_region_plans_lags_and_consumes_only_that_region(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group(filter="region = 'eu'", max_borrowers=2)
    source = create_source(catalog, group.source)
    append(source, 40, regions=("eu", "us"))
    append(source, 12, regions=("us",))
    append(source, 9, regions=("eu",))

    lag = lag_of(catalog, group)
    assert (lag.rows, lag.snapshots) == (29, 2), "20 eu rows of the first commit and 9 of the third"
    planned = tick(catalog, group, lambda _: RunState.MISSING)
    assert {shard.stream for shard in planned.state.shards.values()} == {"0:region=eu"}
    assert [s.stream for s in describe_group(catalog, group).streams] == ["0:region=eu"]

    drive(spark, lakehouse, group, borrowers=2)

    assert sink_ids(catalog, group) == source_ids(source, "region = 'eu'"), "every eu row once, no us row"
    assert verify_group(catalog, group, key="event_id").ok

    # A later commit to us alone, written by Spark: no lag, nothing planned, and the cursor moves past it.
    source.refresh()
    before = source.current_snapshot()
    spark.sql(
        f"INSERT INTO {lakehouse.catalog_name}.{group.source} VALUES "
        "(100001, 'us', TIMESTAMP '2026-01-02 00:00:00 UTC', 5.0, 1), "
        "(100002, 'us', TIMESTAMP '2026-01-02 00:00:01 UTC', 6.0, 2)"
    )
    assert source_ids(source, "event_id > 100000") == Counter([100001, 100002])
    assert source.current_snapshot() != before
    assert lag_of(catalog, group).rows == 0
    assert lag_of(catalog, group).snapshots == 0
    view = describe_group(catalog, group)
    assert view.lag_rows == 0
    assert view.status == "caught up"
    ticks, _ = drive(spark, lakehouse, group)
    assert sum(t.new_shards for t in ticks) == 0
    state = load_state(catalog, group.name).state
    assert state is not None
    assert state.planned_through == source.current_snapshot().snapshot_id  # type: ignore[union-attr]
    assert set(state.streams) == {"0:region=eu"}
    assert sink_ids(catalog, group) == source_ids(source, "region = 'eu'")


def test_other_transforms_and_columns_are_kept_and_filtered_by_row(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    """days(event_ts) is never pruned; identity region is; amount, no partition, is applied to rows only."""
    row_filter = "region = 'eu' and event_ts >= '2026-01-01T00:00:20+00:00' and amount > 30"
    group = make_group(filter=row_filter)
    catalog.create_namespace_if_not_exists(group.source.split(".")[0])
    spec = PartitionSpec(
        PartitionField(3, 1000, DayTransform(), "event_day"),
        PartitionField(2, 1001, IdentityTransform(), "region"),
    )
    source = catalog.create_table(group.source, schema=SCHEMA, partition_spec=spec)
    append(source, 60, regions=("eu", "us", "apac"))

    planned = tick(catalog, group, lambda _: RunState.MISSING)
    streams = {shard.stream for shard in planned.state.shards.values()}
    assert streams
    assert all(stream.endswith("region=eu") for stream in streams), streams

    drive(spark, lakehouse, group)

    assert sink_ids(catalog, group) == source_ids(source, row_filter)
    assert verify_group(catalog, group, key="event_id").ok
