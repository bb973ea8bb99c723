"""The Leader: one sensor per group, running one registry-CAS tick per evaluation, and starting warm Borrowers."""

import math
import sys
import time

import dagster as dg

from icegroup.dagster_project.resources import lakehouse_of
from icegroup.dagster_project.runs.observer import UNFINISHED, borrower_runs, end_runs, observe_runs, terminate_runs
from icegroup.dagster_project.runs.tags import TAG_FOLLOWS, TAG_GROUP, TAG_WARM
from icegroup.dagster_project.runs.warm import borrower_tags, warm_run_config
from icegroup.dagster_project.tick_events import LeaderCursor, leader_events, stopped_events
from icegroup.iceberg.errors import RegistryConflict, ResetInFlight, SourceBlocked
from icegroup.iceberg.leader import TickResult, tick
from icegroup.iceberg.protocol.borrower import Starts, borrowers_to_start, census, stale, starts, waiting
from icegroup.iceberg.protocol.group import GroupConfig

DAEMON_LOOP_S = 5
"""How often Dagster's sensor daemon evaluates sensors: ``MIN_INTERVAL_LOOP_TIME`` in ``dagster/_daemon/sensor.py``."""


def follow_replay(
    context: dg.SensorEvaluationContext, group: GroupConfig, follow: dg.JobDefinition, stop: SourceBlocked
) -> dg.SensorResult | dg.SkipReason | None:
    """Follow an upstream replay the group stopped at, once: a run of ``follow`` for it, or the one already running.

    None when the group stops there after all: the stop is not a replay, or the run that followed it
    failed (its error is in the run; the stop names the command that follows it by hand).
    """
    if not stop.followable or stop.snapshot_id is None:
        return None
    tags = {TAG_GROUP: group.name, TAG_FOLLOWS: str(stop.snapshot_id)}
    runs = context.instance.get_runs(filters=dg.RunsFilter(job_name=follow.name, tags=tags), limit=1)
    if not runs:
        context.log.info(f"{group.name}: {stop.status()}; following it (follow_upstream)")
        return dg.SensorResult(run_requests=[dg.RunRequest(job_name=follow.name, tags=tags)])
    if not runs[0].is_finished:
        return dg.SkipReason(f"{group.name}: following the upstream replay {stop.snapshot_id} in run {runs[0].run_id}")
    context.log.error(f"{group.name}: run {runs[0].run_id} did not follow the upstream replay ({runs[0].status.value})")
    return None


def minimum_interval_s(sensor_interval_s: int) -> int:
    """The ``minimum_interval_seconds`` that ticks the Leader every ``sensor_interval_s``, in whole daemon loops.

    The daemon evaluates sensors once per loop of ``DAEMON_LOOP_S`` and skips a sensor whose last
    tick began less than its minimum interval ago. A tick begins a moment after its loop does, so a
    minimum interval of exactly one loop is short by a fraction of a second at the next loop about
    as often as not: the sensor asked for 5 s ticked every 10 s (measured in ``bench_latency``, p50
    5.3 s, spread up to 10.9 s). So the interval is rounded up to whole loops, less two seconds
    of slack either way for that jitter.
    """
    loops = max(1, math.ceil(sensor_interval_s / DAEMON_LOOP_S))
    return loops * DAEMON_LOOP_S - 2


def borrower_requests(
    context: dg.SensorEvaluationContext, group: GroupConfig, result: TickResult, job_name: str, code: str
) -> list[dg.RunRequest]:
    """Start Borrower runs of ``job_name`` for waiting leases no live Borrower has a free slot for, and warm ones.

    Borrower runs that a ``kill -9`` left looking alive (silent past the session timeout, or whose
    process the Leader sees ended on its own machine) are ended first, so they neither count as live
    nor show as running in the UI; so are warm runs launched with other code than ``code``. Then
    enough runs start to keep ``warm_borrowers`` up (none while the group is paused), each with
    its Spark session started and no idle exit.
    """
    runs = borrower_runs(context.instance, group.name)
    ended = end_runs(context.instance, stale(runs, code), "its code or settings are older than the Leader's")
    for run_id in ended:
        context.log.info(f"{group.name}: ended warm Borrower run {run_id}: launched before the code location changed")
    runs = [run for run in runs if run.run_id not in ended]
    now_ms = int(time.time() * 1000)
    found = census(
        runs, result.state, result.beats, now_ms, group.session_timeout_s, group.leases_per_borrower, result.gone
    )
    for run_id in end_runs(context.instance, found.silent, "the Borrower's process ended or stopped beating"):
        why = "its process ended" if run_id in result.gone else "no heartbeat for over a session timeout"
        context.log.warning(f"{group.name}: ended Borrower run {run_id}: {why}")
    for_work = borrowers_to_start(len(waiting(result.state)), found, group.leases_per_borrower, group.max_borrowers)
    planned = starts(for_work, found, 0 if result.paused else group.warm_borrowers, group.max_borrowers)
    room = warm_room(context.instance) if planned.warm else 0  # the run storage is read only when one would start
    if planned.warm > room:
        context.log.warning(
            f"{group.name}: {planned.warm - room} warm Borrower runs not started: warm runs would take more than half "
            "of the run queue's max_concurrent_runs, and runs for work, replays and consumes would wait behind them; "
            "raise max_concurrent_runs in dagster.yaml, or lower warm_borrowers"
        )
        planned = Starts(warm=room, for_work=min(planned.for_work + planned.warm - room, for_work))
    warm = [
        dg.RunRequest(
            job_name=job_name, tags=borrower_tags(group.name, code, warm=True), run_config=warm_run_config(group.name)
        )
        for _ in range(planned.warm)
    ]
    cold = [dg.RunRequest(job_name=job_name, tags=borrower_tags(group.name, code, warm=False))] * planned.for_work
    return warm + cold


