"""Source edge cases: deletes, compaction, partition and schema evolution, empty snapshots, chained groups."""

from __future__ import annotations

import time

import pyarrow as pa
import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.transforms import BucketTransform
from pyiceberg.types import StringType
from pyspark.sql import SparkSession

from icegroup.iceberg.config.lakehouse import LakehouseConfig
from icegroup.iceberg.errors import SinkError, SourceError
from icegroup.iceberg.leader import tick
from icegroup.iceberg.protocol.liveness import RunState
from icegroup.iceberg.protocol.shards import window_label
from icegroup.iceberg.store.registry import load_state
from icegroup.iceberg.store.sink_history import read_sink_history
from icegroup.iceberg.verify import verify_group
from icegroup.spark_jobs.replay import replay_window
from tests.factories import SCHEMA, MakeGroup, append_batches, create_source, events
from tests.integration.helpers import consumed, drive

pytestmark = pytest.mark.spark


def test_a_delete_snapshot_fails_the_group_by_default_and_is_skipped_on_request(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group()
    source = create_source(catalog, group.source)
    append_batches(source, 2, 6)
    catalog.load_table(group.source).delete("region = 'eu'")
    append_batches(catalog.load_table(group.source), 1, 6)

    with pytest.raises(SourceError, match=r"delete.*non_append: skip"):
        drive(spark, lakehouse, group)
    consumed = catalog.load_table(group.sink).scan(selected_fields=("event_id",)).to_arrow()
    assert sorted(consumed["event_id"].to_pylist()) == list(range(1, 13)), "the appends before it, then a stop"
    with pytest.raises(SourceError, match=r"delete.*non_append: skip"):
        tick(catalog, group, lambda _: RunState.MISSING)

    skipping = make_group(non_append="skip")
    drive(spark, lakehouse, skipping)
    sink = catalog.load_table(skipping.sink).scan(selected_fields=("event_id",)).to_arrow()
    assert sorted(sink["event_id"].to_pylist()) == list(range(1, 19)), "appended rows, deleted or not, once each"


def test_compaction_of_the_source_is_ignored(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group(max_borrowers=3)
    source = create_source(catalog, group.source)
    append_batches(source, 3, 12)
    drive(spark, lakehouse, group)
    spark.sql(
        f"CALL {lakehouse.catalog_name}.system.rewrite_data_files(table => '{group.source}', "
        "options => map('min-input-files', '2', 'rewrite-all', 'true'))"
    ).collect()
    assert catalog.load_table(group.source).current_snapshot().summary.operation.value == "replace"
    append_batches(catalog.load_table(group.source), 1, 12)

    drive(spark, lakehouse, group)

    check = verify_group(catalog, group, key="event_id")
    assert check.ok
    assert check.found == 48


def test_partition_spec_evolution_merges_and_splits_streams(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group(max_borrowers=3)
    source = create_source(catalog, group.source)
    append_batches(source, 2, 12)
    drive(spark, lakehouse, group)
    with source.update_spec() as spec:  # merge: the region streams become one
        spec.remove_field("region")
    append_batches(catalog.load_table(group.source), 2, 12)
    drive(spark, lakehouse, group)
    with catalog.load_table(group.source).update_spec() as spec:  # split: two buckets
        spec.add_field("user_id", BucketTransform(2), "user_bucket")
    append_batches(catalog.load_table(group.source), 2, 12)

    drive(spark, lakehouse, group)

    streams = set(load_state(catalog, group.name).state.streams)
    assert len([s for s in streams if s.startswith("0:")]) == 3
    assert len([s for s in streams if s.startswith("1:")]) == 1
    assert len([s for s in streams if s.startswith("2:")]) == 2
    check = verify_group(catalog, group, key="event_id")
    assert check.ok
    assert check.found == 72


def test_schema_evolution_cuts_shards_and_each_transform_sees_its_shards_schema(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group(transform="tests.integration.transforms:columns_seen", max_borrowers=1)
    source = create_source(catalog, group.source)
    append_batches(source, 1, 6)
    with source.update_schema() as update:
        update.add_column("channel", StringType())
    table = catalog.load_table(group.source)
    rows = events(7, 6, seed=3).append_column("channel", pa.array(["web"] * 6))
    table.append(rows.cast(table.schema().as_arrow()))

    drive(spark, lakehouse, group)

    history = read_sink_history(catalog, group.sink, group.name, None)
    assert history.commits
    assert all(
        len({catalog.load_table(group.source).snapshot_by_id(sid).schema_id for sid in shard.snapshots}) == 1
        for c in history.commits
        for shard in c.shards
    ), "no shard crosses the schema change"
    out = catalog.load_table(group.sink).scan(selected_fields=("event_id", "seen", "channel")).to_arrow().to_pylist()
    before = [r for r in out if r["event_id"] <= 6]
    after = [r for r in out if r["event_id"] > 6]
    assert len(before) == 6
    assert len(after) == 6
    assert all("channel" not in r["seen"].split(",") and r["channel"] is None for r in before)
    assert all("channel" in r["seen"].split(",") and r["channel"] == "web" for r in after)


def test_columns_the_source_widens_widen_in_the_sink_and_a_replay_across_the_change_still_fits(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup, ns: str
) -> None:
    """A source's int, float and decimal widened mid-backlog (as Iceberg allows): the group goes on, every row exact."""
    group = make_group(max_borrowers=1)
    source = f"{lakehouse.catalog_name}.{group.source}"
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {lakehouse.catalog_name}.{ns}")
    spark.sql(
        f"CREATE TABLE {source} (event_id bigint, region string, n int, score float, price decimal(9,2)) "
        "USING iceberg PARTITIONED BY (region)"
    )

    def insert(first: int) -> None:
        spark.sql(
            f"INSERT INTO {source} SELECT id, concat('r', id % 2), CAST(id AS int), CAST(id AS float) / 4, "
            f"CAST(id AS decimal(9,2)) FROM range({first}, {first + 6})"
        )

    insert(1)
    drive(spark, lakehouse, group)
    insert(7)  # a backlog from before the change, read after it
    for column, wide in (("n", "bigint"), ("score", "double"), ("price", "decimal(12,2)")):
        spark.sql(f"ALTER TABLE {source} ALTER COLUMN {column} TYPE {wide}")
    spark.sql(f"INSERT INTO {source} SELECT id, 'r0', id * 3000000000, id / 3, id * 1000000.25 FROM range(13, 19)")
    drive(spark, lakehouse, group)
    window = window_label(int(time.time() * 1000), group.replay_window)
    replay_window(spark, lakehouse, group, window, progress=lambda _: None)  # windows written before the change, again

    sink = {f.name: str(f.field_type) for f in catalog.load_table(group.sink).schema().fields}
    assert (sink["n"], sink["score"], sink["price"]) == ("long", "double", "decimal(12, 2)")
    check = verify_group(catalog, group, key="event_id")
    assert check.ok
    assert check.found == 18
    columns = ("event_id", "n", "score", "price")
    expected = catalog.load_table(group.source).scan(selected_fields=columns).to_arrow().sort_by("event_id")
    assert catalog.load_table(group.sink).scan(selected_fields=columns).to_arrow().sort_by("event_id") == expected


def test_empty_snapshots_are_consumed_as_nothing(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group()
    source = create_source(catalog, group.source)
    empty = pa.Table.from_pylist([], schema=SCHEMA.as_arrow())
    source.append(empty)
    append_batches(catalog.load_table(group.source), 1, 6)
    catalog.load_table(group.source).append(empty)

    ticks, _ = drive(spark, lakehouse, group)

    assert ticks[-1].caught_up
    assert ticks[-1].state.planned_through == catalog.load_table(group.source).current_snapshot().snapshot_id
    check = verify_group(catalog, group, key="event_id")
    assert check.ok
    assert check.found == 6


def test_a_groups_sink_is_consumed_by_a_chained_group(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup, ns: str
) -> None:
    first = make_group(max_borrowers=2)
    second = make_group(name=f"g_{ns}_next", source=first.sink, sink=f"{ns}.events_next", max_borrowers=2)
    source = create_source(catalog, first.source)
    for _ in range(2):
        append_batches(source, 2, 12)
        drive(spark, lakehouse, first)
        drive(spark, lakehouse, second)

    operations = {s.summary.operation.value for s in catalog.load_table(first.sink).snapshots()}
    assert operations == {"append"}, "sink commits are appends, so incremental readers see them"
    check = verify_group(catalog, second, key="event_id")
    assert check.ok
    assert check.found == 48
    out = catalog.load_table(second.sink).scan().to_arrow()
    assert not {"_ig_group", "_ig_upstream_shard"} & set(out.column_names), "upstream lineage is not carried over"
    commits = [
        s.summary for s in catalog.load_table(second.sink).snapshots() if s.summary and s.summary.get("icegroup.shards")
    ]
    assert {c.get("icegroup.group") for c in commits} == {second.name}


def test_a_sink_that_cannot_take_the_output_is_a_clear_error_and_nothing_is_committed(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group(transform="tests.integration.transforms:event_id_as_string")
    append_batches(create_source(catalog, group.source), 1, 6)
    spark.sql(f"CREATE TABLE {lakehouse.catalog_name}.{group.sink} (event_id bigint) USING iceberg")

    with pytest.raises(SinkError, match=r"event_id \(string\): sink has bigint"):
        drive(spark, lakehouse, group, max_ticks=1)

    assert catalog.load_table(group.sink).snapshots() == []


def test_a_replay_of_an_upstream_sink_stops_a_chained_group_naming_it_or_is_skipped_on_request(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup, ns: str
) -> None:
    first = make_group()
    second = make_group(name=f"g_{ns}_next", source=first.sink, sink=f"{ns}.events_next")
    consumed(spark, lakehouse, catalog, first, 2, 12)
    drive(spark, lakehouse, second)
    window = window_label(int(time.time() * 1000), first.replay_window)

    replay_window(spark, lakehouse, first, window, progress=lambda _: None)

    with pytest.raises(SourceError, match=f"is a replay of window {window} by group '{first.name}'"):
        tick(catalog, second, lambda _: RunState.MISSING)
    skipping = second.model_copy(update={"non_append": "skip"})
    append_batches(catalog.load_table(first.source), 1, 12)
    drive(spark, lakehouse, first)
    drive(spark, lakehouse, skipping)
    rows = catalog.load_table(second.sink).scan(selected_fields=("event_id",)).to_arrow()
    assert sorted(rows.column("event_id").to_pylist()) == list(range(1, 37)), "old version kept, new appends go on"
