"""Jobs: the warm Borrower job the Leader starts, the consume-until-caught-up job, replays, and expiry."""

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import dagster as dg
from pydantic import Field

from icegroup.dagster_project.assets import (
    DATA_VERSION_TAG,
    lease_metadata,
    replay_metadata,
)
from icegroup.dagster_project.checks import exactly_once_evaluation, lag_evaluation_now
from icegroup.dagster_project.openlineage_runs import expire_run
from icegroup.dagster_project.resources import lakehouse_of
from icegroup.dagster_project.runs.executor import ONE_PROCESS
from icegroup.dagster_project.runs.observer import observe_runs, terminate_runs
from icegroup.dagster_project.runs.tags import ROLE_BORROWER, TAG_GROUP, TAG_ROLE
from icegroup.dagster_project.runs.warm import borrow_op_name
from icegroup.dagster_project.tick_events import reported_in_run
from icegroup.iceberg.config.lakehouse import LakehouseConfig
from icegroup.iceberg.errors import RegistryConflict
from icegroup.iceberg.lag import Work, lag_of, pending_work
from icegroup.iceberg.leader import TickResult, tick
from icegroup.iceberg.protocol.borrower import ungranted, waiting
from icegroup.iceberg.protocol.consume import DEFAULTS, RunOptions
from icegroup.iceberg.protocol.durations import parse_duration
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.retention import StateRetention
from icegroup.iceberg.protocol.shards import window_label
from icegroup.iceberg.protocol.state import Lease
from icegroup.iceberg.store.tables import load_optional
from icegroup.spark_jobs.borrower.attempt import LeaseReport
from icegroup.spark_jobs.borrower.user_errors import describe_error
from icegroup.spark_jobs.borrower.warm import borrow
from icegroup.spark_jobs.consume import ConsumeHooks, consume
from icegroup.spark_jobs.follow import FollowReport, follow_upstream
from icegroup.spark_jobs.session import start_in_background


class ConsumeConfig(dg.Config):
    """How long a consume run goes on."""

    until_caught_up: bool = Field(
        default=True, description="Keep ticking until every source snapshot is committed; else one round."
    )
    max_wait_s: float = Field(
        default=DEFAULTS.max_wait_s,
        description="Give up after this long without progress while other runs hold leases.",
    )
    follow: bool = Field(
        default=DEFAULTS.follow,
        description="Keep consuming after catching up, checking the source every poll_s, until the run is stopped.",
    )
    poll_s: float = Field(
        default=DEFAULTS.poll_s,
        gt=0,
        le=3600,
        description="Seconds between ticks while idle or following: the trigger interval.",
    )


class BorrowConfig(dg.Config):
    """How a warm Borrower run waits for work."""

    idle_timeout_s: float | None = Field(
        default=None, description="Exit after this long without a lease to take; default: the group's borrower_idle_s."
    )
    poll_s: float = Field(default=1.0, gt=0, le=60, description="Seconds between looks for a waiting lease.")
    keep_warm: bool = Field(
        default=False,
        description="Never exit when idle: one of the group's warm_borrowers, which the Leader starts with this set.",
    )
    lead: bool = Field(
        default=True,
        description="With a free slot and nothing to take, run a Leader tick here when the source's head moved, so "
        "new snapshots become this run's leases within poll_s instead of at the Leader sensor's next tick. "
        "A scheduled group's Borrower never does: its schedule decides when it consumes.",
    )


