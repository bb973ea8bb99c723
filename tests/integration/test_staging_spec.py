"""One window's output is staged without partition routing, and the fenced commit places its files in the window."""

from __future__ import annotations

import re
import time
from datetime import date
from typing import Any

import pytest
from pyiceberg.catalog import Catalog
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from icegroup.iceberg.config.lakehouse import LakehouseConfig
from icegroup.iceberg.errors import SinkError
from icegroup.iceberg.protocol.sink_commit import COL_WINDOW, KEY_STAGE
from icegroup.iceberg.verify import verify_group
from icegroup.spark_jobs.sink.fenced_commit import Published, PublishRequest, publish_all, stage_aligned, stage_shard
from icegroup.spark_jobs.sink.shape import ensure_sink, staging_spec, with_lineage
from tests.factories import MakeGroup
from tests.integration.test_group_commit import carriers, group_sink, metadata_versions, staged_leases

pytestmark = pytest.mark.spark

DAY = date(2026, 1, 1)


def test_a_one_window_output_staged_unpartitioned_is_published_in_its_window_partition(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group(max_borrowers=3, leases_per_borrower=1)
    leases = staged_leases(spark, lakehouse, catalog, group)  # the sink exists now, as a Borrower makes it
    sink = catalog.load_table(group.sink)
    window_spec = sink.spec().spec_id
    spec = staging_spec(spark, group_sink(lakehouse, group))
    assert spec is not None
    assert spec != window_spec
    assert not catalog.load_table(group.sink).specs()[spec].fields, "the staging spec is unpartitioned"
    before = metadata_versions(catalog, group)
    assert staging_spec(spark, group_sink(lakehouse, group)) == spec
    assert metadata_versions(catalog, group) == before, "a sink that has the spec is left as it is"

    first = leases[0]
    token = stage_shard(first.output, group_sink(lakehouse, group), spec_id=spec)
    sink = catalog.load_table(group.sink)
    assert sink.spec().spec_id == window_spec, "the default spec stays the window's"
    staged = next(s for s in sink.snapshots() if (s.summary or {}).get(KEY_STAGE) == token)
    assert {m.partition_spec_id for m in staged.manifests(sink.io) if m.added_files_count} == {spec}

    request = PublishRequest(token, first.request.lease, first.request.shard_ids, first.request.properties)
    [outcome] = publish_all(spark, group_sink(lakehouse, group), group.name, [request])

    assert isinstance(outcome, Published)
    assert outcome.added_records == first.rows
    files = catalog.load_table(group.sink).inspect.files().to_pylist()
    assert files
    assert {(f["spec_id"], f["partition"][COL_WINDOW]) for f in files} == {(window_spec, DAY)}
    pruned = spark.table(group_sink(lakehouse, group)).where(F.col(COL_WINDOW) == F.lit(DAY))
    assert pruned.count() == first.rows
    assert spark.table(group_sink(lakehouse, group)).where(F.col(COL_WINDOW) != F.lit(DAY)).count() == 0
    check = verify_group(catalog, group, key="event_id")
    assert (check.found, check.duplicates, check.unexpected) == (first.rows, 0, 0), check.line()


def test_a_file_staged_unpartitioned_with_two_windows_is_refused_and_the_other_leases_commit(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group(max_borrowers=3, leases_per_borrower=1)
    first, second, _ = staged_leases(spark, lakehouse, catalog, group)
    spec = staging_spec(spark, group_sink(lakehouse, group))
    two_days = F.when(F.col("event_id") % 2 == 0, F.lit(DAY)).otherwise(F.lit(date(2026, 1, 2)))
    out = with_lineage(first.output.drop(*[c for c in first.output.columns if c.startswith("_ig_")]),
                       first.request.shard_ids[0], two_days)  # fmt: skip
    token = stage_shard(out.coalesce(1), group_sink(lakehouse, group), spec_id=spec)
    request = PublishRequest(token, first.request.lease, first.request.shard_ids, first.request.properties)

    refused, published = publish_all(spark, group_sink(lakehouse, group), group.name, [request, second.request])

    assert isinstance(refused, SinkError)
    assert re.search(r"cannot be placed in partition field _ig_window .* 2026-01-01 to 2026-01-02", str(refused))
    assert isinstance(published, Published), "one lease's unplaceable file does not fail another's commit"
    assert carriers(catalog, group) == {second.request.shard_ids[0]: second.request.lease.lease_id}


def test_a_staging_spec_an_expiry_removed_is_added_again_when_a_borrower_next_stages(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group(max_borrowers=3, leases_per_borrower=1)
    first = staged_leases(spark, lakehouse, catalog, group)[0]
    spec = staging_spec(spark, group_sink(lakehouse, group))
    jvm: Any = spark._jvm
    java = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, group_sink(lakehouse, group))
    java.expireSnapshots().expireOlderThan(int(time.time() * 1000) + 1).cleanExpiredMetadata(True).commit()
    assert spec not in catalog.load_table(group.sink).specs(), "only the expired staged snapshots used it"

    token = stage_aligned(spark, group_sink(lakehouse, group), first.output, one_window=True)  # as ``deliver`` stages

    sink = catalog.load_table(group.sink)
    staged = next(s for s in sink.snapshots() if (s.summary or {}).get(KEY_STAGE) == token)
    [again] = {m.partition_spec_id for m in staged.manifests(sink.io) if m.added_files_count}
    assert not sink.specs()[again].fields, "staged through an unpartitioned spec, added again"
    assert again != sink.spec().spec_id
    request = PublishRequest(token, first.request.lease, first.request.shard_ids, first.request.properties)
    [outcome] = publish_all(spark, group_sink(lakehouse, group), group.name, [request])
    assert isinstance(outcome, Published)
    assert outcome.added_records == first.rows
    files = catalog.load_table(group.sink).inspect.files().to_pylist()
    assert {(f["spec_id"], f["partition"][COL_WINDOW]) for f in files} == {(sink.spec().spec_id, DAY)}


@pytest.mark.parametrize(
    ("partitioning", "fields"),
    [
        ("PARTITIONED BY (region)", ["region", COL_WINDOW]),  # the window is added beside the user's own field
        (f"PARTITIONED BY ({COL_WINDOW}) TBLPROPERTIES ('format-version'='1')", [COL_WINDOW]),
        (f"PARTITIONED BY ({COL_WINDOW}) TBLPROPERTIES ('write.format.default'='avro')", [COL_WINDOW]),
    ],
    ids=["partitioned-by-more", "format-v1", "avro"],
)
def test_a_sink_partitioned_by_more_than_the_window_or_of_format_v1_has_no_staging_spec(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, ns: str, partitioning: str, fields: list[str]
) -> None:
    """None where a file's bounds could not place it: a region's, an Avro file's (it has none), or in format v1.

    Format v1 keeps a removed partition field as a void transform, so there is no spec without fields to add.
    """
    name = lakehouse.catalog_name
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {name}.{ns}")
    spark.sql(
        f"CREATE TABLE {name}.{ns}.sink (event_id bigint, region string, _ig_shard bigint, {COL_WINDOW} date, "
        f"_ig_file bigint) USING iceberg {partitioning}"
    )
    rows = spark.createDataFrame([(1, "a"), (2, "b")], "event_id bigint, region string")
    specs = len(catalog.load_table(f"{ns}.sink").specs())

    ensure_sink(spark, name, f"{ns}.sink", with_lineage(rows, "00000000000000ab", DAY))

    assert staging_spec(spark, f"{name}.{ns}.sink") is None

    table = catalog.load_table(f"{ns}.sink")
    assert [f.name for f in table.spec().fields] == fields
    assert len(table.specs()) == specs + (fields != [COL_WINDOW]), "no staging spec was added"
