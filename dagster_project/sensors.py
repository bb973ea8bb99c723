"""The Leader: one sensor per group, running one registry-CAS tick per evaluation, and starting warm Borrowers."""

import json
import math
import time
from dataclasses import asdict, dataclass, replace

import dagster as dg

from icegroup.dagster_project.assets import complete_events, source_observation
from icegroup.dagster_project.checks import dead_letter_evaluation, exactly_once_evaluation, lag_evaluation
from icegroup.dagster_project.resources import lakehouse_of
from icegroup.dagster_project.runs.observer import borrower_runs, end_runs, observe_runs, terminate_runs
from icegroup.dagster_project.runs.tags import ROLE_BORROWER, TAG_FOLLOWS, TAG_GROUP, TAG_ROLE
from icegroup.iceberg.describe import status_of
from icegroup.iceberg.errors import RegistryConflict, ResetInFlight, SourceBlocked
from icegroup.iceberg.leader import TickResult, tick
from icegroup.iceberg.protocol.borrower import borrowers_to_start, census, waiting
from icegroup.iceberg.protocol.dead_letters import DeadLetter
from icegroup.iceberg.protocol.freshness import LagVerdict, judge_lag
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.store.tables import load_optional

DAEMON_LOOP_S = 5
"""How often Dagster's sensor daemon evaluates sensors: ``MIN_INTERVAL_LOOP_TIME`` in ``dagster/_daemon/sensor.py``."""


@dataclass(frozen=True)
class LeaderCursor:
    """What the Leader sensor last reported: the source head it observed, and the poison shards it checked.

    Kept in the sensor's cursor so each is reported when it changes, not at every tick; ``poison``
    is None until the first report. A cursor written before the poison shards were kept in it is
    the source head alone. ``tick_ms`` is how long the last tick took, for ``icegroup metrics``;
    ``lag`` the lag check's last verdict (``LagVerdict.key``), reported again when it moves.
    """

    head: str = ""
    poison: str | None = None
    tick_ms: float | None = None
    lag: str | None = None

    @classmethod
    def read(cls, text: str | None) -> "LeaderCursor":
        """The cursor as the last evaluation wrote it (nothing yet: the empty cursor)."""
        if not text:
            return cls()
        if not text.startswith("{"):
            return cls(head=text)
        return cls(**json.loads(text))

    def write(self) -> str:
        """The cursor as the sensor stores it."""
        return json.dumps(asdict(self))


def tick_lag(group: GroupConfig, result: TickResult, letters: list[DeadLetter]) -> LagVerdict:
    """The lag check's verdict after a tick, from the status ``icegroup describe`` would show and the lag's age."""
    oldest = result.oldest_unconsumed_ms
    status = status_of(result.state, {d.shard_id: d for d in letters}, int(oldest is not None), result.blocked)
    age_s = None if oldest is None else max(0.0, time.time() - oldest / 1000)
    return judge_lag(group, status, age_s, None)


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
    context: dg.SensorEvaluationContext, group: GroupConfig, result: TickResult, job_name: str
) -> list[dg.RunRequest]:
    """Start Borrower runs of ``job_name`` only for waiting leases that no live Borrower has a free slot for.

    Borrower runs that a ``kill -9`` left looking alive (silent past the session timeout, or whose
    process the Leader sees ended on its own machine) are ended first, so they neither count as live
    nor show as running in the UI.
    """
    runs = borrower_runs(context.instance, group.name)
    now_ms = int(time.time() * 1000)
    found = census(
        runs, result.state, result.beats, now_ms, group.session_timeout_s, group.leases_per_borrower, result.gone
    )
    for run_id in end_runs(context.instance, found.silent, "the Borrower's process ended or stopped beating"):
        why = "its process ended" if run_id in result.gone else "no heartbeat for over a session timeout"
        context.log.warning(f"{group.name}: ended Borrower run {run_id}: {why}")
    starts = borrowers_to_start(len(waiting(result.state)), found, group.leases_per_borrower, group.max_borrowers)
    tags = {TAG_GROUP: group.name, TAG_ROLE: ROLE_BORROWER}
    return [dg.RunRequest(job_name=job_name, tags=tags) for _ in range(starts)]


