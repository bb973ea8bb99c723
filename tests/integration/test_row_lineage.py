"""On a format-v3 source each sink row names its source row by ``_row_id``, exactly, through compaction and replay.

Every check compares with the source's own ``_row_id`` as Spark reads it, row by row, joined on
``event_id`` (unique in these sources).
"""

from __future__ import annotations

import pytest
from pyiceberg.catalog import Catalog
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from icegroup.iceberg.config.lakehouse import LakehouseConfig
from icegroup.iceberg.errors import UsageError
from icegroup.iceberg.lineage_rows import by_rows, by_source_rows
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.shards import window_texts
from icegroup.iceberg.protocol.sink_commit import COL_ROW, COL_WINDOW
from icegroup.spark_jobs.replay import replay_window
from icegroup.spark_jobs.row_files import ROW_REF_SQL, mark_rows
from tests.factories import MakeGroup, append_batches, create_source
from tests.integration.helpers import drive
from tests.integration.test_expired_history import iceberg_version

pytestmark = pytest.mark.spark

BATCH = 30


def v3_source(spark: SparkSession, lakehouse: LakehouseConfig, group: GroupConfig, batches: int) -> str:
    """A format-v3 source of ``batches`` appends of ``BATCH`` rows over three regions; its name as Spark has it."""
    table = f"{lakehouse.catalog_name}.{group.source}"
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {lakehouse.catalog_name}.{group.source.split('.')[0]}")
    spark.sql(
        f"CREATE TABLE {table} (event_id BIGINT, region STRING, amount DOUBLE) USING iceberg PARTITIONED BY (region) "
        "TBLPROPERTIES ('format-version'='3')"
    )
    for batch in range(batches):
        first = 1 + batch * BATCH
        spark.sql(
            f"INSERT INTO {table} SELECT id AS event_id, element_at(array('eu', 'us', 'apac'), "
            f"CAST(id % 3 AS INT) + 1) AS region, id * 1.5 AS amount FROM range({first}, {first + BATCH})"
        )
    return table


def source_row_ids(spark: SparkSession, table: str) -> dict[int, int]:
    """Each source row's ``_row_id``, by its ``event_id``, as the source's Iceberg gives it now."""
    return {row["event_id"]: row["_row_id"] for row in spark.sql(f"SELECT event_id, _row_id FROM {table}").collect()}


def sink_row_ids(catalog: Catalog, group: GroupConfig) -> dict[int, int | None]:
    """Each sink row's ``_ig_row``, by its ``event_id``; every event once."""
    rows = catalog.load_table(group.sink).scan(selected_fields=("event_id", COL_ROW)).to_arrow().to_pylist()
    found = {row["event_id"]: row[COL_ROW] for row in rows}
    assert len(found) == len(rows), "each event once"
    return found


@pytest.fixture(autouse=True)
def row_ids_readable(spark: SparkSession) -> None:
    """Row lineage needs Iceberg 1.10 (``reads_row_ids``); the matrix's older pair has none to check."""
    if iceberg_version(spark) < (1, 10):
        pytest.skip("Iceberg before 1.10 gives no _row_id to Spark's reader")


