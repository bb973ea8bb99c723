"""One SparkSession for the whole session: JVM start-up is the dominant cost of these tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from iceberg.lakehouse import LakehouseConfig
from spark_jobs.session import get_session


@pytest.fixture(scope="session")
def spark(lakehouse: LakehouseConfig) -> Iterator[SparkSession]:
    """A real local Spark with the real Iceberg runtime against the session's SQLite catalog."""
    session = get_session(lakehouse.model_copy(update={"spark_master": "local[2]"}))
    yield session
    session.stop()