def leader_sensor(
    group: GroupConfig,
    job: dg.JobDefinition,
    sink_key: dg.AssetKey,
    source_key: dg.AssetKey,
    resource_key: str,
    follow: dg.JobDefinition | None = None,
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
        f"keeps up to {group.max_borrowers} warm Borrower runs taking them.",
    )
    def leader(context: dg.SensorEvaluationContext, **_called_with: object) -> dg.SensorResult | dg.SkipReason:
        # A sensor called directly (tests, ``build_sensor_context``) is also handed its resources by keyword.
        icegroup = lakehouse_of(context.resources, resource_key)
        catalog = icegroup.catalog()
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
            before = LeaderCursor.read(context.cursor)
            stopped = judge_lag(group, exc.status(), None, None)
            if stopped.key == before.lag:
                return dg.SkipReason(f"{group.name}: {exc.status()}")
            context.update_cursor(replace(before, lag=stopped.key).write())
            return dg.SensorResult(
                asset_events=[lag_evaluation(sink_key, stopped)], skip_reason=f"{group.name}: {exc.status()}"
            )
        for run_id in terminate_runs(context.instance, group.name, result.terminate):
            context.log.warning(
                f"{group.name}: terminated run {run_id}: its Borrower went silent or ran past its deadline"
            )
        for letter in result.parked:
            context.log.warning(f"{group.name}: shard {letter.shard_id} is parked: {letter.error}")
        cursor = LeaderCursor.read(context.cursor)
        sink = load_optional(catalog, group.sink) if result.complete else None  # shown on each window completed
        events: list[dg.AssetMaterialization | dg.AssetObservation | dg.AssetCheckEvaluation] = [
            *complete_events(group, sink_key, source_key, result.complete, result.provenance, sink),
        ]
        audit = exactly_once_evaluation(catalog, group, sink_key, context.log) if result.provenance else None
        if audit is not None:  # windows with output became final: the sink judged as it is now
            events.append(audit)
        letters = [*result.stopped, *result.parked]
        poison = ",".join(sorted(f"{letter.shard_id}:{letter.action}" for letter in letters))
        if poison != cursor.poison:
            events.append(dead_letter_evaluation(group, sink_key, letters))
        if result.source_head is not None and str(result.source_head) != cursor.head:
            events.append(source_observation(source_key, result.source_head, catalog.load_table(group.source)))
        lag = tick_lag(group, result, letters)
        if lag.key != cursor.lag:
            events.append(lag_evaluation(sink_key, lag))
        head = str(result.source_head) if result.source_head is not None else cursor.head
        now = LeaderCursor(head=head, poison=poison, tick_ms=round(result.elapsed_ms, 1), lag=lag.key)
        if now != cursor:
            context.update_cursor(now.write())
        if result.stopped:
            context.log.error(result.stop_message())  # the dead_letters check fails with it, in the asset graph
            return dg.SensorResult(asset_events=events, skip_reason=f"{group.name}: {result.stop_message()}")
        requests = borrower_requests(context, group, result, job.name)
        context.log.info(
            f"{group.name}: tick in {result.elapsed_ms:.0f} ms: {result.new_shards} new shards, "
            f"{len(result.committed)} committed, {result.regranted} re-granted, "
            f"{len(waiting(result.state))} waiting for a Borrower, {len(requests)} Borrower runs to start"
        )
        if requests:
            return dg.SensorResult(run_requests=requests, asset_events=events)
        if result.paused and not result.launch:
            reason = f"{group.name}: {result.pause_message()}"
        elif result.caught_up:
            reason = f"{group.name}: caught up"
        else:
            reason = f"{group.name}: {len(result.state.leases)} leases in flight, no Borrower to start"
        if result.blocked is not None:
            reason += f"; {result.blocked.ahead()}"
        return dg.SensorResult(asset_events=events, skip_reason=reason) if events else dg.SkipReason(reason)

    return leader
