"""What only a distributed deployment has: code on other executors, a lost Spark worker, a restarted PostgreSQL.

Each test checks exactly once row by row with pyiceberg (``verify_group``), as every other tier does.
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator

import pytest
import requests
from pyiceberg.exceptions import RESTError
from pyspark.sql import SparkSession
from sqlalchemy.exc import SQLAlchemyError

from icegroup.iceberg.config.lakehouse import LakehouseConfig
from icegroup.iceberg.leader import tick
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.liveness import RunState
from icegroup.iceberg.store.registry import load_state
from icegroup.iceberg.verify import verify_group
from icegroup.infra.processes import alive
from icegroup.infra.stack import Stack, alive_workers, up
from icegroup.spark_jobs.borrower.user_errors import failure_classes, is_infrastructure
from tests.factories import MakeGroup, append_batches, create_source
from tests.integration.helpers import drive
from tests.stack_env import stack_layout, stack_postgres

# PostgreSQL stays down this long once halted in the middle of a tick: longer than a REST read's retries
# (READ_RETRY, about 4 s of back-off), so the tick meets the outage rather than waiting it out.
OUTAGE_S = 8.0


@pytest.fixture
def all_workers() -> Iterator[None]:
    """After the test, the stack is whole again: a killed worker is started anew (``up`` is idempotent)."""
    yield
    layout = stack_layout()
    up(layout)
    assert alive_workers(layout) == len(layout.worker_ui_ports)


def test_a_udf_calling_the_users_own_module_runs_on_the_executors(
    spark: SparkSession, spark_lakehouse: LakehouseConfig, make_group: MakeGroup
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
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=5) as response:
                executors = json.load(response).get("executors", [])
        except urllib.error.URLError:
            continue  # a killed worker hosts nothing
        if any(executor.get("appid") == app for executor in executors):
            part = next(p for p in stack.parts if p.name == f"spark-worker-{number}")
            assert part.pid is not None
            return part.name, part.pid
    raise AssertionError(f"no stack worker runs an executor of {app}")


def test_a_spark_worker_killed_under_a_running_lease_keeps_exactly_once(
    spark: SparkSession, spark_lakehouse: LakehouseConfig, make_group: MakeGroup, all_workers: None
) -> None:
    catalog = spark_lakehouse.catalog()
    group = make_group(transform="tests.stack.transforms:amount_in_cents_killing_the_worker")
    append_batches(create_source(catalog, group.source), 2, 100)
    name, pid = worker_running(spark)
    folder = stack_layout().folder
    (folder / "kill-worker-done").unlink(missing_ok=True)
    (folder / "kill-worker-armed").touch()

    _, reports = drive(spark, spark_lakehouse, group)

    assert (folder / "kill-worker-done").read_text() == str(pid), f"a task killed {name}, its own worker"
    assert not alive(pid)
    assert worker_running(spark)[0] != name, "the work went on in an executor Spark started on the other worker"
    assert sum(len(report.committed) for report in reports) >= 1
    assert verify_group(catalog, group, key="event_id").ok
    sink = catalog.load_table(group.sink).scan(selected_fields=("amount", "amount_cents")).to_arrow().to_pylist()
    assert len(sink) == 200
    assert all(row["amount_cents"] == round(row["amount"] * 100) for row in sink)


@pytest.fixture
def interrupted_tick(monkeypatch: pytest.MonkeyPatch) -> Callable[[Callable[[], None]], None]:
    """Arm ``leader.after_liveness`` (after the tick reads liveness, before it fences and commits) with an action."""
    from icegroup.iceberg import leader

    real = leader.failpoint

    def arm(action: Callable[[], None]) -> None:
        def at(name: str) -> None:
            if name == "leader.after_liveness":
                monkeypatch.setattr(leader, "failpoint", real)
                action()
            real(name)

        monkeypatch.setattr(leader, "failpoint", at)

    return arm


def half_consumed(spark: SparkSession, lakehouse: LakehouseConfig, make_group: MakeGroup) -> GroupConfig:
    """A group that consumed 100 rows, with 100 more appended for the next tick to grant."""
    catalog = lakehouse.catalog()
    group = make_group(shard_caps={"max_files": 2})
    append_batches(create_source(catalog, group.source), 4, 25)
    drive(spark, lakehouse, group)
    append_batches(catalog.load_table(group.source), 4, 25)
    return group


def test_postgresql_restarted_in_the_middle_of_a_tick_costs_the_tick_nothing(
    spark: SparkSession,
    spark_lakehouse: LakehouseConfig,
    make_group: MakeGroup,
    interrupted_tick: Callable[[Callable[[], None]], None],
) -> None:
    catalog = spark_lakehouse.catalog()
    group = half_consumed(spark, spark_lakehouse, make_group)
    postgres = stack_postgres()
    restarted: list[bool] = []
    interrupted_tick(lambda: (postgres.halt(), postgres.restart(), restarted.append(True)))

    result = tick(catalog, group, lambda _: RunState.MISSING)

    assert restarted, "PostgreSQL was restarted inside the tick"
    assert result.launch, "the tick committed its grants over fresh connections (the REST server reconnected)"
    drive(spark, spark_lakehouse, group)
    assert verify_group(catalog, group, key="event_id").ok
    assert len(catalog.load_table(group.sink).scan().to_arrow()) == 200


def test_postgresql_down_while_a_tick_commits_fails_the_tick_whole_and_the_next_one_goes_on(
    spark: SparkSession,
    spark_lakehouse: LakehouseConfig,
    make_group: MakeGroup,
    interrupted_tick: Callable[[Callable[[], None]], None],
) -> None:
    catalog = spark_lakehouse.catalog()
    group = half_consumed(spark, spark_lakehouse, make_group)
    before = load_state(catalog, group.name).state
    postgres = stack_postgres()
    back = threading.Timer(OUTAGE_S, postgres.restart)
    interrupted_tick(lambda: (postgres.halt(), back.start()))

    try:
        with pytest.raises((SQLAlchemyError, RESTError, requests.RequestException)) as failed:
            tick(catalog, group, lambda _: RunState.MISSING)
    finally:
        back.join()
    assert is_infrastructure(failure_classes(failed.value)), f"a platform failure, not the group's: {failed.value!r}"

    assert load_state(catalog, group.name).state == before, "nothing of the failed tick was committed"
    drive(spark, spark_lakehouse, group)
    assert verify_group(catalog, group, key="event_id").ok
    assert len(catalog.load_table(group.sink).scan().to_arrow()) == 200
