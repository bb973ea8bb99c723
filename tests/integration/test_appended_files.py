"""A shard's read of a snapshot range: exactly the files asked for, planned from the newest manifest list.

Iceberg's own incremental read is the reference: for the files asked for, the rows read must be the
rows it reads, whatever happened to the files inside the range.
"""

from __future__ import annotations

import pytest
from py4j.protocol import Py4JJavaError
from pyiceberg.catalog import Catalog
from pyiceberg.table import Table
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from icegroup.iceberg.config.lakehouse import LakehouseConfig
from icegroup.spark_jobs.row_files import FILE_COLUMN
from icegroup.spark_jobs.shards import read_appended
from tests.factories import MakeGroup, append_batches, create_source

pytestmark = pytest.mark.spark


def filled(catalog: Catalog, make_group: MakeGroup, batches: int, rows: int) -> tuple[str, Table, list[int]]:
    """A new group's source with ``batches`` appended snapshots of ``rows`` events: its name, table and snapshot ids."""
    group = make_group()
    source = create_source(catalog, group.source)
    append_batches(source, batches, rows)
    source.refresh()
    return group.source, source, [s.snapshot_id for s in source.snapshots()]


def added_by(table: Table, snapshot_ids: set[int]) -> list[str]:
    """The data files that the given snapshots added, from the manifests each wrote."""
    files = []
    for snapshot_id in sorted(snapshot_ids):
        snapshot = table.snapshot_by_id(snapshot_id)
        assert snapshot is not None
        for manifest in snapshot.manifests(table.io):
            if manifest.added_snapshot_id == snapshot_id:
                files += [e.data_file.file_path for e in manifest.fetch_manifest_entry(table.io)]
    return files


def iceberg_incremental(spark: SparkSession, name: str, start: int, end: int, files: list[str]) -> DataFrame:
    """Iceberg's own incremental read of the range, kept to ``files``: the reference."""
    reader = spark.read.format("iceberg").option("start-snapshot-id", str(start)).option("end-snapshot-id", str(end))
    return reader.load(name).select("*", FILE_COLUMN).where(F.col(FILE_COLUMN).isin(files)).drop(FILE_COLUMN)


def scans(df: DataFrame) -> list[str]:
    """The class of each scan the read's physical plan runs: ``SparkStagedScan`` for a staged task set."""
    leaves = df._jdf.queryExecution().executedPlan().collectLeaves().iterator()
    found = []
    while leaves.hasNext():
        leaf = leaves.next()
        if str(leaf.nodeName()).startswith("BatchScan"):
            found.append(str(leaf.scan().getClass().getSimpleName()))
    return found


def event_ids(df: DataFrame) -> list[int]:
    """The read's event ids, sorted."""
    return sorted(row.event_id for row in df.select("event_id").collect())


def test_a_read_of_many_snapshots_is_exactly_its_files_through_a_staged_task_set(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    table, source, ids = filled(catalog, make_group, 30, 12)
    name = f"{lakehouse.catalog_name}.{table}"
    files = [f for f in added_by(source, set(ids[10:20])) if "region=eu" in f]
    assert len(files) == 10

    df = read_appended(spark, name, ids[9], ids[19], files, {}, (FILE_COLUMN,))

    assert scans(df) == ["SparkStagedScan"]
    assert {row[FILE_COLUMN] for row in df.select(FILE_COLUMN).collect()} == set(files)
    assert event_ids(df.drop(FILE_COLUMN)) == event_ids(iceberg_incremental(spark, name, ids[9], ids[19], files))
    assert len(event_ids(df)) == 10 * 4, "12 events a snapshot over 3 regions: 4 of each snapshot are eu"


def test_a_file_deleted_inside_the_range_is_read_as_iceberg_reads_it(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    """The newest manifest list no longer names a file deleted in the range: its own snapshot's manifests do."""
    table, source, ids = filled(catalog, make_group, 3, 9)
    first, second, _ = ids
    asked = added_by(source, {second})
    source.delete("event_id >= 10 AND event_id <= 18")  # every row the second snapshot added: its files go
    append_batches(source, 1, 9)
    source.refresh()
    end = source.snapshots()[-1].snapshot_id
    name = f"{lakehouse.catalog_name}.{table}"

    df = read_appended(spark, name, first, end, asked, {}, (FILE_COLUMN,))

    assert event_ids(df) == list(range(10, 19))
    assert event_ids(df) == event_ids(iceberg_incremental(spark, name, first, end, asked))


def test_a_file_the_range_did_not_add_fails_the_read_instead_of_leaving_its_rows_out(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    table, source, ids = filled(catalog, make_group, 3, 9)
    first, second, third = ids
    outside = added_by(source, {first})[:1]

    with pytest.raises(Py4JJavaError, match="1 of the 2 files asked for were not added to"):
        read_appended(
            spark,
            f"{lakehouse.catalog_name}.{table}",
            second,
            third,
            [*outside, *added_by(source, {third})[:1]],
            {},
            (FILE_COLUMN,),
        )


def test_a_read_from_the_first_snapshot_finds_files_whose_snapshot_expired(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    """From the table's first snapshot on, any manifest of the newest list may hold the files asked for."""
    table, source, ids = filled(catalog, make_group, 3, 9)
    first, _, third = ids
    asked = added_by(source, {first})
    name = f"{lakehouse.catalog_name}.{table}"
    expire = f"expire_snapshots(table => '{table}', snapshot_ids => array({first}))"
    spark.sql(f"CALL {lakehouse.catalog_name}.system.{expire}")

    df = read_appended(spark, name, None, third, asked, {}, (FILE_COLUMN,))

    assert event_ids(df) == list(range(1, 10))


def test_only_the_newest_task_sets_stay_staged(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    """A read's tasks stay staged until it runs: the newest 256 sets are kept, older ones dropped, not kept for good."""
    table, source, ids = filled(catalog, make_group, 2, 3)
    first, second = ids
    name = f"{lakehouse.catalog_name}.{table}"
    files = added_by(source, {second})
    jvm = spark._jvm
    assert jvm is not None
    loaded = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, name)
    kept = jvm.icegroup.read.AppendedFiles.KEPT

    staged = [jvm.icegroup.read.AppendedFiles.stage(loaded, first, second, "\n".join(files)) for _ in range(kept + 5)]

    now = set(jvm.org.apache.iceberg.spark.ScanTaskSetManager.get().fetchSetIds(loaded))
    assert now == set(staged[5:])
    assert event_ids(read_appended(spark, name, first, second, files, {}, ())) == [4, 5, 6]
