"""The Borrower: execute one lease, shard by shard, each shard one fenced sink commit.

``run_lease`` is five phases, after EMQX's connecting -> connected -> unsubscribing:

- **connect**: the lease's fence on the sink is raised to this attempt, so any older attempt of
  the lease can no longer commit (a Dagster Borrower run first checks, in ``fetch_lease``, that the
  registry still grants it; ``consume`` runs the leases its own tick has just granted);
- **resume**: the sink's history since the grant says which shards an earlier attempt already
  committed; the run goes on after them (each shard's commit is the run's checkpoint);
- **deliver**: per shard, read, transform and stage the output. A read or transform that fails is
  delivered again with backoff, up to ``max_deliver`` times; then the shard is poison and goes to
  the dead-letter table (``on_poison``);
- **publish**: the fenced commit appends the staged output and the shard's progress to main;
- **report**: what this attempt committed, for the run's metadata.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from pyiceberg.catalog import Catalog
from pyspark.sql import DataFrame, SparkSession

from iceberg.dead_letters import record
from iceberg.errors import AlreadyCommitted, ConfigError, Fenced, IcegroupError, PoisonShard, SinkError, StaleLease
from iceberg.failpoints import failpoint
from iceberg.groups import GroupConfig
from iceberg.lakehouse import LakehouseConfig
from iceberg.protocol.lineage import SinkCommit, commit_properties
from iceberg.protocol.liveness import BorrowerPhase
from iceberg.protocol.poison import PARKED, STOPPED, DeadLetter
from iceberg.protocol.shards import Shard, snapshot_range, window_label
from iceberg.protocol.state import Lease
from iceberg.registry import load_state
from iceberg.tables import load_source, oldest_snapshot_id, shard_columns
from spark_jobs.fenced_commit import (
    align_to_sink,
    claim,
    ensure_sink,
    lease_history,
    publish_shard,
    stage_shard,
    with_lineage,
)
from spark_jobs.session import activate
from spark_jobs.shard_reader import read_shard
from spark_jobs.transforms import Transform, load_transform
from spark_jobs.user_errors import describe_error

log = logging.getLogger(__name__)

Progress = Callable[[str], None]


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
    bytes_in: int = 0
    duration_s: float = 0.0
    source_from: int | None = None
    source_to: int | None = None
    sink_snapshots: list[int] = field(default_factory=list)
    commit_conflicts: int = 0
    redeliveries: int = 0
    phase: BorrowerPhase = BorrowerPhase.CONNECTING


@dataclass
class LeaseRun:
    """One attempt of a lease in flight: what every phase of ``run_lease`` shares."""

    spark: SparkSession
    lakehouse: LakehouseConfig
    catalog: Catalog
    group: GroupConfig
    lease: Lease
    transform: Transform
    report: LeaseReport
    progress: Progress
    run_id: str | None = None
    claimed: bool = False
    sink_ready: bool = False

    @property
    def sink_table(self) -> str:
        """The sink as Spark names it."""
        return f"{self.lakehouse.catalog_name}.{self.group.sink}"

    @property
    def source_table(self) -> str:
        """The source as Spark names it."""
        return f"{self.lakehouse.catalog_name}.{self.group.source}"


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


def run_lease(
    spark: SparkSession,
    lakehouse: LakehouseConfig,
    group: GroupConfig,
    lease: Lease,
    shards: list[Shard],
    progress: Progress = log.info,
    run_id: str | None = None,
) -> LeaseReport:
    """Commit every shard of the lease that is not in the sink yet, in order; each commit names ``run_id``.

    Every progress line names the group and the lease attempt, and each shard's line says where its
    time went: reading, transforming and staging it (one Spark job), and the fenced publish.
    """
    started_at = time.perf_counter()
    activate(spark)

    def said(line: str) -> None:
        progress(f"{group.name} lease {lease.lease_id}#{lease.attempt}: {line}")

    run = LeaseRun(
        spark=spark,
        lakehouse=lakehouse,
        catalog=lakehouse.catalog(),
        group=group,
        lease=lease,
        transform=load_transform(group.transform),
        report=LeaseReport(
            lease_id=lease.lease_id,
            attempt=lease.attempt,
            epoch=lease.epoch,
            window_start_ms=lease.window_start_ms,
            shards_total=len(shards),
        ),
        progress=said,
        run_id=run_id,
    )
    connect(run, len(shards))
    todo = resume(run, shards)
    source = load_source(run.catalog, group.source)
    root = oldest_snapshot_id(source) if any(s.from_snapshot is None for s in todo) else None
    for shard in todo:
        failpoint("borrower.before_read")
        started = time.perf_counter()
        build = _output(run, shard, root, shard_columns(source, shard.schema_id))
        staged = stage_with_redelivery(group, shard, build, lambda out: deliver(run, out), run.report, said)
        if isinstance(staged, Exception):
            claim(run.catalog, group, lease)  # only the lease's holder may declare its shard poison
            raise record_poison_shard(run.catalog, group, lease, shard, staged)
        failpoint("borrower.after_stage")
        publish(run, shard, staged, time.perf_counter() - started)
    run.report.duration_s = time.perf_counter() - started_at
    return report(run)


def connect(run: LeaseRun, shards: int) -> None:
    """Claim the lease on the sink (if there is one yet): older attempts can no longer commit.

    A Borrower whose filter or transform differs from the config the lease was granted under would
    mix two versions of output in one group; it refuses before it claims anything.
    """
    origin = run.lease.origin
    if origin is not None and origin.config_hash is not None and origin.config_hash != run.group.config_hash:
        raise ConfigError(
            f"group {run.group.name!r}: this Borrower's filter/transform (config hash {run.group.config_hash}) "
            f"differ from the config lease {run.lease.lease_id} was granted under ({origin.config_hash}); "
            "run every Borrower and the Leader with the same group config"
        )
    run.claimed = claim(run.catalog, run.group, run.lease)
    run.report.phase = BorrowerPhase.CONNECTED
    run.progress(f"connected, {shards} shards")


def resume(run: LeaseRun, shards: list[Shard]) -> list[Shard]:
    """The shards still to commit: those already in the sink are skipped, in order.

    Commits this very attempt made before (a retried run of the same attempt) count in its report.
    """
    history = lease_history(run.catalog, run.group, run.lease)
    count_own_commits(run, history.commits)
    done = history.shard_ids()
    todo = []
    for shard in shards:
        run.report.source_from = shard.from_snapshot if run.report.source_from is None else run.report.source_from
        run.report.source_to = shard.to_snapshot
        if shard.shard_id in done:
            run.report.resumed.append(shard.shard_id)
            run.progress(f"shard {shard.shard_id} ({shard.stream}) already committed; resuming after it")
        else:
            todo.append(shard)
    return todo


def count_own_commits(run: LeaseRun, commits: Iterable[SinkCommit]) -> None:
    """Add the sink commits made by this lease attempt to its report: rows out and sink snapshots."""
    for commit in commits:
        own = commit.lease_id == run.lease.lease_id and commit.attempt == run.lease.attempt
        if own and commit.snapshot_id not in run.report.sink_snapshots:
            run.report.rows_out += commit.added_records
            run.report.sink_snapshots.append(commit.snapshot_id)


def deliver(run: LeaseRun, out: DataFrame) -> str:
    """Stage one shard's output on the sink; the first delivery creates the sink and claims the lease."""
    if not run.sink_ready:
        ensure_sink(run.spark, run.lakehouse.catalog_name, run.group.sink, out)
        if not run.claimed:
            run.claimed = claim(run.catalog, run.group, run.lease)
        run.sink_ready = True
    aligned, evolve = align_to_sink(run.spark, run.sink_table, out)
    return stage_shard(aligned, run.sink_table, evolve=evolve)