def borrower_job(
    group: GroupConfig, sink_key: dg.AssetKey, source_key: dg.AssetKey, resources: Mapping[str, Any]
) -> dg.JobDefinition:
    """The Borrower run the Leader starts: one SparkSession, every lease it can take, until idle (or for good, if warm).

    The job carries its resource itself (``resources``: the one lakehouse resource, by key): a job
    Dagster has to bind resources to after the fact is copied with its sensor, and the copy warns
    about the sensor's ``owners``.
    """
    (key,) = resources

    @dg.op(name=borrow_op_name(group.name), tags={"kind": "spark"}, required_resource_keys={key})
    def borrow_op(context: dg.OpExecutionContext, config: BorrowConfig) -> None:
        """Take the leases the Leader granted and run them on one warm SparkSession, until idle or stopped."""
        icegroup = lakehouse_of(context.resources, key)
        lakehouse = icegroup.lakehouse()
        start_in_background(lakehouse)  # a Borrower runs leases now or keeps a session up: boot the JVM meanwhile
        record = recording(context, group, sink_key, lakehouse)
        with canceled_on_interrupt(context):
            summary = borrow(
                icegroup.spark,
                lakehouse,
                group,
                context.run_id,
                on_lease=record,
                progress=context.log.info,
                idle_timeout_s=None if config.keep_warm else idle_timeout(group, config),
                poll_s=config.poll_s,
                lead=leading(context, group, lakehouse, reported_in_run(context, group, sink_key, source_key))
                if config.lead and not group.schedule
                else None,
            )
        context.log.info(
            f"{group.name}: {summary.leases} leases, {summary.shards} shards, {summary.rows_in} rows in, "
            f"{summary.rows_out} rows out"
        )

    @dg.job(
        name=f"{group.name}_borrower",
        executor_def=ONE_PROCESS,
        resource_defs=dict(resources),
        tags={TAG_GROUP: group.name, TAG_ROLE: ROLE_BORROWER},
        description=f"Borrower of group {group.name}: takes the leases {group.name}_leader grants, until idle "
        "(a warm one, until stopped).",
    )
    def job() -> Any:
        borrow_op()

    return job


def leading(
    context: dg.OpExecutionContext, group: GroupConfig, lakehouse: LakehouseConfig, report: Callable[[TickResult], None]
) -> Callable[[str], bool]:
    """The Leader tick a Borrower runs itself (when the source moved, say), reported as the sensor's would be.

    It reports the windows the tick found complete, their audit and the source's version; the
    ``dead_letters`` and ``lag`` checks stay the sensor's. It ends the runs it revoked (never its
    own: fencing stops it, and it takes the next attempt itself) and starts none: the sensor starts
    Borrowers for what this one cannot take. A tick that loses the registry to another Leader
    changes nothing; one that fails, or whose report fails, is logged and leaves the rest to the
    sensor's next tick, and the Borrower goes on. It returns whether the tick left shards no lease
    holds (``ungranted``): the Borrower then ticks again once one of its leases ends.
    """

    def lead(why: str) -> bool:
        try:
            result = tick(lakehouse.catalog(), group, observe_runs(context.instance, group.name), pin_config=False)
        except RegistryConflict:
            return False  # another Leader ticked first: what it granted is taken at this Borrower's next look
        except Exception as exc:
            stopped = describe_error(exc)
            context.log.info(f"{group.name}: the Borrower's own tick stopped ({stopped}); the Leader sensor goes on")
            return False
        try:
            report(result)
            others = [lease for lease in result.terminate if lease.owner_run_id != context.run_id]
            for run_id in terminate_runs(context.instance, group.name, others):
                context.log.warning(
                    f"{group.name}: terminated run {run_id}: its Borrower went silent or ran past its deadline"
                )
        except Exception as exc:
            context.log.warning(f"{group.name}: the Borrower's own tick was not fully reported ({describe_error(exc)})")
        context.log.info(
            f"{group.name}: {why}; tick here in {result.elapsed_ms:.0f} ms: {result.new_shards} new shards, "
            f"{len(waiting(result.state))} leases waiting"
        )
        return ungranted(result.state)

    return lead


def idle_timeout(group: GroupConfig, config: BorrowConfig) -> float:
    """How long a Borrower run started for work waits for another lease: the run's own setting, else the group's."""
    return group.borrower_idle_s if config.idle_timeout_s is None else config.idle_timeout_s


def observation(
    group: GroupConfig, sink_key: dg.AssetKey, lease: Lease, report: LeaseReport, lakehouse: LakehouseConfig
) -> dg.AssetObservation:
    """The observation of the lease's sink partition: rows, bytes, duration and lag, plotted by the UI."""
    window = window_label(lease.window_start_ms, group.replay_window)
    lag = lag_of(lakehouse.catalog(), group, committed=report.committed)
    return dg.AssetObservation(
        asset_key=sink_key, partition=window, metadata=lease_metadata(group, report, lag, window)
    )


