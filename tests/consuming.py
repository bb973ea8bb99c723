"""``consume`` as the tests call it: the session, the observers and the patience as arguments of their own.

The product takes them as one ``ConsumeHooks`` value and one ``RunOptions``; a test states only
the ones it is about, so this builds both from the keywords it names.
"""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import SparkSession

from icegroup.iceberg.config.lakehouse import LakehouseConfig
from icegroup.iceberg.leader import RunObserver, TickResult
from icegroup.iceberg.protocol.consume import DEFAULTS, RunOptions
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.state import Lease
from icegroup.spark_jobs.borrower.runner import LeaseCallback
from icegroup.spark_jobs.consume import ConsumeHooks, ConsumeSummary
from icegroup.spark_jobs.consume import consume as run_consume
from icegroup.spark_jobs.follow import FollowReport


def consume(
    spark: Callable[[], SparkSession],
    lakehouse: LakehouseConfig,
    group: GroupConfig,
    owner_run_id: str,
    observe_others: RunObserver,
    on_lease: LeaseCallback | None = None,
    on_tick: Callable[[TickResult], None] | None = None,
    progress: Callable[[str], None] = print,
    max_wait_s: float = DEFAULTS.max_wait_s,
    poll_s: float = DEFAULTS.poll_s,
    until_caught_up: bool = True,
    terminate: Callable[[list[Lease]], object] | None = None,
    follow: bool = DEFAULTS.follow,
    on_follow: Callable[[FollowReport], None] | None = None,
) -> ConsumeSummary:
    """Consume ``group`` as ``owner_run_id``, with the hooks and the patience named."""
    hooks = ConsumeHooks(spark, observe_others, progress, on_lease, on_tick, terminate, on_follow)
    return run_consume(lakehouse, group, owner_run_id, hooks, RunOptions(max_wait_s, poll_s, follow), until_caught_up)
