"""The Borrower: execute one lease, shard by shard, each shard one fenced sink commit.

Its side of the lease protocol is EMQX's connecting -> connected -> unsubscribing:

- *connecting*: check the registry still grants this attempt, and raise the lease's fence on the
  sink to it, so any older attempt of the lease can no longer commit;
- *connected*: per shard, read, transform and stage the output, then publish it in the fenced
  commit. A read or transform that fails is delivered again with backoff, up to ``max_deliver``
  times; then the shard is poison and goes to the dead-letter table (``on_poison``);
- *unsubscribing*: read back what this attempt committed, for the run's metadata.

Each shard's commit is the run's checkpoint. A later attempt of the same lease first reads the sink
history and skips the shards already there, so a run that died resumes from its last checkpoint.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from pyiceberg.catalog import Catalog
from pyspark.sql import DataFrame, SparkSession

from iceberg.dead_letter import PARKED, STOPPED, DeadLetter, record
from iceberg.errors import IcegroupError, SinkError
from iceberg.failpoints import failpoint
from iceberg.fencing import raise_fences
from iceberg.groups import GroupConfig
from iceberg.lakehouse import LakehouseConfig
from iceberg.lineage import commit_properties, fence_key
from iceberg.liveness import BorrowerPhase
from iceberg.registry import load_state
from iceberg.shards import Shard
from iceberg.sink_history import read_sink_history
from iceberg.state import Lease
from iceberg.tables import load_optional, load_source, oldest_snapshot_id, shard_columns
from spark_jobs.session import activate
from spark_jobs.shard_reader import read_shard
from spark_jobs.sink_writer import (
    AlreadyCommitted,
    Fenced,
    align_to_sink,
    ensure_sink,
    publish_shard,
    stage_shard,
    with_lineage,
)
from spark_jobs.transforms import Transform, load_transform

log = logging.getLogger(__name__)


class StaleLease(IcegroupError):
    """The lease is no longer this run's: re-granted to a later attempt, or finished by others."""


class PoisonShard(SinkError):
    """A shard failed ``max_deliver`` times; it is in the dead-letter table and this run stops."""


@dataclass
class LeaseReport:
    """What one Borrower run did, for run metadata and the CLI's progress lines."""

    lease_id: str
    attempt: int
    epoch: int
    window_start_ms: int
    shards_total: int
    committed: list[str] = field(default_factory=list)
    resumed: list[str] = field(default_factory=list)
    fenced: list[str] = field(default_factory=list)
    rows_in: int = 0
    rows_out: int = 0
    source_from: int | None = None
    source_to: int | None = None
    sink_snapshots: list[int] = field(default_factory=list)
    commit_conflicts: int = 0
    redeliveries: int = 0
    phase: BorrowerPhase = BorrowerPhase.CONNECTING


def fetch_lease(catalog: Catalog, group: str, lease_id: str, attempt: int) -> tuple[Lease, list[Shard]]:
    """The lease and its uncommitted shards as the registry has them; refuse a stale attempt."""
    state = load_state(catalog, group).state
    lease = state.leases.get(lease_id) if state else None
    if state is None or lease is None:
        raise StaleLease(f"lease {lease_id} of group {group!r} is not in flight (finished or never granted)")
    if lease.attempt != attempt:
        raise StaleLease(
            f"lease {lease_id} of group {group!r} is at attempt {lease.attempt}; this run holds attempt {attempt}"
        )
    return lease, [state.shards[sid] for sid in lease.shard_ids if sid in state.shards]


def connect(catalog: Catalog, group: GroupConfig, lease: Lease) -> bool:
    """Claim the lease on the sink: raise its fence to this attempt, or find a later attempt holds it.

    Returns False when there is no sink yet to claim it on; the claim is then made once it exists.
    """
    sink = load_optional(catalog, group.sink)
    if sink is None:
        return False
    key = fence_key(group.name, lease.lease_id)
    raise_fences(sink, {key: lease.attempt})
    granted = int(sink.metadata.properties.get(key, "0"))
    if granted > lease.attempt:
        raise StaleLease(f"lease {lease.lease_id} of group {group.name!r} is fenced at attempt {granted}")
    return True


def stage_with_redelivery(
    group: GroupConfig,
    shard: Shard,
    output: Callable[[], DataFrame],
    stage: Callable[[DataFrame], str],
    report: LeaseReport,
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
                f"({type(exc).__name__}: {_first_line(exc)}); again in {wait:.1f}s"
            )
            time.sleep(wait)
    raise AssertionError("unreachable: max_deliver >= 1")


def _first_line(exc: BaseException) -> str:
    """The first line of what went wrong; for a JVM error, its root cause rather than py4j's wrapper."""
    java = getattr(exc, "java_exception", None)
    if java is not None:
        while java.getCause() is not None:
            java = java.getCause()
        message = java.getMessage()
        text = f"{java.getClass().getSimpleName()}: {message if message is not None else ''}".splitlines()
    else:
        text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__


