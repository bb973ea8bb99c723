"""Transforms the integration tests configure groups with (a group names its transform by import path)."""

from __future__ import annotations

import time

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import DoubleType, LongType


def columns_seen(df: DataFrame) -> DataFrame:
    """Record the columns the transform was given, so a test can see which schema a shard had."""
    return df.withColumn("seen", F.lit(",".join(df.columns)))


def fail_on_apac(df: DataFrame) -> DataFrame:
    """Fail at execution time on rows of region apac: a poison shard for that stream only."""
    return df.withColumn(
        "amount", F.when(F.col("region") == "apac", F.raise_error(F.lit("poison row"))).otherwise(F.col("amount"))
    )


def event_id_as_string(df: DataFrame) -> DataFrame:
    """Output whose event_id type differs from a sink written with the source's types."""
    return df.withColumn("event_id", F.col("event_id").cast("string"))


@F.udf(DoubleType())
def _checked_amount(amount: float) -> float:
    if amount > 50:
        raise ValueError(f"amount {amount} is over the limit")
    return amount


def reject_large_amounts(df: DataFrame) -> DataFrame:
    """A Python UDF that raises ValueError inside the Spark task, as user code does."""
    return df.withColumn("amount", _checked_amount("amount"))


def amount_in_cents(df: DataFrame) -> DataFrame:
    """A changed transform: the amount in cents, so a replayed window's rows differ from the first output."""
    return df.withColumn("amount", F.round(F.col("amount") * 100))


def totals_by_region(df: DataFrame) -> DataFrame:
    """An aggregation: a row per region, made from many source files at once."""
    return df.groupBy("region").agg(F.sum("amount").alias("amount"), F.max("event_id").alias("event_id"))


def sorted_by_amount(df: DataFrame) -> DataFrame:
    """Row-wise output, but sorted within each task: the sort holds rows back across file boundaries."""
    return df.sortWithinPartitions("amount")


def spread_over_two_tasks(df: DataFrame) -> DataFrame:
    """Row-wise output, but shuffled into two partitions: rows leave the task that read their file."""
    return df.repartition(2)


@F.udf(DoubleType())
def _slow_amount(amount: float) -> float:
    time.sleep(1.0)
    return amount


def one_second_a_row(df: DataFrame) -> DataFrame:
    """A long shard: a second per row, over 16 tasks that complete one after another (the renewal test)."""
    return df.repartition(16).withColumn("amount", _slow_amount("amount"))


POISON_IDS = (17, 50_001, 99_990)


def fail_on_three_ids(df: DataFrame) -> DataFrame:
    """Raise, inside the Spark task, on three event ids only, each with its own message: three poison rows."""
    poison = F.col("event_id").isin(*POISON_IDS)
    message = F.concat(F.lit("poison event "), F.col("event_id").cast("string"))
    return df.withColumn("amount", F.when(poison, F.raise_error(message)).otherwise(F.col("amount")))


@F.udf(LongType())
def _checked_user(user_id: int) -> int:
    if user_id % 97 == 0:
        raise ValueError(f"user {user_id} is blocked")
    return user_id


def reject_blocked_users(df: DataFrame) -> DataFrame:
    """A Python UDF that raises ValueError on some rows: isolation works through Python workers too."""
    return df.withColumn("user_id", _checked_user("user_id"))
