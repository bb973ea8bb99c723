"""The Borrower: execute one lease, shard by shard; small shards share one fenced sink commit.

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
  Consecutive small shards (``commit_batch_rows``) are staged in one Spark job and published in one
  commit, which lists every shard's id and source range;
- **report**: what this attempt committed, for the run's metadata.

A Borrower asked to stop (``stop``: its process got SIGTERM, its Dagster run was terminated)
finishes the commit in flight and hands back the shards after it (``handed_back``); the tick that
sees the run ended grants them again, resuming after what was committed. What every phase shares
(the attempt, its report, building and staging a shard's output) is in ``attempt.py``; when a
lease goes on after its platform failed, and when it fails instead, in ``platform_retry.py``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from functools import partial

from pyiceberg.catalog import Catalog
from pyiceberg.table import Table
from pyspark.sql import SparkSession

from icegroup.iceberg.config.lakehouse import LakehouseConfig
from icegroup.iceberg.errors import (
    AlreadyCommitted,
    ConfigError,
    Fenced,
    IcegroupError,
    SinkError,
    StagedOutputGone,
    StaleLease,
)
from icegroup.iceberg.failpoints import failpoint
from icegroup.iceberg.openlineage import output_dataset, run_events
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.liveness import BorrowerPhase
from icegroup.iceberg.protocol.shards import Shard, commit_batches
from icegroup.iceberg.protocol.sink_commit import SinkCommit, commit_properties
from icegroup.iceberg.protocol.state import Lease
from icegroup.iceberg.retry import again_after
from icegroup.iceberg.store.registry import load_state
from icegroup.iceberg.store.tables import load_source, oldest_snapshot_id
from icegroup.spark_jobs.borrower.attempt import (
    STAGINGS,
    InFlight,
    LeaseReport,
    LeaseRun,
    Progress,
    Where,
    deliver,
    output,
    staged_again,
)
from icegroup.spark_jobs.borrower.isolation import commit_without_poison, isolated_property
from icegroup.spark_jobs.borrower.platform_retry import after_platform_failure, going_on
from icegroup.spark_jobs.borrower.redelivery import (
    Undelivered,
    catalog_reachable,
    record_poison_shard,
    stage_with_redelivery,
)
from icegroup.spark_jobs.borrower.user_errors import describe_error
from icegroup.spark_jobs.code_shipping import ship_transform
from icegroup.spark_jobs.column_lineage import sink_columns
from icegroup.spark_jobs.session import activate, reads_row_ids
from icegroup.spark_jobs.sink.fenced_commit import Published, PublishRequest, claim, discard_staged, lease_history
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


def commit_batch(
    run: LeaseRun,
    batch: list[Shard],
    root: int | None,
    source: Table,
    stopped: Callable[[], bool],
    wait: bool = False,
    failed_before: int = 0,
) -> None:
    """Commit a batch of shards: staged together and published in one commit, or, when that fails, each alone.

    Without ``wait`` the last publish is left in flight (``settle``); with it, every publish has landed.
    ``failed_before`` are the stagings of these shards an expiry already took.
    """
    together = partial(commit_together, run, batch, root, source, wait)
    alone = staged_again(run.progress, together, failed_before) if len(batch) > 1 else batch
    for shard in alone:
        if stopped():
            break
        staged_again(run.progress, partial(commit_alone, run, shard, root, source, wait), failed_before)


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
        if shard.shard_id in run.report.committed:
            continue  # an earlier try of this run committed it, and counted it
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


def commit_alone(run: LeaseRun, shard: Shard, root: int | None, source: Table, wait: bool = True) -> None:
    """Stage one shard, delivering it again when that fails and recording it as poison at the last, then publish it.

    Without ``wait`` the publish is left in flight while the lease stages its next shards (``publish``).
    """
    failpoint("borrower.before_read")
    started = time.perf_counter()
    build = output(run, [shard], root, source)
    staged = stage_with_redelivery(
        run.group, shard, build, lambda out: deliver(run, out), run.report, run.progress,
        lambda: catalog_reachable(run.catalog, run.group.source),
    )  # fmt: skip
    isolated: dict[str, list[int]] = {}
    why_not: str | None = None
    if isinstance(staged, Undelivered) and run.group.on_poison == "isolate":
        staged, isolated, why_not = commit_without_poison(run, shard, root, source, staged.error)
    if isinstance(staged, Undelivered):
        settle(run)  # the shards before it land first
        claim(run.catalog, run.group, run.lease)  # only the lease's holder may declare its shard poison
        raise record_poison_shard(run.catalog, run.group, run.lease, shard, staged.error, why_not)
    failpoint("borrower.after_stage")
    # A lone shard refused as a duplicate is in a commit (or SinkError is raised): none is left over.
    where = Where(root, source)
    extra = isolated_property(shard, isolated)
    publish(run, [shard], staged.token, time.perf_counter() - started, where, extra, wait=wait or bool(isolated))
    run.report.isolated_rows += sum(map(len, isolated.values()))  # after the publish: a re-staged shard isolates again


def commit_together(
    run: LeaseRun, batch: list[Shard], root: int | None, source: Table, wait: bool = True
) -> list[Shard]:
    """Stage small shards in one Spark job and publish them in one commit; returns those left to commit alone.

    A batch is delivered once. If that fails, each of its shards is delivered on its own, so that
    redelivery and the poison verdict stay per shard.
    """
    failpoint("borrower.before_read")
    started = time.perf_counter()
    try:
        staged = deliver(run, output(run, batch, root, source)())
    except IcegroupError:
        raise
    except Exception as exc:
        run.progress(f"{len(batch)} shards staged together failed ({describe_error(exc)}); delivering each alone")
        return batch
    failpoint("borrower.after_stage")
    return publish(run, batch, staged, time.perf_counter() - started, Where(root, source), wait=wait)


def publish(
    run: LeaseRun,
    shards: list[Shard],
    token: str,
    staged_s: float,
    where: Where,
    extra: dict[str, str] | None = None,
    wait: bool = True,
) -> list[Shard]:
    """Publish staged shards in one fenced commit, after the publish in flight; returns the shards left to commit.

    Without ``wait`` the publish runs on the lease's publisher thread while the lease reads and
    stages its next shards, and ``settle`` (before the next publish, or at the lease's end) counts it
    or sorts out its refusal; publishes stay one at a time and in order. With ``wait`` it lands
    first. A commit refused because a shard is in the sink already is sorted out in
    ``refused_as_duplicate``. ``staged_s`` is how long reading, transforming and staging took, for
    the log line; ``extra`` are more summary properties (the rows a shard's commit left out).
    """
    try:
        settle(run)
    except BaseException:
        discarded(run, token)
        raise
    group, lease = run.group, run.lease
    props = commit_properties(
        group.name, group.source, lease.lease_id, lease.epoch, lease.attempt, shards, lease.origin, run.run_id
    ) | (extra or {})
    committer = run.committer or SinkCommitter(run.spark, run.sink_table, group.name)
    request = PublishRequest(token, lease, [shard.shard_id for shard in shards], props)

    def land() -> Published:
        published = committer.publish(request)
        failpoint("borrower.after_commit")
        return published

    if run.publisher is None:
        run.publisher = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"{group.name}-publish")
    run.in_flight = InFlight(run.publisher.submit(land), shards, staged_s, time.perf_counter(), where)
    return settle(run, again=False) if wait else []


def discarded(run: LeaseRun, token: str) -> None:
    """Expire staged output the lease will not publish (the publish before it failed); a failure only warns.

    Left behind, it would stay invisible on main until the sink's snapshots expire, as a Borrower
    killed between stage and publish leaves it.
    """
    try:
        discard_staged(run.spark, run.sink_table, token)
    except Exception as exc:  # the error that ended the lease is the one to raise
        log.warning("%s: staged output %s left behind: %s", run.group.name, token, describe_error(exc))


def settle(run: LeaseRun, again: bool = True) -> list[Shard]:
    """Wait for this lease's publish in flight and count what it committed; returns the shards it left to commit.

    A lease fenced meanwhile ends (``StaleLease``). A publish refused as a duplicate leaves the
    shards no other attempt committed (``refused_as_duplicate``): a publish that was left in flight
    commits them alone here, at once, as it does staged output an expiry took before the publish
    (with ``again``); otherwise they are returned, and ``StagedOutputGone`` is raised, to the caller
    that stages and publishes (``staged_again``).
    """
    pending, run.in_flight = run.in_flight, None
    if pending is None:
        return []
    failed_before = 0
    try:
        published = pending.future.result()
    except Fenced as exc:
        raise StaleLease(str(exc)) from exc
    except AlreadyCommitted as exc:
        left = refused_as_duplicate(run, pending.shards, exc)
    except StagedOutputGone as exc:
        if not again:
            raise
        failed_before = 1
        run.progress(f"{exc}; staging again (2/{STAGINGS})")
        left = pending.shards
    else:
        counted(run, pending, published)
        return []
    if not again:
        return left
    try:
        commit_batch(run, left, pending.where.root, pending.where.source, lambda: False, True, failed_before)
    except StagedOutputGone as exc:
        # These shards' stagings are spent; raised as it is, the caller would stage its own shard again.
        raise SinkError(str(exc)) from exc
    return []


def drain(run: LeaseRun) -> None:
    """On the way out of a failed lease: wait for its publish in flight, and count it if it landed."""
    pending, run.in_flight = run.in_flight, None
    if pending is not None and pending.future.exception() is None:
        counted(run, pending, pending.future.result())


def counted(run: LeaseRun, pending: InFlight, published: Published) -> None:
    """Add a publish that landed to the lease's report, and say where its time went."""
    shards = pending.shards
    run.report.commit_conflicts += published.conflicts
    for shard in shards:
        count_shard(run, shard)
    run.report.rows_out += published.added_records
    run.report.sink_snapshots.append(published.snapshot_id)
    rows = sum(shard.rows for shard in shards)
    streams = ", ".join(sorted({shard.stream for shard in shards}))
    first, last = shards[0].shard_id, shards[-1].shard_id
    what = f"shard {first}" if len(shards) == 1 else f"{len(shards)} shards {first}..{last}"
    run.progress(
        f"{what} ({streams}, {rows} rows) committed: read, transformed and staged in {pending.staged_s:.2f}s, "
        f"published in {time.perf_counter() - pending.started:.2f}s"
    )


def refused_as_duplicate(run: LeaseRun, shards: list[Shard], exc: AlreadyCommitted) -> list[Shard]:
    """After a commit refused as a duplicate: which shards are in the sink, and by whom; returns the rest.

    A shard this very attempt committed (a swap Iceberg retried had landed after all) counts in its
    report; one another attempt committed is skipped. The rest of a batch commit on their own.
    """
    group, lease = run.group, run.lease
    history = lease_history(run.catalog, group, lease)
    carriers = {shard.shard_id: commit for commit in history.commits for shard in commit.shards}
    if not any(shard.shard_id in carriers for shard in shards):
        raise SinkError(
            f"sink: the commit of shards {', '.join(s.shard_id for s in shards)} was refused as a duplicate, yet "
            f"no commit of them is in {group.sink}'s history; refusing to skip them ({exc})"
        ) from exc
    left = []
    for shard in shards:
        commit = carriers.get(shard.shard_id)
        if commit is None:
            left.append(shard)
        elif commit.lease_id == lease.lease_id and commit.attempt == lease.attempt:
            count_own_commits(run, [commit])
            count_shard(run, shard)
        else:
            run.report.fenced.append(shard.shard_id)
            run.progress(f"shard {shard.shard_id} ({shard.stream}) was committed by another attempt; skipped")
    return left


def hand_back(run: LeaseRun, shards: list[Shard]) -> None:
    """Record the lease's shards not committed by this attempt: the Leader grants them again."""
    done = {*run.report.committed, *run.report.resumed, *run.report.fenced}
    run.report.handed_back = [shard.shard_id for shard in shards if shard.shard_id not in done]
    if run.report.handed_back:
        run.progress(
            f"stopped after {len(run.report.committed)} shards committed; {len(run.report.handed_back)} handed back"
        )


def count_shard(run: LeaseRun, shard: Shard) -> None:
    """Add a shard this attempt committed to its report."""
    run.report.committed.append(shard.shard_id)
    run.report.rows_in += shard.rows
    run.report.bytes_in += shard.bytes
    run.report.files_in += len(shard.files)


def report(run: LeaseRun) -> LeaseReport:
    """Close the attempt: its report holds every commit it made."""
    run.report.phase = BorrowerPhase.UNSUBSCRIBING
    run.progress(f"unsubscribing, {len(run.report.committed)} committed")
    return run.report
