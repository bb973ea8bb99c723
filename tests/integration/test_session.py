"""The process's SparkSession: started once, and handed out again without another round of settings."""

from __future__ import annotations

import pytest
from pyspark.sql import SparkSession

from icegroup.iceberg.config.lakehouse import LakehouseConfig
from icegroup.spark_jobs.session import get_session


def test_the_same_settings_get_the_running_session_without_going_through_the_builder(
    spark: SparkSession, spark_lakehouse: LakehouseConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Borrower's resource asks for the session the CLI started in the background: no JVM round trips."""
    assert get_session(spark_lakehouse) is spark

    def refuse(builder: SparkSession.Builder) -> SparkSession:
        raise AssertionError("getOrCreate was called for a session already running with these settings")

    monkeypatch.setattr(SparkSession.Builder, "getOrCreate", refuse)
    assert get_session(spark_lakehouse) is spark


def test_other_settings_still_reach_the_running_session(spark: SparkSession, spark_lakehouse: LakehouseConfig) -> None:
    """A lakehouse with other runtime settings gets them applied, as ``getOrCreate`` always did."""
    other = spark_lakehouse.model_copy(
        update={"spark_conf": {**spark_lakehouse.spark_conf, "spark.sql.shuffle.partitions": "3"}}
    )
    try:
        assert get_session(other) is spark
        assert spark.conf.get("spark.sql.shuffle.partitions") == "3"
    finally:
        get_session(spark_lakehouse)
    assert spark.conf.get("spark.sql.shuffle.partitions") == "4"
