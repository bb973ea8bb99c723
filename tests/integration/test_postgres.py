"""The same group on a PostgreSQL catalog: both engines on one database, the registry CAS, exactly once."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import date
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.catalog import Catalog
from pyspark.sql import SparkSession

from icegroup.iceberg.config.lakehouse import LakehouseConfig
from icegroup.iceberg.errors import CatalogUnavailable, RegistryConflict
from icegroup.iceberg.leader import tick
from icegroup.iceberg.protocol.liveness import RunState
from icegroup.iceberg.store.dead_letters import open_letters
from icegroup.iceberg.store.registry import commit_state, load_state
from icegroup.iceberg.verify import verify_group
from icegroup.infra.postgres import LocalPostgres, server_bin_dir, start_local_postgres
from icegroup.spark_jobs.borrower.lease import run_lease
from icegroup.spark_jobs.consume import WAITS
from icegroup.spark_jobs.engines import DRIVERS
from icegroup.spark_jobs.session import activate, spark_conf
from icegroup.spark_jobs.sink import fenced_commit
from icegroup.spark_jobs.sink.shape import ensure_sink, with_lineage
from tests.consuming import consume
from tests.factories import MakeGroup, append_batches, create_source, no_spark
from tests.integration.helpers import drive

# Longer than every delivery the group allows (0.2 s, then 0.4 s): before, the shard was poison by then.
OUTAGE_S = 6.0

pytestmark = [
    pytest.mark.spark,
    pytest.mark.postgres,
    pytest.mark.skipif(server_bin_dir() is None, reason="no PostgreSQL server installed (make system installs it)"),
]


@pytest.fixture(scope="module")
def postgres() -> Iterator[LocalPostgres]:
    """A throw-away cluster with a ``lake`` database."""
    cluster = start_local_postgres()
    cluster.create_database("lake")
    yield cluster
    cluster.stop()


@pytest.fixture(scope="module")
def pg_lakehouse(postgres: LocalPostgres, tmp_path_factory: pytest.TempPathFactory) -> LakehouseConfig:
    """Catalog ``pglake`` in PostgreSQL, warehouse in a temporary folder."""
    warehouse = tmp_path_factory.mktemp("pgwarehouse")
    return LakehouseConfig(catalog_name="pglake", catalog_uri=postgres.url(), warehouse=str(warehouse))


@pytest.fixture(scope="module")
def pg_spark(spark: SparkSession, pg_lakehouse: LakehouseConfig) -> SparkSession:
    """The test session with the PostgreSQL catalog registered, exactly as spark_conf describes it."""
    assert DRIVERS["postgresql"].split(":")[1] in str(spark._jsc.sc().listJars())  # type: ignore[union-attr]
    for key, value in spark_conf(pg_lakehouse).items():
        if key.startswith("spark.sql.catalog.pglake"):
            spark.conf.set(key, value)
    return spark


def test_group_consumes_exactly_once_on_a_postgres_catalog(
    pg_spark: SparkSession, pg_lakehouse: LakehouseConfig, make_group: MakeGroup, tmp_path: Path
) -> None:
    catalog: Catalog = pg_lakehouse.catalog()
    group = make_group(max_borrowers=2, shard_caps={"max_files": 2})
    append_batches(create_source(catalog, group.source), 6, 30)

    drive(pg_spark, pg_lakehouse, group, borrowers=2)
    append_batches(catalog.load_table(group.source), 2, 30)
    drive(pg_spark, pg_lakehouse, group, borrowers=2)

    assert verify_group(catalog, group, key="event_id").ok
    assert pg_spark.table(f"pglake.{group.sink}").count() == 8 * 30


def test_registry_cas_holds_on_postgres(pg_lakehouse: LakehouseConfig, make_group: MakeGroup) -> None:
    catalog = pg_lakehouse.catalog()
    group = make_group()
    append_batches(create_source(catalog, group.source), 1, 6)
    tick(catalog, group, lambda lease: RunState.MISSING)
    first, second = load_state(catalog, group.name), load_state(catalog, group.name)
    assert first.state is not None
    assert second.state is not None

    commit_state(first, first.state.model_copy(update={"leases_done": 1}))
    with pytest.raises(RegistryConflict):
        commit_state(second, second.state.model_copy(update={"leases_done": 2}))


def test_borrowers_creating_the_sink_at_once_all_go_on(
    pg_spark: SparkSession, pg_lakehouse: LakehouseConfig, make_group: MakeGroup
) -> None:
    """The first Borrowers of a group race to create the sink; the losers must not fail."""
    group = make_group()
    events = pg_spark.range(3).withColumnRenamed("id", "event_id")
    frame = with_lineage(events, "0123456789abcdef", date(2026, 1, 1))
    barrier = threading.Barrier(6)

    def create() -> None:
        activate(pg_spark)
        barrier.wait()
        ensure_sink(pg_spark, pg_lakehouse.catalog_name, group.sink, frame)

    with ThreadPoolExecutor(max_workers=6) as pool:
        for future in [pool.submit(create) for _ in range(6)]:
            future.result()
    assert pg_lakehouse.catalog().load_table(group.sink).schema().find_field("event_id")


@pytest.mark.parametrize("when", ["before the lease", "while Spark stages a shard"])
def test_a_catalog_outage_longer_than_the_redelivery_backoff_poisons_nothing(
    pg_spark: SparkSession,
    pg_lakehouse: LakehouseConfig,
    postgres: LocalPostgres,
    make_group: MakeGroup,
    monkeypatch: pytest.MonkeyPatch,
    when: str,
) -> None:
    catalog = pg_lakehouse.catalog()
    group = make_group(max_deliver=2, deliver_backoff_s=0.2, shard_caps={"max_files": 2})
    append_batches(create_source(catalog, group.source), 2, 30)
    drive(pg_spark, pg_lakehouse, group)
    append_batches(catalog.load_table(group.source), 2, 30)
    lease = tick(catalog, group, lambda _: RunState.MISSING).launch[0]
    state = load_state(catalog, group.name).state
    assert state is not None
    shards = [state.shards[sid] for sid in lease.shard_ids]
    lines: list[str] = []
    back = threading.Timer(OUTAGE_S, postgres.restart)

    def outage() -> None:
        postgres.halt()
        back.start()

    if when == "before the lease":
        outage()
    else:
        real = fenced_commit.stage_shard
        calls: list[int] = []

        def stage_in_outage(*args: Any, **kwargs: Any) -> str:
            if not calls:
                outage()
            calls.append(1)
            return real(*args, **kwargs)

        monkeypatch.setattr(fenced_commit, "stage_shard", stage_in_outage)
    try:
        report = run_lease(pg_spark, pg_lakehouse, group, lease, shards, progress=lines.append)
    finally:
        back.join()

    assert report.committed == [s.shard_id for s in shards], "the lease went on once the catalog was back"
    assert not [line for line in lines if "delivery 1/" in line], "an outage is no delivery of the shard"
    assert any("the platform failed, not the shards" in line for line in lines), "each wait is shown"
    assert open_letters(catalog, group.name) == {}, "no shard became poison"
    drive(pg_spark, pg_lakehouse, group)
    assert verify_group(catalog, group, key="event_id").ok


def test_a_consume_waits_out_the_catalog_database_going_down_and_goes_on(
    pg_spark: SparkSession,
    pg_lakehouse: LakehouseConfig,
    postgres: LocalPostgres,
    make_group: MakeGroup,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """PostgreSQL shut down under a running consume is the platform failing: waited out, then caught up once."""
    caplog.set_level(logging.WARNING, logger=WAITS.name)
    catalog = pg_lakehouse.catalog()
    group = make_group(shard_caps={"max_files": 2})
    append_batches(create_source(catalog, group.source), 3, 30)
    lines: list[str] = []
    back = threading.Timer(OUTAGE_S, postgres.restart)
    postgres.halt()
    back.start()
    try:
        summary = consume(lambda: pg_spark, pg_lakehouse, group, "run-outage", lambda _: RunState.MISSING,
                          progress=lines.append, max_wait_s=120, poll_s=0.2)  # fmt: skip
    finally:
        back.join()

    assert summary.caught_up
    waits = [line for line in lines if "waiting for the catalog" in line]
    assert waits, "each wait is shown"
    assert "OperationalError" in waits[0], "naming the cause"
    assert "giving up after 120s without an answer (--max-wait)" in waits[0], "and how long at most"
    heard = [r.getMessage() for r in caplog.records if r.name == WAITS.name]
    assert heard == waits, "the console hears every wait, wherever the run's log goes"
    assert open_letters(catalog, group.name) == {}, "an outage makes no shard poison"
    assert verify_group(catalog, group, key="event_id").ok


def test_a_catalog_outage_longer_than_max_wait_stops_with_a_named_error(
    pg_lakehouse: LakehouseConfig, postgres: LocalPostgres, make_group: MakeGroup
) -> None:
    catalog = pg_lakehouse.catalog()
    group = make_group()
    append_batches(create_source(catalog, group.source), 1, 10)
    back = threading.Timer(OUTAGE_S, postgres.restart)
    postgres.halt()
    back.start()
    try:
        with pytest.raises(CatalogUnavailable, match=r"the catalog has not answered for \d+s \(.*OperationalError"):
            consume(no_spark, pg_lakehouse, group, "run-outage", lambda _: RunState.MISSING,
                    progress=lambda _: None, max_wait_s=2, poll_s=0.2)  # fmt: skip
    finally:
        back.join()
    assert load_state(catalog, group.name).state is None, "nothing was committed"
