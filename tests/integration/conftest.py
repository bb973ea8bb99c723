"""One SparkSession for the whole session: JVM start-up is the dominant cost of these tests."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pyspark
import pytest
from pyspark.sql import SparkSession

from icegroup.iceberg.config.lakehouse import LakehouseConfig
from icegroup.iceberg.protocol.shards import window_label
from icegroup.spark_jobs.engines import DRIVERS, aws_bundle, runtime_for
from icegroup.spark_jobs.session import get_session
from tests.factories import MakeGroup
from tests.integration.helpers import CENTS, Chain
from tests.stack_env import on_stack, use_home


@pytest.fixture(scope="session")
def spark_lakehouse(lakehouse: LakehouseConfig) -> LakehouseConfig:
    """The session's lakehouse as the tests' Spark runs it: local[2] or the stack's cluster, plus the PostgreSQL driver.

    With the driver there, the PostgreSQL tier can add a second catalog to the same JVM at run time; on
    the stack the AWS bundle is there too, for the S3 tier's catalog.
    """
    runtime = runtime_for(pyspark.__version__, lakehouse.iceberg_version)
    packages = [runtime.coordinate, DRIVERS["postgresql"], *([aws_bundle(runtime.iceberg)] if on_stack() else [])]
    master = lakehouse.spark_master if on_stack() else "local[2]"
    return lakehouse.model_copy(update={"spark_master": master, "iceberg_packages": ",".join(packages)})


@pytest.fixture(scope="session")
def spark(spark_lakehouse: LakehouseConfig) -> Iterator[SparkSession]:
    """A real local Spark with the real Iceberg runtime against the session's SQLite catalog."""
    session = get_session(spark_lakehouse)
    yield session
    session.stop()


@pytest.fixture(autouse=True)
def _spark_starts_through_its_fixture(request: pytest.FixtureRequest) -> None:
    """A test marked ``spark`` gets the session's JVM from ``spark``, also when it reaches Spark through the product.

    pyspark resolves packages once per process, when the JVM starts. A Borrower op or an in-process
    command that started it first would start it with the plain lakehouse's jars, and the PostgreSQL
    tier, later on the same worker, would find no driver; which test runs first on a worker changes
    from run to run.
    """
    if request.node.get_closest_marker("spark"):
        request.getfixturevalue("spark")


@pytest.fixture
def env(lake_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """ICEGROUP_HOME at the test lakehouse and a fresh DAGSTER_HOME, for the icegroup command; returns the latter."""
    dagster_home = tmp_path / "dagster"
    dagster_home.mkdir()
    use_home(monkeypatch, lake_home)
    monkeypatch.setenv("DAGSTER_HOME", str(dagster_home))
    return dagster_home


@pytest.fixture
def chain(make_group: MakeGroup, ns: str) -> Chain:
    """The chain of this test's namespace; ``cents`` is the upstream group with its changed transform."""
    first = make_group(max_borrowers=2)
    second = make_group(name=f"g_{ns}_next", source=first.sink, sink=f"{ns}.events_next", max_borrowers=2)
    cents = first.model_copy(update={"transform": CENTS, "on_change": "continue"})
    return Chain(first, second, cents, window_label(int(time.time() * 1000), first.replay_window))
