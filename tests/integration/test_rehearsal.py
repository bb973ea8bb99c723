"""A warm Borrower's rehearsal runs the lease path on synthetic rows in a scratch catalog and leaves the lake alone."""

from __future__ import annotations

import contextlib
import os
import tempfile
import threading
import time
from pathlib import Path

import pytest
from pyiceberg.catalog import Catalog
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from icegroup.iceberg.config.lakehouse import LakehouseConfig
from icegroup.iceberg.errors import RehearsalCut
from icegroup.iceberg.leader import tick
from icegroup.iceberg.protocol.borrower import ungranted
from icegroup.iceberg.protocol.state import Lease
from icegroup.iceberg.verify import verify_group
from icegroup.spark_jobs.borrower.attempt import LeaseReport
from icegroup.spark_jobs.borrower.rehearsal import (
    FOLDER_PREFIX,
    IDENTITY_VALUES,
    JOB_GROUP,
    VALUES,
    Rehearsal,
    rehearse,
    sweep,
    synthetic_rows,
)
from icegroup.spark_jobs.borrower.warm import borrow
from tests.chaos.worker import looks_running
from tests.factories import MakeGroup, append_batches, create_source
from tests.integration.helpers import wait_for

pytestmark = pytest.mark.spark

ENRICH = "icegroup.spark_jobs.transforms:enrich_events"


@pytest.fixture(autouse=True)
def own_tempdir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Give each test a temporary folder of its own, where no other process's rehearsal makes a folder.

    The e2e and Dagster tiers deploy warm Borrowers, which rehearse in the shared temporary folder while this file
    runs on another xdist worker, so a count of that folder's rehearsal folders is not this test's alone.
    """
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path_factory.mktemp("tempdir")))


def scratch_folders() -> set[Path]:
    """The rehearsals' temporary folders now on this machine."""
    return set(Path(tempfile.gettempdir()).glob("icegroup-rehearsal-*"))


def lake_tables(catalog: Catalog) -> set[tuple[str, ...]]:
    """Every table of the lake's catalog."""
    return {table for namespace in catalog.list_namespaces() for table in catalog.list_tables(namespace)}


def rehearsal_catalogs(spark: SparkSession) -> list[str]:
    """Spark settings a rehearsal's scratch catalog left behind."""
    return [row.key for row in spark.sql("SET").collect() if "icegroup_rehearsal" in row.key]


