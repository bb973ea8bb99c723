"""A shard's read of a snapshot range: exactly the files asked for, planned from the newest manifest list.

Iceberg's own incremental read is the reference: for the files asked for, the rows read must be the
rows it reads, whatever happened to the files inside the range.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from py4j.protocol import Py4JJavaError
from pyiceberg.catalog import Catalog
from pyiceberg.manifest import ManifestEntryStatus
from pyiceberg.table import Table
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from icegroup.iceberg.config.lakehouse import LakehouseConfig
from icegroup.spark_jobs.row_files import FILE_COLUMN
from icegroup.spark_jobs.shards import read_appended
from tests.factories import MakeGroup, append_batches, create_source
from tests.integration.helpers import scans

pytestmark = pytest.mark.spark


def filled(catalog: Catalog, make_group: MakeGroup, batches: int, rows: int) -> tuple[str, Table, list[int]]:
    """A new group's source with ``batches`` appended snapshots of ``rows`` events: its name, table and snapshot ids."""
    group = make_group()
    source = create_source(catalog, group.source)
    append_batches(source, batches, rows)
    source.refresh()
    return group.source, source, [s.snapshot_id for s in source.snapshots()]


def added_by(table: Table, snapshot_ids: set[int]) -> list[str]:
    """The data files that the given snapshots added: the added entries of the manifests each wrote."""
    files = []
    for snapshot_id in sorted(snapshot_ids):
        snapshot = table.snapshot_by_id(snapshot_id)
        assert snapshot is not None
        for manifest in snapshot.manifests(table.io):
            if manifest.added_snapshot_id == snapshot_id:
                entries = manifest.fetch_manifest_entry(table.io)
                files += [e.data_file.file_path for e in entries if e.status == ManifestEntryStatus.ADDED]
    return files


def iceberg_incremental(spark: SparkSession, name: str, start: int, end: int, files: list[str]) -> DataFrame:
    """Iceberg's own incremental read of the range, kept to ``files``: the reference."""
    reader = spark.read.format("iceberg").option("start-snapshot-id", str(start)).option("end-snapshot-id", str(end))
    return reader.load(name).select("*", FILE_COLUMN).where(F.col(FILE_COLUMN).isin(files)).drop(FILE_COLUMN)


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
    """A read's tasks stay staged until it runs: the newest 256 sets are kept, older ones dropped, not kept for good.

    Dropping a set never reads storage: the metadata file the table was first staged from may be gone by then
    (a sink removes its old metadata files).
    """
    table, source, ids = filled(catalog, make_group, 2, 3)
    first, second = ids
    name = f"{lakehouse.catalog_name}.{table}"
    files = added_by(source, {second})
    jvm = spark._jvm
    assert jvm is not None
    appended = jvm.icegroup.read.AppendedFiles
    load = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable
    staged = [appended.stage(load(spark._jsparkSession, name), first, second, "\n".join(files))]
    old_metadata = source.metadata_location
    append_batches(source, 1, 3)
    Path(old_metadata.removeprefix("file:")).unlink()
    loaded = load(spark._jsparkSession, name)

    staged += [appended.stage(loaded, first, second, "\n".join(files)) for _ in range(appended.KEPT + 4)]

    now = set(jvm.org.apache.iceberg.spark.ScanTaskSetManager.get().fetchSetIds(loaded))
    assert now == set(staged[5:])
    assert event_ids(read_appended(spark, name, first, second, files, {}, ())) == [4, 5, 6]


def test_files_a_merged_manifest_lists_from_before_the_range_are_not_read_as_the_range_s(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    """Spark merges manifests on append: the newest list's merged manifest lists older files as existing entries."""
    table, source, ids = filled(catalog, make_group, 1, 9)
    name = f"{lakehouse.catalog_name}.{table}"
    spark.sql(f"ALTER TABLE {name} SET TBLPROPERTIES ('commit.manifest.min-count-to-merge' = '2')")
    for offset in (9, 18, 27):
        spark.sql(
            f"INSERT INTO {name} SELECT event_id + {offset}, region, event_ts, amount, user_id FROM {name} "
            "WHERE event_id <= 9"
        )
    source.refresh()
    ids = [s.snapshot_id for s in source.snapshots()]
    newest = source.snapshot_by_id(ids[-1])
    assert newest is not None
    assert len(newest.manifests(source.io)) < len(ids), "the appends merged their manifests"
    inside = added_by(source, set(ids[2:]))
    before = added_by(source, {ids[0]})

    df = read_appended(spark, name, ids[1], ids[-1], inside, {}, (FILE_COLUMN,))

    assert event_ids(df.drop(FILE_COLUMN)) == list(range(19, 37))
    assert event_ids(df.drop(FILE_COLUMN)) == event_ids(iceberg_incremental(spark, name, ids[1], ids[-1], inside))
    with pytest.raises(Py4JJavaError, match="1 of the 2 files asked for were not added to"):
        read_appended(spark, name, ids[1], ids[-1], [before[0], inside[0]], {}, ())