def warm_room(instance: dg.DagsterInstance) -> int:
    """Warm Borrower runs that may still start, every group's counted: up to half the run queue's slots.

    A warm run holds its slot for good. Were warm runs to fill the queue, a run started for work
    (or a replay, a consume) would wait behind them, and with it its group's leases, for ever. An
    instance with no queue limit has room for any number.
    """
    queue = instance.get_concurrency_config().run_queue_config
    limit = queue.max_concurrent_runs if queue is not None else -1
    if limit is None or limit < 0:
        return sys.maxsize
    up = instance.get_runs_count(filters=dg.RunsFilter(tags={TAG_WARM: "1"}, statuses=UNFINISHED))
    return max(0, limit // 2 - up)


def leader_sensor(
    group: GroupConfig,
    job: dg.JobDefinition,
    sink_key: dg.AssetKey,
    source_key: dg.AssetKey,
    resource_key: str,
    follow: dg.JobDefinition | None,
    code: str,
) -> dg.SensorDefinition:
    """The group's Leader: reconcile, re-grant dead leases, cut shards, grant leases, start warm Borrowers.

    It also materializes the sink's partition of each window that became complete, with that
    window's ``exactly_once`` check; reports the ``dead_letters`` check whenever the group's poison
    shards change; and observes the source's version (its snapshot id) whenever it moved
    (``LeaderCursor``). A group stopped by a poison shard or at an upstream replay skips, saying so
    and naming the command that moves it on: a state of the group, not a failed tick; the ``lag``
    check fails with it. With ``follow_upstream`` it starts a run of ``follow`` at an upstream
    replay instead (``follow_replay``).
    """

    @dg.sensor(
        name=f"{group.name}_leader",
        jobs=[job] if follow is None else [job, follow],
        minimum_interval_seconds=minimum_interval_s(group.sensor_interval_s),
        required_resource_keys={resource_key},
        default_status=dg.DefaultSensorStatus.RUNNING,
        description=f"Leader of consumer group {group.name}: cuts shards of {group.source}, grants leases, and "
        f"keeps {group.warm_borrowers} warm Borrower runs up, up to {group.max_borrowers} with work.",
    )
    def leader(context: dg.SensorEvaluationContext, **_called_with: object) -> dg.SensorResult | dg.SkipReason:
        # A sensor called directly (tests, ``build_sensor_context``) is also handed its resources by keyword.
        catalog = lakehouse_of(context.resources, resource_key).catalog()
        try:
            result = tick(catalog, group, observe_runs(context.instance, group.name))
        except ResetInFlight as exc:
            context.log.info(f"{group.name}: waiting for a reset: {exc}")
            return dg.SkipReason(str(exc))
        except RegistryConflict as exc:
            context.log.info(f"{group.name}: backing off: {exc}")
            return dg.SkipReason(f"another Leader or a Borrower committed first: {exc}")
        except SourceBlocked as exc:  # a state of the group, shown until it is followed or skipped; not a failed tick
            following = follow_replay(context, group, follow, exc) if follow is not None else None
            if following is not None:
                return following
            context.log.warning(str(exc))
            stopped = stopped_events(group, sink_key, exc, LeaderCursor.read(context.cursor))
            if not stopped.events:
                return dg.SkipReason(f"{group.name}: {exc.status()}")
            keep_cursor(context, stopped.cursor)
            return dg.SensorResult(asset_events=stopped.events, skip_reason=f"{group.name}: {exc.status()}")
        for run_id in terminate_runs(context.instance, group.name, result.terminate):
            context.log.warning(
                f"{group.name}: terminated run {run_id}: its Borrower went silent or ran past its deadline"
            )
        for letter in result.parked:
            context.log.warning(f"{group.name}: shard {letter.shard_id} is parked: {letter.error}")
        shown = leader_events(group, sink_key, source_key, result, LeaderCursor.read(context.cursor), context.log)
        keep_cursor(context, shown.cursor)
        if result.stopped:
            context.log.error(result.stop_message())  # the dead_letters check fails with it, in the asset graph
            return dg.SensorResult(asset_events=shown.events, skip_reason=f"{group.name}: {result.stop_message()}")
        requests = borrower_requests(context, group, result, job.name, code)
        context.log.info(
            f"{group.name}: tick in {result.elapsed_ms:.0f} ms: {result.new_shards} new shards, "
            f"{len(result.committed)} committed, {result.regranted} re-granted, "
            f"{len(waiting(result.state))} waiting for a Borrower, {len(requests)} Borrower runs to start"
        )
        if requests:
            return dg.SensorResult(run_requests=requests, asset_events=shown.events)
        reason = idle_reason(group, result)
        return dg.SensorResult(asset_events=shown.events, skip_reason=reason) if shown.events else dg.SkipReason(reason)

    return leader


def keep_cursor(context: dg.SensorEvaluationContext, cursor: LeaderCursor) -> None:
    """Store what this evaluation reported, when it differs from what the last one did."""
    if cursor != LeaderCursor.read(context.cursor):
        context.update_cursor(cursor.write())


def idle_reason(group: GroupConfig, result: TickResult) -> str:
    """Why a tick that started no Borrower launched nothing: paused, caught up, or leases still in flight."""
    if result.paused and not result.launch:
        reason = f"{group.name}: {result.pause_message()}"
    elif result.caught_up:
        reason = f"{group.name}: caught up"
    else:
        reason = f"{group.name}: {len(result.state.leases)} leases in flight, no Borrower to start"
    if result.blocked is not None:
        reason += f"; {result.blocked.ahead()}"
    return reason