def consume_job(
    group: GroupConfig, sink_key: dg.AssetKey, source_key: dg.AssetKey, resources: Mapping[str, Any]
) -> dg.JobDefinition:
    """Leader and Borrower in one run, with one warm SparkSession: what `icegroup consume` runs.

    The session starts on a thread as the run begins when the source has data to consume, so the
    JVM boots while the run ticks; a run with nothing to do starts none.
    """
    (key,) = resources

    @dg.op(name=f"{group.name}_consume_op", tags={"kind": "spark"}, required_resource_keys={key})
    def consume_op(context: dg.OpExecutionContext, config: ConsumeConfig) -> None:
        """Tick and run the granted leases here until caught up; observe leases, materialize complete windows."""
        icegroup = lakehouse_of(context.resources, key)
        lakehouse = icegroup.lakehouse()
        if pending_work(lakehouse.catalog(), group) is Work.DATA:
            start_in_background(lakehouse)  # the JVM boots while the run ticks; a caught-up run starts none
        record = recording(context, group, sink_key, lakehouse)

        try:
            with canceled_on_interrupt(context):
                hooks = ConsumeHooks(
                    spark=icegroup.spark,
                    observe_others=observe_runs(context.instance, group.name),
                    progress=context.log.info,
                    on_lease=record,
                    on_tick=reported_in_run(context, group, sink_key, source_key),
                    terminate=lambda leases: terminate_runs(context.instance, group.name, leases),
                    on_follow=lambda report: followed(context, group, sink_key, lakehouse, report),
                )
                options = RunOptions(max_wait_s=config.max_wait_s, poll_s=config.poll_s, follow=config.follow)
                summary = consume(lakehouse, group, context.run_id, hooks, options, config.until_caught_up)
                context.log.info(
                    f"{group.name}: {summary.leases} leases, {summary.shards} shards, {summary.rows_in} rows in, "
                    f"{summary.rows_out} rows out; caught up: {summary.caught_up}"
                )
        finally:  # stopped, paused or caught up: the lag check says which, also when the run fails
            lag = lag_evaluation_now(lakehouse.catalog(), group, sink_key, context.log)
            if lag is not None:
                context.instance.report_runless_asset_event(lag)

    @dg.job(
        name=f"{group.name}_consume",
        executor_def=ONE_PROCESS,
        resource_defs=dict(resources),
        tags={TAG_GROUP: group.name},
        description=f"Consume group {group.name} until caught up, in one run.",
    )
    def job() -> Any:
        consume_op()

    return job


def recording(
    context: dg.OpExecutionContext, group: GroupConfig, sink_key: dg.AssetKey, lakehouse: LakehouseConfig
) -> Callable[[Lease, LeaseReport], None]:
    """Observe each lease that ended in this run on the sink asset: its rows, files, commits and timing."""

    def record(lease: Lease, report: LeaseReport) -> None:
        context.log_event(observation(group, sink_key, lease, report, lakehouse))

    return record


@contextmanager
def canceled_on_interrupt(context: dg.OpExecutionContext) -> Iterator[None]:
    """A run interrupted by a signal ends CANCELED, as one terminated from the UI does, not failed.

    Dagster raises SIGTERM and SIGINT inside the op as ``DagsterExecutionInterruptedError``; a run
    terminated from the UI is CANCELING by then, but one whose process got the signal directly
    (``kill -TERM`` of ``icegroup consume``, a pod shut down) is not, and Dagster would record it as a
    failure. The Leader re-grants a canceled run's leases at its next tick either way.
    """
    try:
        yield
    except dg.DagsterExecutionInterruptedError:
        run = context.instance.get_run_by_id(context.run_id)
        if run is not None and run.status not in (dg.DagsterRunStatus.CANCELING, dg.DagsterRunStatus.CANCELED):
            context.instance.report_run_canceling(
                run, message="Interrupted by a signal: stopping after the current shard."
            )
        raise


