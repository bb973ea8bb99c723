"""What only a distributed deployment has: code on other executors, a lost Spark worker, a restarted PostgreSQL.

Each test checks exactly once row by row with pyiceberg (``verify_group``), as every other tier does.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import urllib.request
from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from iceberg.errors import CatalogUnavailable
from iceberg.groups import GroupConfig
from iceberg.lakehouse import LakehouseConfig
from iceberg.leader import tick
from iceberg.protocol.liveness import RunState
from iceberg.registry import load_state
from iceberg.verify import verify_group
from infra.stack import Stack, alive, alive_workers, up
from spark_jobs.borrower import LeaseReport, run_lease
from tests.factories import append_batches, create_source
from tests.integration.helpers import drive, quiet
from tests.stack_env import stack_layout, stack_postgres


@pytest.fixture
def all_workers() -> Iterator[None]:
    """After the test, the stack is whole again: a killed worker is started anew (``up`` is idempotent)."""
    yield
    layout = stack_layout()
    up(layout)
    assert alive_workers(layout) == len(layout.worker_ui_ports)


def test_a_udf_calling_the_users_own_module_runs_on_the_executors(
    spark: SparkSession, spark_lakehouse: LakehouseConfig, make_group: type[GroupConfig]
) -> None:
    catalog = spark_lakehouse.catalog()
    group = make_group(transform="tests.stack.transforms:amount_in_cents")
    append_batches(create_source(catalog, group.source), 3, 20)

    drive(spark, spark_lakehouse, group)

    assert spark.sparkContext.master == stack_layout().master_url
    assert verify_group(catalog, group, key="event_id").ok
    sink = catalog.load_table(group.sink).scan(selected_fields=("amount", "amount_cents")).to_arrow().to_pylist()
    assert len(sink) == 60
    assert all(row["amount_cents"] == round(row["amount"] * 100) for row in sink)


def worker_running(spark: SparkSession) -> tuple[str, int]:
    """The stack worker that hosts this application's executor: its name and pid."""
    layout = stack_layout()
    stack = Stack.load(layout.folder)
    assert stack is not None
    app = spark.sparkContext.applicationId
    for number, ui_port in enumerate(layout.worker_ui_ports, start=1):
        with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=5) as response:
            executors = json.load(response).get("executors", [])
        if any(executor.get("appid") == app for executor in executors):
            part = next(p for p in stack.parts if p.name == f"spark-worker-{number}")
            assert part.pid is not None
            return part.name, part.pid
    raise AssertionError(f"no stack worker runs an executor of {app}")


def test_killing_the_spark_worker_under_a_running_lease_keeps_exactly_once(
    spark: SparkSession, spark_lakehouse: LakehouseConfig, make_group: type[GroupConfig], all_workers: None
) -> None:
    catalog = spark_lakehouse.catalog()
    group = make_group(transform="tests.stack.transforms:amount_in_cents_slowly")
    append_batches(create_source(catalog, group.source), 2, 100)
    lease = tick(catalog, group, lambda _: RunState.MISSING).launch[0]
    state = load_state(catalog, group.name).state
    assert state is not None
    shards = [state.shards[sid] for sid in lease.shard_ids]
    name, pid = worker_running(spark)
    reports: list[LeaseReport] = []
    runner = threading.Thread(
        target=lambda: reports.append(run_lease(spark, spark_lakehouse, group, lease, shards, progress=quiet))
    )

    runner.start()
    deadline = time.monotonic() + 120
    while not spark.sparkContext.statusTracker().getActiveStageIds():
        assert time.monotonic() < deadline, "the lease never started a Spark stage"
        time.sleep(0.2)
    time.sleep(2)
    os.kill(pid, signal.SIGKILL)
    runner.join(timeout=600)

    assert not alive(pid), f"{name} was killed"
    assert reports, "the lease finished on the executors Spark started elsewhere"
    assert reports[0].committed == [shard.shard_id for shard in shards]
    drive(spark, spark_lakehouse, group)
    assert verify_group(catalog, group, key="event_id").ok
    assert len(catalog.load_table(group.sink).scan().to_arrow()) == 200


def test_restarting_postgresql_in_the_middle_of_a_tick_keeps_exactly_once(
    spark: SparkSession,
    spark_lakehouse: LakehouseConfig,
    make_group: type[GroupConfig],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from iceberg import leader

    catalog = spark_lakehouse.catalog()
    group = make_group(shard_caps={"max_files": 2})
    append_batches(create_source(catalog, group.source), 4, 25)
    drive(spark, spark_lakehouse, group)
    append_batches(catalog.load_table(group.source), 4, 25)
    postgres = stack_postgres()
    restarts: list[float] = []
    real_failpoint = leader.failpoint

    def restart_mid_tick(name: str) -> None:
        if name == "leader.after_liveness" and not restarts:
            started = time.monotonic()
            postgres.halt()
            postgres.restart()
            restarts.append(time.monotonic() - started)
        real_failpoint(name)

    monkeypatch.setattr(leader, "failpoint", restart_mid_tick)
    try:
        tick(catalog, group, lambda _: RunState.MISSING)
        outcome = "the tick went on over fresh connections"
    except CatalogUnavailable as exc:
        outcome = f"the tick failed cleanly: {exc}"
    monkeypatch.setattr(leader, "failpoint", real_failpoint)

    assert restarts, f"PostgreSQL was restarted inside the tick ({outcome})"
    drive(spark, spark_lakehouse, group)
    assert verify_group(catalog, group, key="event_id").ok
    assert len(catalog.load_table(group.sink).scan().to_arrow()) == 200
