"""The Borrower's deliver and publish phases: stage a lease's shards, and publish them one commit at a time.

Consecutive shards, up to ``commit_batch_rows``, are staged in one Spark job and published in one commit
(``commit_batch``); a batch that fails is delivered shard by shard, so that redelivery and the
poison verdict stay per shard. A publish is left in flight on the lease's publisher thread while
the lease reads and stages its next shard, and is settled (counted, or its refusal sorted out)
before the next publish, before a poison verdict and at the lease's end: a lease has at most one
publish in flight, and its commits land in order. ``lease.py`` runs these phases between connect
and report.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial

from pyiceberg.table import Table

from icegroup.iceberg.errors import AlreadyCommitted, Fenced, IcegroupError, SinkError, StagedOutputGone, StaleLease
from icegroup.iceberg.failpoints import failpoint
from icegroup.iceberg.protocol.shards import Shard, one_window
from icegroup.iceberg.protocol.sink_commit import commit_properties
from icegroup.spark_jobs.borrower.attempt import (
    STAGINGS,
    InFlight,
    LeaseRun,
    Where,
    count_own_commits,
    count_shard,
    deliver,
    output,
    staged_again,
)
from icegroup.spark_jobs.borrower.isolation import commit_without_poison, isolated_property
from icegroup.spark_jobs.borrower.redelivery import (
    Undelivered,
    catalog_reachable,
    record_poison_shard,
    stage_with_redelivery,
)
from icegroup.spark_jobs.borrower.user_errors import describe_error
from icegroup.spark_jobs.sink.fenced_commit import Published, PublishRequest, claim, discard_staged, lease_history
from icegroup.spark_jobs.sink.group_commit import SinkCommitter

log = logging.getLogger(__name__)


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
    """Stage a batch of shards in one Spark job and publish them in one commit; returns those left to commit alone.

    A batch is delivered once. If that fails, each of its shards is delivered on its own, so that
    redelivery and the poison verdict stay per shard.
    """
    failpoint("borrower.before_read")
    started = time.perf_counter()
    try:
        staged = deliver(run, output(run, batch, root, source)(), one_window(batch, run.group.replay_window))
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

    A shard this very run committed (a swap Iceberg retried had landed after all: the commit names
    this attempt and run) counts in its report; one anybody else committed is skipped. The rest of a
    batch commit on their own.
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
        elif (commit.lease_id, commit.attempt, commit.run_id) == (lease.lease_id, lease.attempt, run.run_id):
            count_own_commits(run, [commit])
            count_shard(run, shard)
        else:
            run.report.fenced.append(shard.shard_id)
            run.progress(f"shard {shard.shard_id} ({shard.stream}) was committed by another attempt or run; skipped")
    return left
