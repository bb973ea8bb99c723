"""When a lease goes on after its catalog, storage or network failed, and when its run fails instead.

A shard's own failure (a transform's error, bad data) is delivered again and judged in
``redelivery.py``. What fails underneath it, the platform, is not the shards' fault: the lease waits
with backoff and resumes after what it committed, for up to half the lease timeout, past which the
Leader grants the lease again elsewhere. A Spark driver JVM that exited is not a platform failure
that waiting mends: the run fails at once, naming the remedy.
"""

from __future__ import annotations

import threading

from pyspark.sql import SparkSession

from icegroup.iceberg.errors import AlreadyCommitted, ConfigError, Fenced, PoisonShard, SparkGone, StaleLease
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.state import Lease
from icegroup.spark_jobs.borrower.attempt import Progress
from icegroup.spark_jobs.borrower.user_errors import describe_error, is_platform_failure
from icegroup.spark_jobs.session import jvm_alive

# The longest wait between tries of a lease whose catalog, storage or network failed.
PLATFORM_MAX_WAIT_S = 30.0
# Verdicts on the lease itself: never tried again as a platform failure.
FINAL = (StaleLease, Fenced, AlreadyCommitted, PoisonShard, ConfigError)


def platform_retry(group: GroupConfig, exc: Exception, tries: int, waited: float) -> float | None:
    """How long to wait before the lease tries again after ``exc``; None to fail the run now.

    Only a failure of the catalog, storage or network is tried again (a transform's or the data's
    failure was delivered again and judged already), with backoff from ``deliver_backoff_s`` up to
    ``PLATFORM_MAX_WAIT_S``, for half the lease timeout: past that the Leader re-grants the lease.
    icegroup's verdicts on the lease itself (fenced, stale, already committed, a poison shard, a bad
    config) are final, whatever Iceberg failure they were found through (a fenced commit is refused
    by Iceberg's commit validation): another try would only hold the Borrower for nothing.
    """
    if isinstance(exc, FINAL) or not is_platform_failure(exc) or waited >= group.lease_timeout_s / 2:
        return None
    return float(min(max(group.deliver_backoff_s, 0.1) * 2**tries, PLATFORM_MAX_WAIT_S))


def after_platform_failure(
    spark: SparkSession,
    group: GroupConfig,
    lease: Lease,
    stop: threading.Event | None,
    error: Exception,
    failed: int,
    waited_s: float,
) -> float | None:
    """How long the lease waits before it goes on after ``error``; None to fail the run (``platform_retry``).

    A lease asked to stop does not go on: the tick that sees its run ended grants the rest again.
    A driver JVM that exited looks like a lost network to py4j, but no try in this process can
    reach it again: ``SparkGone`` fails the run at once, naming the remedy, instead of trying for
    half the lease timeout.
    """
    if stop is not None and stop.is_set():
        return None
    if not jvm_alive(spark):
        raise SparkGone(
            f"group {group.name} lease {lease.lease_id}#{lease.attempt}: Spark's driver JVM in this process exited "
            f"({describe_error(error)}), most often out of memory; give it more (spark.driver_memory in the "
            "lakehouse config, Spark's 1g by default) and run again: what was committed stays committed, and the "
            "rest of the lease is granted again"
        ) from error
    return platform_retry(group, error, failed - 1, waited_s)


def going_on(who: str, progress: Progress, error: Exception, _failed: int, wait: float) -> None:
    """Tell that the lease ``who`` goes on after a platform failure, and when."""
    progress(
        f"{who}: the platform failed, not the shards ({describe_error(error)}); the lease goes on in {wait:.1f}s, "
        "resuming after what it committed"
    )
