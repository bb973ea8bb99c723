"""The sink's checks before a lease's first write: one load of the table, and a change only where one is needed."""

from __future__ import annotations

from collections.abc import Callable
from datetime import date
from typing import Any

import pytest
from py4j.protocol import Py4JJavaError
from pyiceberg.catalog import Catalog
from pyspark.errors import ParseException
from pyspark.errors.exceptions.captured import CapturedException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from icegroup.iceberg.config.lakehouse import LakehouseConfig
from icegroup.iceberg.errors import SinkError
from icegroup.iceberg.protocol.sink_commit import COL_WINDOW
from icegroup.spark_jobs.sink import shape
from icegroup.spark_jobs.sink.shape import SINK_PROPERTIES, ensure_sink, load_sink, with_lineage

pytestmark = pytest.mark.spark


def output(spark: SparkSession) -> DataFrame:
    """A shard's output as a Borrower stages it: two rows and the lineage columns."""
    rows = spark.createDataFrame([(1, "a"), (2, "b")], "event_id bigint, region string")
    return with_lineage(rows, "00000000000000ab", date(2026, 1, 1), F.lit(7).cast("long"))


@pytest.mark.usefixtures("catalog")  # it creates the catalog's database
def test_a_missing_sink_or_namespace_loads_as_none_and_any_other_error_is_raised(
    spark: SparkSession, lakehouse: LakehouseConfig, ns: str
) -> None:
    name = lakehouse.catalog_name
    assert load_sink(spark, f"{name}.{ns}_absent.sink") is None
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {name}.{ns}")
    assert load_sink(spark, f"{name}.{ns}.absent") is None
    with pytest.raises(ParseException):
        load_sink(spark, f"{name}.{ns}.`unclosed")  # a name Spark cannot parse


def test_iceberg_s_missing_namespace_error_loads_as_none(spark: SparkSession, monkeypatch: pytest.MonkeyPatch) -> None:
    """A REST server may answer a load in a missing namespace so; no catalog here does, so the load raises it."""
    jvm: Any = spark._jvm
    no_args = spark.sparkContext._gateway.new_array(jvm.java.lang.Object, 0)  # type: ignore[union-attr]

    def raising(error: Any) -> Callable[[SparkSession, str], Any]:
        def load(_spark: SparkSession, _table: str) -> Any:
            raise Py4JJavaError("loadIcebergTable", error)

        return load

    missing = jvm.org.apache.iceberg.exceptions.NoSuchNamespaceException("Namespace does not exist: absent", no_args)
    monkeypatch.setattr(shape, "iceberg_table", raising(missing))
    assert load_sink(spark, "lake.absent.sink") is None

    other = jvm.org.apache.iceberg.exceptions.RESTException("a server error", no_args)
    monkeypatch.setattr(shape, "iceberg_table", raising(other))
    with pytest.raises(Py4JJavaError):
        load_sink(spark, "lake.absent.sink")


def test_a_new_sink_is_created_staged_and_window_partitioned(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, ns: str
) -> None:
    ensure_sink(spark, lakehouse.catalog_name, f"{ns}.sink", output(spark))

    table = catalog.load_table(f"{ns}.sink")
    assert {k: table.properties.get(k) for k in SINK_PROPERTIES if k != "format-version"} == {
        k: v for k, v in SINK_PROPERTIES.items() if k != "format-version"
    }
    assert [f.name for f in table.spec().fields] == [COL_WINDOW]