def test_one_task_over_many_files_and_batches_names_each_output_rows_own_source_row(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    """12,000 rows a file is more than one of the vectorized reader's batches; a filter and an explode in between."""
    group = make_group()
    table = v3_source(spark, lakehouse, group, 0)
    for first in (0, 12_000, 24_000):
        spark.sql(
            f"INSERT INTO {table} SELECT id AS event_id, 'eu' AS region, id * 1.5 AS amount "
            f"FROM range({first}, {first + 12_000}, 1, 1)"
        )
    rows = mark_rows(spark.table(table).select("*", "_row_id").coalesce(1))
    out = rows.where("event_id % 7 != 0").select("*", F.explode(F.array(F.lit(1), F.lit(2))).alias("copy"))

    checked = out.select("_row_id", F.expr(ROW_REF_SQL).alias("ref")).agg(
        F.count("*").alias("rows"), F.sum((F.col("ref") == F.col("_row_id")).cast("int")).alias("same")
    )

    [result] = checked.collect()
    assert result["rows"] == 2 * (36_000 - len(range(0, 36_000, 7)))
    assert result["same"] == result["rows"], "every output row names the row it came from"


@pytest.mark.parametrize("batch_rows", [0, 100_000], ids=["shard-by-shard", "shards-batched"])
def test_each_sink_row_carries_its_source_rows_id(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup, batch_rows: int
) -> None:
    group = make_group(transform="tests.integration.transforms:amount_in_cents", commit_batch_rows=batch_rows)
    table = v3_source(spark, lakehouse, group, 3)

    drive(spark, lakehouse, group)

    assert sink_row_ids(catalog, group) == source_row_ids(spark, table)


def test_an_aggregations_rows_name_no_source_row_and_sinks_without_row_ids_have_no_row_column(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    totals = make_group(transform="tests.integration.transforms:totals_by_region")
    v3_source(spark, lakehouse, totals, 2)
    drive(spark, lakehouse, totals)
    v2 = make_group(name=f"{totals.name}_v2", source=f"{totals.source}_v2", sink=f"{totals.sink}_v2")
    append_batches(create_source(catalog, v2.source), 2, BATCH)
    drive(spark, lakehouse, v2)
    off = make_group(name=f"{totals.name}_off", source=totals.source, sink=f"{totals.sink}_off", source_row_ids=False)
    drive(spark, lakehouse, off)

    rows = catalog.load_table(totals.sink).scan().to_arrow()
    assert rows.num_rows > 0
    assert COL_ROW not in rows.column_names or rows.column(COL_ROW).null_count == rows.num_rows
    for group in (v2, off):
        sink = catalog.load_table(group.sink)
        assert sink.scan().to_arrow().num_rows == 2 * BATCH
        assert COL_ROW not in {f.name for f in sink.schema().fields}, "one column narrower"
        with pytest.raises(UsageError, match=r"--source-row-id: .* no _ig_row column.*--source-file"):
            by_source_rows(catalog, group, [1])


def test_source_rows_name_their_sink_rows_after_the_source_is_compacted_and_the_window_replayed(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group()
    table = v3_source(spark, lakehouse, group, 4)
    drive(spark, lakehouse, group)
    before = source_row_ids(spark, table)
    spark.sql(
        f"CALL {lakehouse.catalog_name}.system.rewrite_data_files(table => '{group.source}', "
        "options => map('min-input-files','2'))"
    )
    assert source_row_ids(spark, table) == before, "the compaction kept every row's id"
    [window] = set(window_texts(catalog.load_table(group.sink).scan().to_arrow().column(COL_WINDOW).to_pylist()))
    assert window is not None
    replay_window(spark, lakehouse, group, window)

    assert sink_row_ids(catalog, group) == before, "the replayed rows name their source rows too"
    for event_id in (1, 2, 3 * BATCH + 7):
        forward = by_source_rows(catalog, group, [before[event_id]])
        assert forward.sink_filter is not None
        named = catalog.load_table(group.sink).scan(row_filter=forward.sink_filter).to_arrow()
        assert named.column("event_id").to_pylist() == [event_id], "precision and recall 1.0"
        assert sum(forward.sink_rows.values()) == 1
        assert len(forward.found) == 1, "one shard, and of it the one file the row was read from"
    backward = by_rows(catalog, group, "event_id < 4")
    assert backward.source_filter == f"_row_id IN ({', '.join(str(i) for i in sorted(before[e] for e in (1, 2, 3)))})"
    named = spark.sql(f"SELECT event_id FROM {table} WHERE {backward.source_filter}").collect()
    assert sorted(row["event_id"] for row in named) == [1, 2, 3]
