"""Transforms of the stack tier, written as a user's project would: UDFs that call into a sibling module.

cloudpickle sends a UDF's own body by value but a module-level function it calls by reference, so
these run on a cluster's executors only if ``tests.stack.rules`` is importable there: shipped by the
Borrower (``icegroup.spark_jobs.code_shipping``), since the stack's executors do not see the driver's path.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import LongType

from tests.stack.rules import cents, kill_own_worker_once


@F.udf(LongType())
def _in_cents(amount: float) -> int:
    return cents(amount)


@F.udf(LongType())
def _in_cents_killing_the_worker(amount: float) -> int:
    kill_own_worker_once()
    return cents(amount, pause_s=0.02)


def amount_in_cents(df: DataFrame) -> DataFrame:
    """The amount in cents, computed by a Python UDF on the executors."""
    return df.withColumn("amount_cents", _in_cents("amount"))


def amount_in_cents_killing_the_worker(df: DataFrame) -> DataFrame:
    """The same, and a task kills its own Spark worker once when a test armed it (``kill_own_worker_once``)."""
    return df.withColumn("amount_cents", _in_cents_killing_the_worker("amount"))
