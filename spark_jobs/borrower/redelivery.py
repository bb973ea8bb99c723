"""Delivering a shard again when its read or transform fails, and the poison verdict at the last try.

A failure of the transform or the data may be passing too, so a shard is delivered again with
backoff, up to the group's ``max_deliver``. A shard that fails every time is poison: it goes to the
dead-letter table, and the group stops or parks it (``on_poison``). A failure of the platform (the
catalog, storage, the network) is not the shard's: it never counts here.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import CommitStateUnknownException, NoSuchTableError, ServerError, ServiceUnavailableError
from pyspark.sql import DataFrame
from sqlalchemy.exc import SQLAlchemyError

from icegroup.iceberg.errors import (
    IcegroupError,
    PlatformUnavailable,
    PoisonShard,
)
from icegroup.iceberg.protocol.dead_letters import PARKED, STOPPED, DeadLetter
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.shards import Shard, snapshot_range
from icegroup.iceberg.protocol.state import Lease
from icegroup.iceberg.retry import again_after
from icegroup.iceberg.store.dead_letters import record
from icegroup.spark_jobs.borrower.user_errors import describe_error, is_platform_failure


class Redeliveries(Protocol):
    """Where deliveries after the first are counted: a lease's report."""

    redeliveries: int


@dataclass(frozen=True)
class Staged:
    """A shard's output, staged on the sink under ``token``: ready to publish."""

    token: str


@dataclass(frozen=True)
class Undelivered:
    """A shard whose every delivery failed: the last error, for the poison verdict."""

    error: Exception


def stage_with_redelivery(
    group: GroupConfig,
    shard: Shard,
    output: Callable[[], DataFrame],
    stage: Callable[[DataFrame], str],
    report: Redeliveries,
    progress: Callable[[str], None],
    platform_up: Callable[[], bool],
) -> Staged | Undelivered:
    """Read, transform and stage a shard, delivering it again with backoff when that fails.

    Returns the staged output, or the last error once ``max_deliver`` deliveries failed. icegroup's own
    errors propagate at once: another delivery cannot fix a bad config or a sink that cannot take
    the output, and a lease fenced meanwhile says nothing about the shard. So do failures of the
    catalog, storage or network: they say nothing about the shard either, and the lease retries
    them (``spark_jobs/borrower/lease.py``) without counting a delivery. A failure is the platform's when
    its cause chain says so, or when ``platform_up`` finds the catalog unreachable right after it:
    drivers wrap a lost connection in errors of their own (Iceberg's JDBC pool once reported one as
    a ``ClassCastException``).
    """

    def deliver() -> str:
        try:
            return stage(output())
        except IcegroupError:
            raise
        except Exception as exc:
            if is_platform_failure(exc) or not platform_up():
                raise PlatformUnavailable(f"shard {shard.shard_id}: {describe_error(exc)}") from exc
            raise

    def wait_after(error: Exception, failed: int, _waited_s: float) -> float | None:
        if isinstance(error, IcegroupError) or failed >= group.max_deliver:
            return None
        return group.deliver_backoff_s * 2 ** (failed - 1)

    def again(error: Exception, failed: int, wait: float) -> None:
        report.redeliveries += 1
        progress(
            f"shard {shard.shard_id}: delivery {failed}/{group.max_deliver} failed "
            f"({describe_error(error)}); again in {wait:.1f}s"
        )

    try:
        return Staged(again_after(deliver, wait_after, again))
    except IcegroupError:
        raise
    except Exception as exc:
        return Undelivered(exc)


def record_poison_shard(
    catalog: Catalog, group: GroupConfig, lease: Lease, shard: Shard, error: Exception, why_not: str | None = None
) -> PoisonShard:
    """Record a poison shard in the dead-letter table; returns the error that ends the run.

    ``why_not`` says why ``on_poison: isolate`` did not apply, and what would change that: it goes in
    the dead letter (so ``dead-letters`` and ``describe`` show it) and in the error.
    """
    action = PARKED if group.on_poison == "park" else STOPPED
    cause = describe_error(error) + (f" ({why_not})" if why_not else "")
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
                error=cause,
                from_snapshot=shard.from_snapshot,
                to_snapshot=shard.to_snapshot,
                at_ms=int(time.time() * 1000),
            )
        ],
    )
    what = "parked; the other streams go on" if action == PARKED else "stopped the group"
    return PoisonShard(
        f"group {group.name}, lease {lease.lease_id}#{lease.attempt}: shard {shard.shard_id} (stream {shard.stream}, "
        "source snapshots "
        f"{snapshot_range(shard.from_snapshot, shard.to_snapshot)}) failed {group.max_deliver} deliveries "
        f"and {what}: {cause}. "
        f"Fix the transform or the data, then run `icegroup redrive {group.name} --execute`"
    )


def catalog_reachable(catalog: Catalog, table: str) -> bool:
    """Whether the catalog answers: loading ``table`` works, or says the table does not exist.

    A SQL catalog's database error, a REST server's 5xx or a connection refused all mean it does not.
    """
    try:
        catalog.load_table(table)
    except NoSuchTableError:
        return True
    except (SQLAlchemyError, OSError, ServerError, ServiceUnavailableError, CommitStateUnknownException, IcegroupError):
        return False
    return True
