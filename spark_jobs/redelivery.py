"""Delivering a shard again when its read or transform fails, and the poison verdict at the last try.

A failure may be passing (an executor lost, a file briefly unreadable), so a shard is delivered
again with backoff, up to the group's ``max_deliver``. A shard that fails every time is poison: it
goes to the dead-letter table, and the group stops or parks it (``on_poison``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

from pyiceberg.catalog import Catalog
from pyspark.sql import DataFrame

from iceberg.dead_letters import record
from iceberg.errors import IcegroupError, PoisonShard
from iceberg.groups import GroupConfig
from iceberg.protocol.poison import PARKED, STOPPED, DeadLetter
from iceberg.protocol.shards import Shard, snapshot_range
from iceberg.protocol.state import Lease
from spark_jobs.user_errors import describe_error


class Redeliveries(Protocol):
    """Where deliveries after the first are counted: a lease's report."""

    redeliveries: int


def stage_with_redelivery(
    group: GroupConfig,
    shard: Shard,
    output: Callable[[], DataFrame],
    stage: Callable[[DataFrame], str],
    report: Redeliveries,
    progress: Callable[[str], None],
) -> str | Exception:
    """Read, transform and stage a shard, delivering it again with backoff when that fails.

    Returns the stage token, or the last error once ``max_deliver`` deliveries failed. icegroup's own
    errors propagate at once: another delivery cannot fix a bad config or a sink that cannot take
    the output, and a lease fenced meanwhile says nothing about the shard.
    """
    for delivery in range(1, group.max_deliver + 1):
        try:
            return stage(output())
        except IcegroupError:
            raise
        except Exception as exc:
            if delivery == group.max_deliver:
                return exc
            wait = group.deliver_backoff_s * 2 ** (delivery - 1)
            report.redeliveries += 1
            progress(
                f"shard {shard.shard_id}: delivery {delivery}/{group.max_deliver} failed "
                f"({describe_error(exc)}); again in {wait:.1f}s"
            )
            time.sleep(wait)
    raise AssertionError("unreachable: max_deliver >= 1")


def record_poison_shard(
    catalog: Catalog, group: GroupConfig, lease: Lease, shard: Shard, error: Exception
) -> PoisonShard:
    """Record a poison shard in the dead-letter table; returns the error that ends the run."""
    action = PARKED if group.on_poison == "park" else STOPPED
    record(
        catalog,
        group.name,
        [
            DeadLetter(
                shard_id=shard.shard_id,
                stream=shard.stream,
                lease_id=lease.lease_id,
                attempt=lease.attempt,
                action=action,
                error=describe_error(error),
                from_snapshot=shard.from_snapshot,
                to_snapshot=shard.to_snapshot,
                at_ms=int(time.time() * 1000),
            )
        ],
    )
    what = "parked; the other streams go on" if action == PARKED else "stopped the group"
    return PoisonShard(
        f"shard {shard.shard_id} (stream {shard.stream}, source snapshots "
        f"{snapshot_range(shard.from_snapshot, shard.to_snapshot)}) failed {group.max_deliver} deliveries "
        f"and {what}: {describe_error(error)}. "
        f"Fix the transform or the data, then run `icegroup redrive {group.name}`"
    )