def followed(
    context: dg.OpExecutionContext,
    group: GroupConfig,
    sink_key: dg.AssetKey,
    lakehouse: LakehouseConfig,
    report: FollowReport,
) -> None:
    """Materialize each window a follow replayed, with its sink snapshot as the data version, then audit the sink."""
    for replayed in report.replays:
        tags = {DATA_VERSION_TAG: str(replayed.sink_snapshot)} if replayed.sink_snapshot else {}
        context.log_event(
            dg.AssetMaterialization(
                asset_key=sink_key,
                partition=replayed.window,
                description="Replayed to follow an upstream replay of the group's source.",
                metadata=replay_metadata(group, [replayed]),
                tags=tags,
            )
        )
    check = (
        exactly_once_evaluation(lambda: load_optional(lakehouse.catalog(), group.sink), group, sink_key, context.log)
        if report.replays
        else None
    )
    if check is not None:
        context.instance.report_runless_asset_event(check)


def follow_job(group: GroupConfig, sink_key: dg.AssetKey, resources: Mapping[str, Any]) -> dg.JobDefinition:
    """Follow the upstream replays of the group's source: what its Leader launches when ``follow_upstream`` is set.

    The run does what ``icegroup replay GROUP --follow-upstream --execute`` does (``spark_jobs/follow.py``)
    and materializes each window it replayed, with the replayed sink snapshot as the data version.
    """
    (key,) = resources

    @dg.op(name=f"{group.name}_follow_op", tags={"kind": "spark"}, required_resource_keys={key})
    def follow_op(context: dg.OpExecutionContext) -> None:
        """Replay the group's windows that consumed rows an upstream replay replaced, then record them followed."""
        icegroup = lakehouse_of(context.resources, key)
        lakehouse = icegroup.lakehouse()
        report = follow_upstream(icegroup.spark(), lakehouse, group, context.run_id, context.log.info)
        if not report.followed:  # the Leader then stops at the replay, naming the command that follows it
            waiting = "; ".join(report.waiting)
            raise dg.Failure(f"group {group.name}: no upstream replay could be followed yet: {waiting}")
        followed(context, group, sink_key, lakehouse, report)

    @dg.job(
        name=f"{group.name}_follow",
        executor_def=ONE_PROCESS,
        resource_defs=dict(resources),
        tags={TAG_GROUP: group.name},
        description=f"Follow the replays of {group.source} upstream: replay the windows of {group.name} they replaced.",
    )
    def job() -> Any:
        follow_op()

    return job


class ExpireConfig(dg.Config):
    """How much of their own history the groups' state tables keep (sources and sinks keep what groups need)."""

    keep_state: int = Field(
        default=StateRetention.keep_last,
        ge=1,
        description="Snapshots each registry, lineage and dead-letter table keeps at least.",
    )
    keep_state_for: str = Field(default="7d", description="And the ones younger than this: 12h, 7d, P1D.")


def expire_job(groups: dict[str, GroupConfig], resources: Mapping[str, Any]) -> dg.JobDefinition:
    """The job ``icegroup expire`` is, for the schedule and for launching from the UI.

    Named after the resource key (``icegroup_expire`` in the packaged location), so each icegroup
    component in a project has its own.
    """
    (key,) = resources

    @dg.op(name=f"{key}_expire_op", required_resource_keys={key})
    def expire_op(context: dg.OpExecutionContext, config: ExpireConfig) -> None:
        """Expire the snapshots no group needs; log each table's verdict and what holds what it keeps."""
        icegroup = lakehouse_of(context.resources, key)
        keep = StateRetention(config.keep_state, parse_duration(config.keep_state_for))
        plans = expire_run(icegroup.lakehouse(), groups, keep, execute=True)
        for plan in plans:
            row = plan.row()
            context.log.info(
                f"{row['table']} ({row['roles']}): expired {row['expire']} + {row['staged_expire']} staged, "
                f"kept {row['keep']}, held by {row['held_by']}: {row['status']}"
            )
        failed = [p.table for p in plans if p.error]
        if failed:
            raise dg.Failure(f"expiry of {', '.join(failed)} lost a race with another commit; it runs again next time")

    @dg.job(
        name=f"{key}_expire",
        executor_def=ONE_PROCESS,
        resource_defs=dict(resources),
        description="Expire snapshots of the groups' sources, sinks and state tables that no group needs.",
    )
    def job() -> Any:
        expire_op()

    return job
