"""A lagging group survives any engine's snapshot expiry: the operator's scenario, on real Spark and Iceberg.

A group catches up, the producer appends more, and the operator's maintenance expires every snapshot
but the head (Spark's ``expire_snapshots`` with ``retain_last => 1``, or pyiceberg's). The group's
branch keeps its position's snapshot; the snapshots after it are gone. The group must go on by
itself, exactly once. A compaction in that stretch must stop it with the figures of what is at
stake, and a reset across it must preview the rows it skips.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from pyiceberg.catalog import Catalog
from pyspark.sql import SparkSession

from icegroup.iceberg.config.lakehouse import LakehouseConfig
from icegroup.iceberg.errors import SourceBlocked
from icegroup.iceberg.leader import tick
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.liveness import RunState
from icegroup.iceberg.protocol.reset import ResetTarget
from icegroup.iceberg.reset import execute_reset, plan_reset
from icegroup.iceberg.store.registry import load_state
from icegroup.iceberg.verify import verify_group
from tests.factories import MakeGroup, append_batches, create_source
from tests.integration.helpers import drive, sink_ids

pytestmark = pytest.mark.spark

BATCH = 40  # rows per append, spread over the demo's regions (one stream each)


def spark_expire(spark: SparkSession, lakehouse: LakehouseConfig, table: str) -> None:
    """The operator's nightly job: Spark's own procedure, everything older than a minute from now, keep 1."""
    later = (datetime.now(UTC) + timedelta(minutes=1)).strftime("%Y-%m-%d %H:%M:%S")
    spark.sql(
        f"CALL {lakehouse.catalog_name}.system.expire_snapshots(table => '{table}', "
        f"older_than => TIMESTAMP '{later}', retain_last => 1)"
    )


def lagging(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, group: GroupConfig
) -> tuple[int, list[int]]:
    """Three appends consumed, four more not: the group's position and the unconsumed snapshots."""
    append_batches(create_source(catalog, group.source), 3, BATCH)
    drive(spark, lakehouse, group)
    state = load_state(catalog, group.name).state
    assert state is not None
    assert state.planned_through is not None
    append_batches(catalog.load_table(group.source), 4, BATCH)
    newer = [s.snapshot_id for s in catalog.load_table(group.source).snapshots()][3:]
    return state.planned_through, newer


def iceberg_version(spark: SparkSession) -> tuple[int, int]:
    """The Iceberg runtime's release as (major, minor), as the JVM reports it."""
    release = str(spark._jvm.org.apache.iceberg.IcebergBuild.version()).split()[0]  # type: ignore[union-attr]
    major, minor = release.split(".")[:2]
    return int(major), int(minor)


def files_found(catalog: Catalog, group: GroupConfig) -> list[str]:
    """How the group's sink commits say each shard was found."""
    sink = catalog.load_table(group.sink)
    ranges = [
        item
        for snapshot in sink.snapshots()
        if snapshot.summary and snapshot.summary.additional_properties.get("icegroup.group") == group.name
        for item in json.loads(snapshot.summary.additional_properties["icegroup.shards"])
    ]
    return [item.get("found", "snapshots") for item in ranges]


@pytest.mark.parametrize("engine", ["spark", "pyiceberg"])
def test_a_group_whose_unconsumed_snapshots_expired_goes_on_exactly_once(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup, engine: str
) -> None:
    group = make_group()
    position, newer = lagging(spark, lakehouse, catalog, group)
    if engine == "spark":
        spark_expire(spark, lakehouse, group.source)
    else:
        catalog.load_table(group.source).maintenance.expire_snapshots().older_than(datetime.now(UTC)).commit()
    source = catalog.load_table(group.source)
    gone = [s for s in newer if source.snapshot_by_id(s) is None]
    assert len(gone) >= 3, "the expiry took the unconsumed snapshots but the head"
    assert source.snapshot_by_id(position) is not None, "the group's branch kept its position"

    drive(spark, lakehouse, group)

    ids = sink_ids(catalog, group)
    assert sorted(ids) == list(range(1, 7 * BATCH + 1)), "every row, none lost"
    assert set(ids.values()) == {1}, "none twice"
    assert verify_group(catalog, group, key="event_id").ok
    found = files_found(catalog, group)
    assert "snapshots" in found, "the commits before the expiry found their shards by snapshots"
    assert "files" in found, "the commits after it say a file diff found them"


