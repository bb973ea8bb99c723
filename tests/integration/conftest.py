"""One SparkSession for the whole session: JVM start-up is the dominant cost of these tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from iceberg.config.lakehouse import LakehouseConfig
from spark_jobs.session import AWS_BUNDLE_JAR, DRIVER_JARS, get_session, spark_conf
from tests.stack_env import on_stack, use_home


@pytest.fixture(scope="session")
def spark_lakehouse(lakehouse: LakehouseConfig) -> LakehouseConfig:
    """The session's lakehouse as the tests' Spark runs it: local[2] or the stack's cluster, plus the PostgreSQL driver.

    With the driver there, the PostgreSQL tier can add a second catalog to the same JVM at run time.
    """
    jars = spark_conf(lakehouse)["spark.jars"].split(",")
    driver = Path(DRIVER_JARS["postgresql"])
    if driver.is_file() and driver.name not in {Path(jar).name for jar in jars}:
        jars.append(str(driver))
    if lakehouse.jars and (Path(lakehouse.jars) / AWS_BUNDLE_JAR).is_file():
        jars.append(str(Path(lakehouse.jars) / AWS_BUNDLE_JAR))
    master = lakehouse.spark_master if on_stack() else "local[2]"
    return lakehouse.model_copy(update={"spark_master": master, "spark_conf": {"spark.jars": ",".join(jars)}})


@pytest.fixture(scope="session")
def spark(spark_lakehouse: LakehouseConfig) -> Iterator[SparkSession]:
    """A real local Spark with the real Iceberg runtime against the session's SQLite catalog."""
    session = get_session(spark_lakehouse)
    yield session
    session.stop()


@pytest.fixture
def env(lake_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """ICEGROUP_HOME at the test lakehouse and a fresh DAGSTER_HOME, for the icegroup command; returns the latter."""
    dagster_home = tmp_path / "dagster"
    dagster_home.mkdir()
    use_home(monkeypatch, lake_home)
    monkeypatch.setenv("DAGSTER_HOME", str(dagster_home))
    return dagster_home