def publish(run: LeaseRun, shard: Shard, token: str, staged_s: float) -> None:
    """Publish a staged shard in the fenced commit; a shard another attempt committed is skipped.

    ``staged_s`` is how long reading, transforming and staging it took, for the shard's log line.
    """
    group, lease = run.group, run.lease
    started = time.perf_counter()
    props = commit_properties(
        group.name, group.source, lease.lease_id, lease.epoch, lease.attempt, shard, lease.origin, run.run_id
    )
    try:
        published = publish_shard(run.spark, run.sink_table, token, group.name, lease, shard.shard_id, props)
    except Fenced as exc:
        raise StaleLease(str(exc)) from exc
    except AlreadyCommitted as exc:
        history = lease_history(run.catalog, group, lease)
        carrying = [c for c in history.commits if shard.shard_id in {s.shard_id for s in c.shards}]
        if not carrying:
            raise SinkError(
                f"sink: the commit of shard {shard.shard_id} was refused as a duplicate, yet no commit of it "
                f"is in {group.sink}'s history; refusing to skip it ({exc})"
            ) from exc
        if any(c.lease_id == lease.lease_id and c.attempt == lease.attempt for c in carrying):
            # A swap Iceberg retried had landed after all: the commit is this attempt's own.
            count_own_commits(run, carrying)
            run.report.committed.append(shard.shard_id)
            run.report.rows_in += shard.rows
            run.report.bytes_in += shard.bytes
            return
        run.report.fenced.append(shard.shard_id)
        run.progress(f"shard {shard.shard_id} ({shard.stream}) was committed by another attempt; skipped")
        return
    failpoint("borrower.after_commit")
    run.report.commit_conflicts += published.conflicts
    run.report.committed.append(shard.shard_id)
    run.report.rows_in += shard.rows
    run.report.bytes_in += shard.bytes
    run.report.rows_out += published.added_records
    run.report.sink_snapshots.append(published.snapshot_id)
    run.progress(
        f"shard {shard.shard_id} ({shard.stream}, {shard.rows} rows) committed: read, transformed and staged in "
        f"{staged_s:.2f}s, published in {time.perf_counter() - started:.2f}s"
    )


def report(run: LeaseRun) -> LeaseReport:
    """Close the attempt: its report holds every commit it made."""
    run.report.phase = BorrowerPhase.UNSUBSCRIBING
    run.progress(f"unsubscribing, {len(run.report.committed)} committed")
    return run.report


def stage_with_redelivery(
    group: GroupConfig,
    shard: Shard,
    output: Callable[[], DataFrame],
    stage: Callable[[DataFrame], str],
    report: LeaseReport,
    progress: Progress,
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


def _output(
    run: LeaseRun, shard: Shard, root: int | None, columns: list[tuple[str, str]] | None
) -> Callable[[], DataFrame]:
    """The shard's output as a fresh DataFrame per delivery, lineage columns included."""
    group, lease = run.group, run.lease

    def build() -> DataFrame:
        read = read_shard(run.spark, run.source_table, shard, root, group.filter, columns)
        window = window_label(shard.window_start_ms, group.replay_window)
        return with_lineage(run.transform(read), group.name, lease.lease_id, shard.shard_id, lease.epoch, window)

    return build