def test_an_existing_sink_in_shape_is_checked_by_one_load_and_left_as_it_is(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, ns: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = output(spark)
    ensure_sink(spark, lakehouse.catalog_name, f"{ns}.sink", out)
    before = catalog.load_table(f"{ns}.sink").metadata_location
    loads: list[str] = []
    statements: list[str] = []
    load = shape.iceberg_table
    monkeypatch.setattr(shape, "iceberg_table", lambda s, table: loads.append(table) or load(s, table))
    monkeypatch.setattr(spark, "sql", lambda query, *args, **kwargs: statements.append(query))

    ensure_sink(spark, lakehouse.catalog_name, f"{ns}.sink", out)

    assert loads == [f"{lakehouse.catalog_name}.{ns}.sink"]
    assert statements == []
    assert catalog.load_table(f"{ns}.sink").metadata_location == before


def test_an_existing_sink_without_staged_writes_or_the_window_partition_gains_both(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, ns: str
) -> None:
    name = lakehouse.catalog_name
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {name}.{ns}")
    spark.sql(f"CREATE TABLE {name}.{ns}.sink (event_id bigint, region string) USING iceberg PARTITIONED BY (region)")

    ensure_sink(spark, name, f"{ns}.sink", output(spark))

    table = catalog.load_table(f"{ns}.sink")
    assert table.properties.get("write.wap.enabled") == "true"
    assert table.properties.get("write.spark.accept-any-schema") == "true"
    assert [f.name for f in table.spec().fields] == ["region", COL_WINDOW]
    assert dict((f.name, str(f.field_type)) for f in table.schema().fields)[COL_WINDOW] == "date"


def test_a_new_sink_takes_every_column_nullable_whatever_the_first_output_held(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, ns: str
) -> None:
    """A later output may hold nulls where the first had none, so the sink's columns are all optional."""
    first = spark.range(2).select(
        F.col("id").alias("event_id"),
        F.struct(F.lit("x").alias("code")).alias("detail"),
        F.array(F.lit(1)).alias("tags"),
        F.create_map(F.lit("k"), F.lit(1.0)).alias("scores"),
    )
    assert not first.schema["event_id"].nullable
    out = with_lineage(first, "00000000000000ab", date(2026, 1, 1))
    ensure_sink(spark, lakehouse.catalog_name, f"{ns}_nested.sink", out)

    schema = catalog.load_table(f"{ns}_nested.sink").schema()
    assert [f.name for f in schema.fields if f.required] == []
    detail, tags, scores = (schema.find_field(name).field_type for name in ("detail", "tags", "scores"))
    assert not detail.fields[0].required  # type: ignore[attr-defined]
    assert not tags.element_required  # type: ignore[attr-defined]
    assert not scores.value_required  # type: ignore[attr-defined]


def test_a_new_sink_takes_struct_fields_whose_names_hold_hyphens_dots_spaces_and_backticks(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, ns: str
) -> None:
    """JSON keys such as ``user-agent`` become struct field names; the sink's creation quotes them (it failed)."""
    first = spark.range(2).selectExpr(
        "id AS event_id",
        "named_struct('user-agent', 'ua', 'x.y', 1, 'a b', array(named_struct('k`1', 'v'))) AS headers",
    )
    out = with_lineage(first, "00000000000000ab", date(2026, 1, 1))
    ensure_sink(spark, lakehouse.catalog_name, f"{ns}_json.sink", out)

    headers = catalog.load_table(f"{ns}_json.sink").schema().find_field("headers").field_type
    assert [f.name for f in headers.fields] == ["user-agent", "x.y", "a b"]  # type: ignore[attr-defined]
    element = headers.fields[2].field_type.element_type  # type: ignore[attr-defined]
    assert [f.name for f in element.fields] == ["k`1"]


def test_a_sink_another_borrower_created_first_is_no_error_and_any_other_failure_is_raised(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, ns: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two Borrowers racing to create a group's sink both see none, and the loser's insert fails: the sink is there."""
    name = lakehouse.catalog_name
    run = spark.sql

    def losing(query: str, *args: Any, **kwargs: Any) -> DataFrame:
        result = run(query, *args, **kwargs)
        if query.startswith("CREATE TABLE"):  # the other Borrower's insert landed first
            raise RuntimeError("Unknown failure: duplicate key")
        return result

    monkeypatch.setattr(spark, "sql", losing)
    shape.create_sink(spark, name, f"{ns}.sink", output(spark))
    assert catalog.table_exists(f"{ns}.sink")

    monkeypatch.setattr(spark, "sql", run)
    with pytest.raises(CapturedException, match="_ig_window"):  # no window column to partition by, and no sink
        shape.create_sink(spark, name, f"{ns}.other", output(spark).drop(COL_WINDOW))
    assert not catalog.table_exists(f"{ns}.other")


def test_a_sink_widens_a_column_its_source_widened_casts_narrower_output_up_and_refuses_any_other_change(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, ns: str
) -> None:
    """Iceberg's promotions (int to long, float to double, a decimal's digits) widen the sink; nothing else does."""
    sink = f"{lakehouse.catalog_name}.{ns}.sink"
    n, short = "n`1 x.y", "odd name.with `tick`"  # names a bare backtick or a dot would break

    def typed(n_type: str, score: str, price: str) -> DataFrame:
        rows = spark.range(1, 3).selectExpr(
            "id AS event_id",
            f"CAST(id AS {n_type}) AS `n``1 x.y`",
            f"CAST(id AS {score}) AS score",
            f"CAST(id AS {price}) AS price",
            "CAST(id AS smallint) AS `odd name.with ``tick```",  # Iceberg keeps a short as an int
        )
        return with_lineage(rows, "00000000000000ab", date(2026, 1, 1), F.lit(7).cast("long"))

    def types() -> dict[str, str]:
        return {f.name: str(f.field_type) for f in catalog.load_table(f"{ns}.sink").schema().fields}

    ensure_sink(spark, lakehouse.catalog_name, f"{ns}.sink", typed("int", "float", "decimal(9,2)"))
    first = catalog.load_table(f"{ns}.sink").schema().schema_id
    with pytest.raises(SinkError, match=r"price \(decimal\(12,3\)\): sink has decimal\(9,2\)"):
        shape.align_to_sink(spark, sink, typed("bigint", "double", "decimal(12,3)"))
    assert catalog.load_table(f"{ns}.sink").schema().schema_id == first, "a refused output widens nothing"
    assert types()[n] == "int"

    shape.align_to_sink(spark, sink, typed("bigint", "double", "decimal(12,2)"))
    widened = types()
    assert (widened[n], widened["score"], widened["price"]) == ("long", "double", "decimal(12, 2)")
    assert widened[short] == "int"

    narrower, evolve = shape.align_to_sink(spark, sink, typed("int", "float", "decimal(9,2)"))
    assert (dict(narrower.dtypes)[n], dict(narrower.dtypes)["score"], dict(narrower.dtypes)["price"]) == (
        "bigint",
        "double",
        "decimal(12,2)",
    ), "a narrower output is cast to the sink's types"
    assert dict(narrower.dtypes)[short] == "int"
    assert [(r[n], r[short]) for r in narrower.orderBy("event_id").collect()] == [(1, 1), (2, 2)]
    assert not evolve
    with pytest.raises(SinkError, match=r"n`1 x\.y \(string\): sink has bigint.*Change the transform"):
        shape.align_to_sink(spark, sink, typed("string", "double", "decimal(12,2)"))