def test_a_compaction_in_expired_history_stops_the_group_with_what_is_at_stake(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group()
    lagging(spark, lakehouse, catalog, group)
    before = {f["file_path"]: f["record_count"] for f in catalog.load_table(group.source).inspect.files().to_pylist()}
    spark.sql(
        f"CALL {lakehouse.catalog_name}.system.rewrite_data_files(table => '{group.source}', "
        "options => map('min-input-files','2'))"
    )
    spark_expire(spark, lakehouse, group.source)
    now = {f["file_path"]: f["record_count"] for f in catalog.load_table(group.source).inspect.files().to_pylist()}
    read = consumed_files(catalog, group)
    gone = [path for path in read if path not in now]
    unread = [path for path in now if path not in read]
    assert gone, "the compaction merged files the group had read"
    assert set(unread) - set(before), "into new files"

    with pytest.raises(SourceBlocked) as stop:
        tick(catalog, group, lambda _: RunState.MISSING)

    message = str(stop.value)
    assert f"{len(gone)} data file(s) ({sum(before[p] for p in gone)} rows) live at snapshot" in message
    assert f"The {len(unread)} data file(s) ({sum(now[p] for p in unread)} rows)" in message
    assert f"icegroup reset {group.name} --to-latest --execute" in message
    assert sorted(sink_ids(catalog, group)) == list(range(1, 3 * BATCH + 1)), "nothing more was committed"


def consumed_files(catalog: Catalog, group: GroupConfig) -> set[str]:
    """Files live at the group's position: the ones it had read when the compaction ran."""
    state = load_state(catalog, group.name).state
    assert state is not None
    source = catalog.load_table(group.source)
    return {f["file_path"] for f in source.inspect.files(state.planned_through).to_pylist()}


def test_a_reset_across_expired_history_previews_the_rows_it_skips(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group()
    lagging(spark, lakehouse, catalog, group)
    spark_expire(spark, lakehouse, group.source)

    preview = plan_reset(catalog, group, ResetTarget("earliest"))
    skipped = sum(move.skipped_rows for move in preview.moves)
    assert skipped == 3 * BATCH, "the three expired appends before the oldest snapshot left are skipped"
    assert sum(move.skipped_expired_rows for move in preview.moves) == skipped

    execute_reset(catalog, group, ResetTarget("earliest"))
    drive(spark, lakehouse, group)
    ids = sink_ids(catalog, group)
    assert 7 * BATCH - len(ids) == skipped, "the execution skipped what the preview said"
    assert set(ids.values()) == {1}


def test_a_compaction_in_expired_history_of_a_format_v3_source_is_read_exactly_by_row_id(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group()
    table = f"{lakehouse.catalog_name}.{group.source}"
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {lakehouse.catalog_name}.{group.source.split('.')[0]}")
    spark.sql(
        f"CREATE TABLE {table} (event_id BIGINT, region STRING) USING iceberg PARTITIONED BY (region) "
        "TBLPROPERTIES ('format-version'='3')"
    )

    def append(first: int) -> None:
        spark.sql(
            f"INSERT INTO {table} SELECT id AS event_id, element_at(array('eu', 'us', 'apac'), "
            f"CAST(id % 3 AS INT) + 1) AS region FROM range({first}, {first + BATCH})"
        )

    for batch in range(3):
        append(1 + batch * BATCH)
    drive(spark, lakehouse, group)
    for batch in range(3, 7):
        append(1 + batch * BATCH)
    spark.sql(f"CALL {lakehouse.catalog_name}.system.rewrite_data_files(table => '{group.source}', "
              "options => map('min-input-files','2'))")  # fmt: skip
    # pyiceberg writes no format-v3 metadata, so on this SQL catalog the group keeps no branch on the
    # source (a REST server writes its own metadata, and keeps it). The expiry takes the snapshots
    # after the position, as an expiry behind a branch does.
    state = load_state(catalog, group.name).state
    assert state is not None
    after = [s.snapshot_id for s in catalog.load_table(group.source).snapshots()]
    gap = after[after.index(state.planned_through) + 1 : -1]
    assert len(gap) == 4, "the four unconsumed appends; the compaction is the head"
    spark.sql(
        f"CALL {lakehouse.catalog_name}.system.expire_snapshots(table => '{group.source}', "
        f"snapshot_ids => array({', '.join(map(str, gap))}))"
    )

    if iceberg_version(spark) < (1, 10):  # its compaction writes no _row_id: the rows take new ids, so no proof
        with pytest.raises(SourceBlocked, match="a compaction, delete or overwrite ran among them"):
            drive(spark, lakehouse, group)
        assert sorted(sink_ids(catalog, group)) == list(range(1, 3 * BATCH + 1)), "nothing more was committed"
        return
    drive(spark, lakehouse, group)

    ids = sink_ids(catalog, group)
    assert sorted(ids) == list(range(1, 7 * BATCH + 1)), "every row, though the compaction merged read and unread"
    assert set(ids.values()) == {1}, "none twice"
    assert "row_ids" in files_found(catalog, group), "the commits say a row-id watermark found them"
