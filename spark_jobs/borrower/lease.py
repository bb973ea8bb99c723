"""The Borrower: execute one lease, shard by shard; consecutive shards share one fenced sink commit.

``run_lease`` is five phases, after EMQX's connecting -> connected -> unsubscribing:

- **connect**: the lease's fence on the sink is raised to this attempt, so any older attempt of
  the lease can no longer commit (a Dagster Borrower run first checks, in ``fetch_lease``, that the
  registry still grants it; ``consume`` runs the leases its own tick has just granted);
- **resume**: the sink's history since the grant says which shards an earlier attempt already
  committed; the run goes on after them (each shard's commit is the run's checkpoint);
- **deliver**: per shard, read, transform and stage the output. A read or transform that fails is
  delivered again with backoff, up to ``max_deliver`` times (``redelivery.py``); then the shard is
  poison and goes to the dead-letter table (``on_poison``), or its failing rows are isolated and the
  rest is committed (``on_poison: isolate``, ``isolation.py``);
- **publish**: the fenced commit appends the staged output and the shard's progress to main.
  Consecutive shards, up to ``commit_batch_rows`` rows (100M by default: W1's whole lease), are staged in one Spark
  job and published in one commit, which lists every shard's id and source range;
- **report**: what this attempt committed, for the run's metadata.

A Borrower asked to stop (``stop``: its process got SIGTERM, its Dagster run was terminated)
finishes the commit in flight and hands back the shards after it (``handed_back``); the tick that
sees the run ended grants them again, resuming after what was committed. Deliver and publish,
with the publish left in flight while the next shard stages, are in ``publishing.py``; what every
phase shares (the attempt, its report, building and staging a shard's output) is in
``attempt.py``; when a lease goes on after its platform failed, and when it fails instead, in
``platform_retry.py``.
"""

from __future__ import annotations

import logging
import threading
import time
from functools import partial

from pyiceberg.catalog import Catalog
from pyspark.sql import SparkSession

from icegroup.iceberg.config.lakehouse import LakehouseConfig
from icegroup.iceberg.errors import ConfigError, StaleLease
from icegroup.iceberg.openlineage import output_dataset, run_events
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.liveness import BorrowerPhase
from icegroup.iceberg.protocol.shards import Shard, commit_batches
from icegroup.iceberg.protocol.state import Lease
from icegroup.iceberg.retry import again_after
from icegroup.iceberg.store.registry import load_state
from icegroup.iceberg.store.tables import load_source, oldest_snapshot_id
from icegroup.spark_jobs.borrower.attempt import LeaseReport, LeaseRun, Progress, count_own_commits, count_shard
from icegroup.spark_jobs.borrower.platform_retry import after_platform_failure, going_on
from icegroup.spark_jobs.borrower.publishing import commit_batch, drain, settle
from icegroup.spark_jobs.code_shipping import ship_transform
from icegroup.spark_jobs.column_lineage import sink_columns
from icegroup.spark_jobs.session import activate, reads_row_ids
from icegroup.spark_jobs.sink.fenced_commit import claim, lease_history
from icegroup.spark_jobs.sink.group_commit import SinkCommitter
from icegroup.spark_jobs.transforms import load_transform

log = logging.getLogger(__name__)


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
    stop: threading.Event | None = None,
    committer: SinkCommitter | None = None,
) -> LeaseReport:
    """Commit every shard of the lease that is not in the sink yet, in order; each commit names ``run_id``.

    Once ``stop`` is set, the lease ends after the commit in flight and hands back the rest. The
    leases of one process that share a ``committer`` publish in as few sink commits as meet (``group_commit.py``);
    without one, each of this lease's commits is a commit of its own.

    Every progress line names the group and the lease attempt, and each shard's line says where its
    time went: reading, transforming and staging it (one Spark job), and the fenced publish. The
    attempt is an OpenLineage run when the lakehouse config turns that on (``iceberg/openlineage.py``).
    """
    catalog = lakehouse.catalog()
    key = f"lease/{lease.lease_id}/{lease.attempt}"
    read_to = shards[-1].read_at() if shards else None
    events = run_events(lakehouse, catalog, group.name, f"{group.name}.lease", key, group.source, read_to)
    events.start()
    # One report for every try: a commit that landed in a try the platform then failed is this run's.
    tally = LeaseReport(lease.lease_id, lease.attempt, lease.epoch, lease.window_start_ms, len(shards))
    try:
        done = again_after(
            lambda: execute_lease(spark, lakehouse, group, lease, shards, progress, run_id, stop, committer, tally),
            partial(after_platform_failure, spark, group, lease, stop),
            partial(going_on, f"{group.name} lease {lease.lease_id}#{lease.attempt}", progress),
        )
    except BaseException as exc:
        events.fail(exc)
        raise
    last = done.sink_snapshots[-1] if done.sink_snapshots else None
    outputs = output_dataset(lakehouse, catalog, group.sink, last, done.rows_out)
    if done.handed_back:
        events.abort(outputs)
    else:
        events.complete(outputs, sink_columns(spark, lakehouse, group))
    return done


