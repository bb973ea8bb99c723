"""The Borrower: execute one lease, shard by shard, each shard one fenced sink commit.

Each shard's commit is the run's checkpoint. A later attempt of the same lease first reads the sink
history since the grant and skips the shards already there, so a run that died resumes from its last
checkpoint. If another attempt commits a shard at the same moment, the fenced commit fails and the
shard counts as done by the other attempt: either way it is in the sink exactly once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from pyiceberg.catalog import Catalog
from pyspark.sql import SparkSession

from iceberg.errors import IcegroupError, SinkError
from iceberg.groups import GroupConfig
from iceberg.lakehouse import LakehouseConfig
from iceberg.lineage import commit_properties
from iceberg.registry import load_state
from iceberg.shards import Shard
from iceberg.sink_history import read_sink_history
from iceberg.state import Lease
from iceberg.tables import load_source, oldest_snapshot_id
from spark_jobs.session import activate
from spark_jobs.shard_reader import read_shard
from spark_jobs.sink_writer import (
    AlreadyCommitted,
    check_sink_schema,
    commit_shard,
    ensure_sink,
    with_lineage,
)
from spark_jobs.transforms import load_transform

log = logging.getLogger(__name__)


class StaleLease(IcegroupError):
    """The lease is no longer this run's: re-granted to a later attempt, or finished by others."""


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


def ensure_still_held(catalog: Catalog, group: str, lease: Lease) -> None:
    """Stop before a commit if the lease has been re-granted or finished meanwhile.

    This narrows the window for a replaced attempt; the commit's own validation is what makes a
    late commit of the same shard fail.
    """
    fetch_lease(catalog, group, lease.lease_id, lease.attempt)


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
    done = read_sink_history(catalog, group.sink, group.name, lease.sink_snapshot_at_grant).shard_ids()
    source = load_source(catalog, group.source)
    root = oldest_snapshot_id(source) if any(s.from_snapshot is None for s in shards) else None
    source_table = f"{lakehouse.catalog_name}.{group.source}"
    sink_table = f"{lakehouse.catalog_name}.{group.sink}"
    sink_ready = False
    for shard in shards:
        report.source_from = shard.from_snapshot if report.source_from is None else report.source_from
        report.source_to = shard.to_snapshot
        if shard.shard_id in done:
            report.resumed.append(shard.shard_id)
            progress(f"shard {shard.shard_id} ({shard.stream}) already committed; resuming after it")
            continue
        out = transform(read_shard(spark, source_table, shard, root, group.filter))
        out = with_lineage(out, group.name, lease.lease_id, shard.shard_id, lease.epoch)
        if not sink_ready:
            ensure_sink(spark, lakehouse.catalog_name, group.sink, out)
            check_sink_schema(spark, sink_table, out)
            sink_ready = True
        props = commit_properties(group.name, group.source, lease.lease_id, lease.epoch, lease.attempt, shard)
        ensure_still_held(catalog, group.name, lease)
        try:
            commit_shard(out, sink_table, shard.shard_id, lease.sink_snapshot_at_grant, props)
        except AlreadyCommitted as exc:
            history = read_sink_history(catalog, group.sink, group.name, lease.sink_snapshot_at_grant)
            if shard.shard_id not in history.shard_ids():
                raise SinkError(
                    f"sink: the commit of shard {shard.shard_id} failed validation, yet no commit of it is in "
                    f"{group.sink}'s history; refusing to skip it ({exc.__cause__})"
                ) from exc
            report.fenced.append(shard.shard_id)
            progress(f"shard {shard.shard_id} ({shard.stream}) was committed by another attempt; skipped")
            continue
        report.committed.append(shard.shard_id)
        report.rows_in += shard.rows
        progress(f"shard {shard.shard_id} ({shard.stream}, {shard.rows} rows) committed")
    history = read_sink_history(catalog, group.sink, group.name, lease.sink_snapshot_at_grant)
    for commit in history.commits:
        if commit.lease_id == lease.lease_id and commit.attempt == lease.attempt:
            report.rows_out += commit.added_records
            report.sink_snapshots.append(commit.snapshot_id)
    return report