def test_a_rehearsal_runs_the_lease_path_on_synthetic_rows_and_writes_nothing_of_the_lake(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group(transform=ENRICH)
    append_batches(create_source(catalog, group.source), 2, 10)
    head = catalog.load_table(group.source).current_snapshot()
    tables, folders = lake_tables(catalog), scratch_folders()

    done = rehearse(spark, group, f"{lakehouse.catalog_name}.{group.source}", 20_000, threading.Event())

    assert done.rows == 20_000
    assert done.shards == IDENTITY_VALUES, "the source's identity partition (region) took four values: four streams"
    assert done.staged_rows == 20_000, "the transform keeps every row, and every row was staged"
    assert catalog.load_table(group.source).current_snapshot() == head
    assert lake_tables(catalog) == tables, "no table of the lake was made: the sink does not exist yet"
    assert scratch_folders() == folders, "the scratch folder was deleted"
    assert not rehearsal_catalogs(spark), "the scratch catalog's settings were removed"


def test_a_rehearsal_whose_transform_rejects_synthetic_rows_says_so_and_leaves_nothing(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group(transform="tests.integration.transforms:reject_large_amounts", borrower_rehearsal_rows=10_000)
    append_batches(create_source(catalog, group.source), 1, 10)
    folders, lines = scratch_folders(), []

    with Rehearsal(lambda: spark, group, f"{lakehouse.catalog_name}.{group.source}", lines.append) as rehearsal:
        rehearsal.start()
        wait_for(lambda: lines, 120, "the rehearsal's line")

    assert len(lines) == 1
    assert "rehearsal skipped (" in lines[0]
    assert "is over the limit" in lines[0], "the line names the transform's own error"
    assert "leases run as before" in lines[0]
    assert scratch_folders() == folders


def test_a_lease_cuts_a_rehearsal_short_and_its_jobs_are_cancelled(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group(transform="tests.integration.transforms:one_second_a_row", borrower_rehearsal_rows=1_000)
    append_batches(create_source(catalog, group.source), 1, 10)
    folders, lines = scratch_folders(), []
    tracker = spark.sparkContext.statusTracker()

    before = set(tracker.getJobIdsForGroup(JOB_GROUP))  # jobs of rehearsals that ran before this test

    def jobs() -> set[int]:
        return set(tracker.getJobIdsForGroup(JOB_GROUP)) - before

    with Rehearsal(lambda: spark, group, f"{lakehouse.catalog_name}.{group.source}", lines.append) as rehearsal:
        rehearsal.start()
        wait_for(lambda: len(jobs()) > 1, 120, "the rehearsal's synthetic write, then its slow job")
        cut_at = time.monotonic()
        rehearsal.cancel()
        assert rehearsal.thread is not None
        rehearsal.thread.join(60)
        took = time.monotonic() - cut_at

    assert not rehearsal.thread.is_alive()
    assert took < 30, f"the rehearsal took {took:.0f}s to stop; its 1,000 one-second rows would take minutes"
    assert lines == [f"{group.name}: rehearsal cut short: a lease was taken"]
    assert scratch_folders() == folders
    # Spark's status tracker learns of the cancelled job through its listener bus, a moment after the
    # cancel returned: once seen RUNNING here after the rehearsal had stopped (CI on e2b7199).
    wait_for(
        lambda: "FAILED" in {tracker.getJobInfo(job).status for job in jobs()} and not tracker.getActiveJobsIds(),
        30,
        "its slow job cancelled, as Spark's status tracker reports it",
    )


def test_a_rehearsal_cut_before_it_starts_raises_and_cleans_up(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group(transform=ENRICH)
    append_batches(create_source(catalog, group.source), 1, 10)
    cut, folders = threading.Event(), scratch_folders()
    cut.set()

    with pytest.raises(RehearsalCut):
        rehearse(spark, group, f"{lakehouse.catalog_name}.{group.source}", 1_000, cut)

    assert scratch_folders() == folders
    assert not rehearsal_catalogs(spark)


def test_synthetic_rows_fill_every_flat_type_and_keep_identity_columns_to_a_few_values(spark: SparkSession) -> None:
    schema = T.StructType(
        [
            T.StructField(name, data_type)
            for name, data_type in [
                ("s", T.StringType()),
                ("b", T.BooleanType()),
                ("i8", T.ByteType()),
                ("i16", T.ShortType()),
                ("i32", T.IntegerType()),
                ("i64", T.LongType()),
                ("f", T.FloatType()),
                ("d", T.DoubleType()),
                ("dec", T.DecimalType(10, 2)),
                ("day", T.DateType()),
                ("ts", T.TimestampType()),
                ("ntz", T.TimestampNTZType()),
                ("bin", T.BinaryType()),
                ("region", T.StringType()),
                ("tags", T.ArrayType(T.StringType())),
            ]
        ]
    )

    ansi = spark.conf.get("spark.sql.ansi.enabled")
    spark.conf.set("spark.sql.ansi.enabled", "true")  # Spark 4's default: a value that overflows its type fails
    try:
        rows = synthetic_rows(spark, schema, 2 * VALUES, frozenset({"region"}))
        flat = [f.name for f in schema if f.name != "tags"]
        [found] = rows.select(
            F.count("*").alias("rows"),
            *[F.count(name).alias(name) for name in [*flat, "tags"]],
            F.count_distinct("region").alias("regions"),
            F.count_distinct("s").alias("strings"),
        ).collect()
    finally:
        spark.conf.set("spark.sql.ansi.enabled", ansi)

    assert rows.schema == T.StructType([T.StructField(f.name, f.dataType, nullable=True) for f in schema])
    assert found["rows"] == 2 * VALUES
    assert {name: found[name] for name in flat} == dict.fromkeys(flat, 2 * VALUES), "no value is null or overflows"
    assert found["tags"] == 0, "a type without a synthetic value is null"
    assert found["regions"] == IDENTITY_VALUES
    assert found["strings"] == VALUES


def test_a_sweep_deletes_only_rehearsal_folders_older_than_its_bound(tmp_path: Path) -> None:
    old, new, other = tmp_path / f"{FOLDER_PREFIX}old", tmp_path / f"{FOLDER_PREFIX}new", tmp_path / "other-old"
    for folder in (old, new, other):
        (folder / "rehearsal" / "source").mkdir(parents=True)
    hour_ago = time.time() - 3600
    for folder in (old, other):
        os.utime(folder, (hour_ago, hour_ago))

    sweep(tmp_path, time.time() - 60)

    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([new.name, other.name])


class Stop(Exception):
    """Ends the warm Borrower of a test, which never ends when idle."""


def test_a_warm_borrower_rehearses_once_idle_after_a_small_lease_then_takes_the_next(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group(transform=ENRICH, borrower_rehearsal_rows=2_000)
    append_batches(create_source(catalog, group.source), 1, 30)
    tick(catalog, group, looks_running)  # the Leader grants the first commit's lease, which waits for a Borrower
    lines: list[str] = []
    leases: list[int] = []

    def ended(_lease: Lease, report: LeaseReport) -> None:
        leases.append(report.rows_in)
        if len(leases) == 2:
            raise Stop

    def lead(_why: str) -> bool:
        return ungranted(tick(catalog, group, looks_running, pin_config=False).state)

    def run() -> None:
        with contextlib.suppress(Stop):
            borrow(lambda: spark, lakehouse, group, "warm-1", ended, lines.append, None, 0.2, lead)

    borrower = threading.Thread(target=run)
    borrower.start()
    wait_for(lambda: any("rehearsed the lease path" in line for line in lines), 120, "the idle Borrower's rehearsal")
    append_batches(catalog.load_table(group.source), 1, 30)
    borrower.join(120)

    assert not borrower.is_alive()
    assert leases == [30, 30]
    said = "rehearsed the lease path on 2,000 synthetic rows (4 shards, 2,000 rows staged)"
    rehearsed = [i for i, line in enumerate(lines) if said in line]
    taken = [i for i, line in enumerate(lines) if "taken by warm-1" in line]
    assert len(rehearsed) == 1, lines
    assert len(taken) == 2
    assert taken[0] < rehearsed[0] < taken[1], "after the small first lease, before the next: once"
    assert verify_group(catalog, group, key="event_id").ok


def test_a_rehearsal_whose_filter_prunes_every_synthetic_partition_says_it_ran_no_lease(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group(transform=ENRICH, filter="region = 'eu'", borrower_rehearsal_rows=1_000)
    append_batches(create_source(catalog, group.source), 1, 10)
    lines: list[str] = []

    with Rehearsal(lambda: spark, group, f"{lakehouse.catalog_name}.{group.source}", lines.append) as rehearsal:
        rehearsal.start()
        wait_for(lambda: lines, 120, "the rehearsal's line")

    assert lines == [
        f"{group.name}: rehearsal ran no lease: the group's filter matches none of its 1,000 synthetic rows' "
        "partitions; leases run as before"
    ]