def park(catalog: Catalog, group: GroupConfig, lease: Lease, shard: Shard, error: Exception) -> PoisonShard:
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
                error=f"{type(error).__name__}: {_first_line(error)}",
                from_snapshot=shard.from_snapshot,
                to_snapshot=shard.to_snapshot,
                at_ms=int(time.time() * 1000),
            )
        ],
    )
    what = "parked; the other streams go on" if action == PARKED else "stopped the group"
    return PoisonShard(
        f"shard {shard.shard_id} (stream {shard.stream}, source snapshots {shard.from_snapshot}.."
        f"{shard.to_snapshot}) failed {group.max_deliver} deliveries and {what}: {_first_line(error)}. "
        f"Fix the transform or the data, then run `icegroup redrive {group.name}`"
    )


def run_lease(
    spark: SparkSession,
    lakehouse: LakehouseConfig,
    group: GroupConfig,
    lease: Lease,
    shards: list[Shard],
    progress: Callable[[str], None] = log.info,
) -> LeaseReport:
    """Commit every shard of the lease that is not in the sink yet, in order."""
    activate(spark)
    catalog = lakehouse.catalog()
    transform = load_transform(group.transform)
    report = LeaseReport(
        lease_id=lease.lease_id,
        attempt=lease.attempt,
        epoch=lease.epoch,
        window_start_ms=lease.window_start_ms,
        shards_total=len(shards),
    )
    claimed = connect(catalog, group, lease)
    report.phase = BorrowerPhase.CONNECTED
    progress(f"lease {lease.lease_id} attempt {lease.attempt}: connected, {len(shards)} shards")
    done = read_sink_history(catalog, group.sink, group.name, lease.sink_snapshot_at_grant).shard_ids()
    source = load_source(catalog, group.source)
    root = oldest_snapshot_id(source) if any(s.from_snapshot is None for s in shards) else None
    source_table = f"{lakehouse.catalog_name}.{group.source}"
    sink_table = f"{lakehouse.catalog_name}.{group.sink}"
    ready: list[bool] = []

    def stage(out: DataFrame) -> str:
        if not ready:
            ensure_sink(spark, lakehouse.catalog_name, group.sink, out)
            if not claimed:
                connect(catalog, group, lease)
            ready.append(True)
        aligned, evolve = align_to_sink(spark, sink_table, out)
        return stage_shard(aligned, sink_table, evolve=evolve)

    for shard in shards:
        report.source_from = shard.from_snapshot if report.source_from is None else report.source_from
        report.source_to = shard.to_snapshot
        if shard.shard_id in done:
            report.resumed.append(shard.shard_id)
            progress(f"shard {shard.shard_id} ({shard.stream}) already committed; resuming after it")
            continue
        failpoint("borrower.before_read")
        staged = stage_with_redelivery(
            group,
            shard,
            _output(spark, transform, source_table, shard, root, group, lease, shard_columns(source, shard.schema_id)),
            stage,
            report,
            progress,
        )
        if isinstance(staged, Exception):
            connect(catalog, group, lease)  # only the lease's holder may declare its shard poison
            raise park(catalog, group, lease, shard, staged)
        failpoint("borrower.after_stage")
        props = commit_properties(group.name, group.source, lease.lease_id, lease.epoch, lease.attempt, shard)
        try:
            published = publish_shard(
                spark, sink_table, staged, group.name, lease.lease_id, lease.attempt, lease.epoch, shard.shard_id,
                lease.sink_snapshot_at_grant, props,
            )  # fmt: skip
        except Fenced as exc:
            raise StaleLease(str(exc)) from exc
        except AlreadyCommitted as exc:
            history = read_sink_history(catalog, group.sink, group.name, lease.sink_snapshot_at_grant)
            if shard.shard_id not in history.shard_ids():
                raise SinkError(
                    f"sink: the commit of shard {shard.shard_id} was refused as a duplicate, yet no commit of it "
                    f"is in {group.sink}'s history; refusing to skip it ({exc})"
                ) from exc
            report.fenced.append(shard.shard_id)
            progress(f"shard {shard.shard_id} ({shard.stream}) was committed by another attempt; skipped")
            continue
        failpoint("borrower.after_commit")
        report.commit_conflicts += published.conflicts
        report.committed.append(shard.shard_id)
        report.rows_in += shard.rows
        progress(f"shard {shard.shard_id} ({shard.stream}, {shard.rows} rows) committed")
    report.phase = BorrowerPhase.UNSUBSCRIBING
    history = read_sink_history(catalog, group.sink, group.name, lease.sink_snapshot_at_grant)
    for commit in history.commits:
        if commit.lease_id == lease.lease_id and commit.attempt == lease.attempt:
            report.rows_out += commit.added_records
            report.sink_snapshots.append(commit.snapshot_id)
    progress(f"lease {lease.lease_id} attempt {lease.attempt}: unsubscribing, {len(report.committed)} committed")
    return report


def _output(
    spark: SparkSession,
    transform: Transform,
    source_table: str,
    shard: Shard,
    root: int | None,
    group: GroupConfig,
    lease: Lease,
    columns: list[tuple[str, str]] | None,
) -> Callable[[], DataFrame]:
    """The shard's output as a fresh DataFrame per delivery, lineage columns included."""

    def build() -> DataFrame:
        out = transform(read_shard(spark, source_table, shard, root, group.filter, columns))
        return with_lineage(out, group.name, lease.lease_id, shard.shard_id, lease.epoch)

    return build
