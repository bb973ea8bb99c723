"""Each sink row's source file, as Spark tells it: the hash matches, and the plan decides where it is exact."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from pyiceberg.catalog import Catalog
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from icegroup.iceberg.config.lakehouse import LakehouseConfig
from icegroup.iceberg.protocol.file_ref import file_ref
from icegroup.spark_jobs.row_files import (
    FILE_REF_SQL,
    by_file,
    by_file_number,
    file_ref_column,
    sql_string,
    streams_rows,
)
from icegroup.spark_jobs.transforms import enrich_events, load_transform
from tests.factories import MakeGroup, append_batches, create_source

pytestmark = pytest.mark.spark

LOCATIONS = [
    "",
    "a",
    "/w/0.parquet",
    "file:/tmp/lake/warehouse/shop/orders/data/region=eu/00000-5-0f3c.parquet",
    "s3://bucket/warehouse/db/t/data/" + "x" * 31 + ".parquet",
    "/données/日本/ü.parquet",
]


def test_sparks_xxhash64_of_a_location_is_the_reference_python_computes(spark: SparkSession) -> None:
    frame = spark.createDataFrame([(location,) for location in LOCATIONS], "location string")

    hashed = {
        row["location"]: row["ref"] for row in frame.select("location", F.xxhash64("location").alias("ref")).collect()
    }

    assert hashed == {location: file_ref(location) for location in LOCATIONS}


@dataclass(frozen=True)
class Source:
    """A source table of three appends, as Spark reads it, and its name; a second table to join or union with."""

    rows: DataFrame
    name: str
    other: DataFrame


@pytest.fixture
def source(spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup) -> Source:
    """The source, and another table of the same schema."""
    group = make_group()
    append_batches(create_source(catalog, group.source), 3, 30)
    append_batches(create_source(catalog, group.sink), 2, 10)
    name = f"{lakehouse.catalog_name}.{group.source}"
    return Source(spark.table(name), name, spark.table(f"{lakehouse.catalog_name}.{group.sink}"))


@pytest.mark.parametrize(
    ("transform", "exact"),
    [
        ("icegroup.spark_jobs.transforms:identity", True),
        ("icegroup.spark_jobs.transforms:enrich_events", True),
        ("tests.integration.transforms:amount_in_cents", True),
        ("tests.integration.transforms:totals_by_region", False),
        ("tests.integration.transforms:sorted_by_amount", False),
        ("tests.integration.transforms:reject_large_amounts", False),
        ("tests.integration.transforms:spread_over_two_tasks", False),
    ],
    ids=["identity", "select", "new-column", "aggregation", "sort", "python-udf", "shuffle"],
)
def test_the_plan_tells_where_each_rows_file_is_known(source: Source, transform: str, exact: bool) -> None:
    out = load_transform(transform)(source.rows)

    assert streams_rows(out, source.name) is exact


def test_rows_joined_or_unioned_with_another_table_name_no_file(source: Source) -> None:
    """Spark may broadcast the shard and stream the other table: its files are not the shard's."""
    dimension = source.other.select(F.col("user_id"), F.col("region").alias("home"))
    broadcast_shard = dimension.join(F.broadcast(source.rows), "user_id")
    broadcast_other = source.rows.join(F.broadcast(dimension), "user_id")

    assert not streams_rows(broadcast_shard, source.name)
    assert not streams_rows(broadcast_other, source.name)
    assert not streams_rows(source.rows.unionByName(source.other), source.name)
    assert streams_rows(source.rows.unionByName(source.rows.where("amount > 50")), source.name)


def test_rows_filtered_by_a_subquery_name_no_file(source: Source, spark: SparkSession) -> None:
    """Spark may plan a subquery in a filter as a join, and a join may shuffle the shard's rows."""
    source.other.createOrReplaceTempView("other_rows")
    try:
        big_spenders = source.rows.where("user_id IN (SELECT user_id FROM other_rows WHERE amount > 50)")
        above_average = source.rows.where("amount > (SELECT avg(amount) FROM other_rows)")

        assert not streams_rows(big_spenders, source.name)
        assert not streams_rows(above_average, source.name)
    finally:
        spark.catalog.dropTempView("other_rows")
    assert streams_rows(source.rows.where("user_id IN (1, 2, 3)"), source.name), "a list of values is no subquery"