def execute_lease(
    spark: SparkSession,
    lakehouse: LakehouseConfig,
    group: GroupConfig,
    lease: Lease,
    shards: list[Shard],
    progress: Progress,
    run_id: str | None,
    stop: threading.Event | None = None,
    committer: SinkCommitter | None = None,
    tally: LeaseReport | None = None,
) -> LeaseReport:
    """The work of ``run_lease``: connect, resume after what is committed, commit the rest until ``stop`` is set.

    ``tally`` is the report of the tries before this one, if any: what they committed stays counted.
    """
    started_at = time.perf_counter()
    activate(spark)
    ship_transform(spark, group.transform)

    def said(line: str) -> None:
        progress(f"{group.name} lease {lease.lease_id}#{lease.attempt}: {line}")

    run = LeaseRun(
        spark=spark,
        lakehouse=lakehouse,
        catalog=lakehouse.catalog(),
        group=group,
        lease=lease,
        transform=load_transform(group.transform),
        report=tally or LeaseReport(lease.lease_id, lease.attempt, lease.epoch, lease.window_start_ms, len(shards)),
        progress=said,
        run_id=run_id,
        committer=committer,
    )
    connect(run, len(shards))
    todo = resume(run, shards)
    source = load_source(run.catalog, group.source)
    run.row_files.row_ids = group.source_row_ids and reads_row_ids(spark, source.metadata.format_version)
    root = oldest_snapshot_id(source) if any(s.from_snapshot is None for s in todo) else None
    stopped = stop.is_set if stop is not None else lambda: False
    try:
        for batch in commit_batches(todo, group.commit_batch_rows):
            if stopped():
                break
            commit_batch(run, batch, root, source, stopped)
        settle(run)
    except BaseException:
        drain(run)
        raise
    finally:
        if run.publisher is not None:
            run.publisher.shutdown(wait=True)
    if stopped():
        hand_back(run, todo)
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

    Commits this very attempt made before (a retried run of the same attempt) count in its rows
    out. A shard this very run committed in an earlier try, whose answer was lost (the catalog
    failed as it replied), counts as committed, not resumed: its commit names this run.
    """
    history = lease_history(run.catalog, run.group, run.lease)
    count_own_commits(run, history.commits)
    mine = (run.lease.lease_id, run.lease.attempt, run.run_id)
    own = {s.shard_id for c in history.commits if (c.lease_id, c.attempt, c.run_id) == mine for s in c.shards}
    done = history.shard_ids()
    listed = {*run.report.committed, *run.report.resumed, *run.report.fenced}
    todo = []
    for shard in shards:
        run.report.source_from = shard.from_snapshot if run.report.source_from is None else run.report.source_from
        run.report.source_to = shard.to_snapshot
        if shard.shard_id in listed:
            continue  # an earlier try of this run committed it, resumed after it or skipped it, and said so
        if run.run_id is not None and shard.shard_id in own:
            count_shard(run, shard)
            run.progress(f"shard {shard.shard_id} ({shard.stream}) was committed by this run, its answer lost; counted")
        elif shard.shard_id in done:
            run.report.resumed.append(shard.shard_id)
            run.progress(f"shard {shard.shard_id} ({shard.stream}) already committed; resuming after it")
        else:
            todo.append(shard)
    return todo


def hand_back(run: LeaseRun, shards: list[Shard]) -> None:
    """Record the lease's shards not committed by this attempt: the Leader grants them again."""
    done = {*run.report.committed, *run.report.resumed, *run.report.fenced}
    run.report.handed_back = [shard.shard_id for shard in shards if shard.shard_id not in done]
    if run.report.handed_back:
        run.progress(
            f"stopped after {len(run.report.committed)} shards committed; {len(run.report.handed_back)} handed back"
        )


def report(run: LeaseRun) -> LeaseReport:
    """Close the attempt: its report holds every commit it made."""
    run.report.phase = BorrowerPhase.UNSUBSCRIBING
    run.progress(f"unsubscribing, {len(run.report.committed)} committed")
    return run.report