def test_sql_over_a_view_of_the_shard_and_a_hint_keep_the_reference(source: Source, spark: SparkSession) -> None:
    """A transform in SQL reads the shard through a temporary view; a hint alone changes no operator."""
    source.rows.createOrReplaceTempView("shard_rows")
    try:
        in_sql = spark.sql("SELECT event_id, amount * 100 AS cents FROM shard_rows WHERE amount > 10")

        assert streams_rows(in_sql, source.name)
    finally:
        spark.catalog.dropTempView("shard_rows")
    assert streams_rows(source.rows.hint("broadcast"), source.name)


def test_cached_rows_name_no_file(source: Source) -> None:
    """A cached partition is read whole before its rows come out: the file then open is the task's last."""
    cached = source.rows.select("event_id", "amount").cache()
    try:
        assert not streams_rows(cached, source.name)
        assert not streams_rows(enrich_events(source.rows.persist()), source.name)
    finally:
        cached.unpersist()
        source.rows.unpersist()


def test_a_row_wise_transforms_rows_carry_the_reference_of_the_file_that_held_them(source: Source) -> None:
    truth = {row["event_id"]: file_ref(row["_file"]) for row in source.rows.select("event_id", "_file").collect()}
    out = enrich_events(source.rows)

    ref = file_ref_column(out, source.name).alias("ref")
    refs = {row["event_id"]: row["ref"] for row in out.select("event_id", ref).collect()}

    assert refs == truth
    assert len(set(truth.values())) > 3, "several files, so a wrong file would show"


def test_the_reference_hashed_once_per_file_is_sparks_own_hash_of_each_rows_file(source: Source) -> None:
    """``icegroup_file_ref()`` against ``xxhash64(input_file_name())`` row by row, in one task reading every file."""
    one_task = source.rows.coalesce(1).select(
        "event_id",
        F.expr(FILE_REF_SQL).alias("ref"),
        F.expr("xxhash64(input_file_name())").alias("spark"),
        F.col("_file"),
    )

    rows = one_task.collect()

    assert rows
    assert all(row["ref"] == row["spark"] == file_ref(row["_file"]) for row in rows)
    assert len({row["ref"] for row in rows}) > 3, "one task switched files several times"


def test_rows_of_no_file_have_no_reference(spark: SparkSession) -> None:
    assert {row["ref"] for row in spark.range(5).select(F.expr(FILE_REF_SQL).alias("ref")).collect()} == {None}


def test_a_sorted_outputs_rows_carry_no_reference_rather_than_a_wrong_one(source: Source) -> None:
    out = load_transform("tests.integration.transforms:sorted_by_amount")(source.rows)

    refs = out.select(file_ref_column(out, source.name).alias("ref")).collect()

    assert refs
    assert all(row["ref"] is None for row in refs)


@pytest.mark.parametrize("value", ["s3://b/it's.parquet", r"C:\\data\\x", "${env:HOME}/p", "é"])
def test_a_location_as_a_sql_literal_reads_back_as_itself_in_spark(spark: SparkSession, value: str) -> None:
    assert spark.range(1).select(F.expr(sql_string(value)).alias("v")).first()["v"] == value  # type: ignore[index]


@pytest.mark.parametrize("in_java", [False, True], ids=["by_file", "by_file_number"])
def test_by_file_gives_each_row_its_files_value_and_fails_a_row_of_another_file(
    spark: SparkSession, source: Source, in_java: bool
) -> None:
    files = [row["file"] for row in source.rows.select(F.input_file_name().alias("file")).distinct().collect()]
    values = {path: 7 * index - 3 for index, path in enumerate(sorted(files))}

    def chosen(values: dict[str, int]) -> Column:
        return by_file_number(spark, values) if in_java else by_file(values)

    rows = source.rows.select(F.input_file_name().alias("file"), chosen(values).alias("value")).collect()

    assert len(files) > 1
    assert {(row["file"], row["value"]) for row in rows} == set(values.items())
    missing = {path: index for path, index in values.items() if path != sorted(files)[0]}
    with pytest.raises(Exception, match="a row of a source file the batch does not hold"):
        source.rows.select(chosen(missing)).collect()


def test_by_file_number_names_each_row_of_a_union_by_its_own_files(spark: SparkSession, source: Source) -> None:
    files = sorted(row["file"] for row in source.rows.select(F.input_file_name().alias("file")).distinct().collect())
    first, rest = {files[0]: -1}, {path: 10**15 + index for index, path in enumerate(files[1:])}
    ours = source.rows.where(F.input_file_name() == files[0]).select(by_file_number(spark, first).alias("value"))
    theirs = source.rows.where(F.input_file_name() != files[0]).select(by_file_number(spark, rest).alias("value"))

    values = {row["value"] for row in ours.unionByName(theirs).collect()}

    assert values == {-1, *rest.values()}
