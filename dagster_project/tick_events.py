"""What a Leader tick shows in Dagster, built in one place from the tables the tick already read.

After a tick, the Leader sensor (``sensors.py``), a consume run and a Borrower run that ticked itself
(``jobs.py``) report the windows it found complete (a materialization of each sink partition, with
its provenance), the sink's ``exactly_once`` audit when a window's output became final, and the
source's version when it moved.
The sensor also reports the ``dead_letters`` and ``lag`` checks when they change, and keeps what it
reported in its cursor (``LeaderCursor``). Everything is read from the tick's own tables
(``TickResult.tables``), so reporting opens no table again: the windows, their data version, the
audit and the source's version describe the tables as the tick left them.
"""

import json
import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace

import dagster as dg

from icegroup.dagster_project.assets import complete_events, source_observation
from icegroup.dagster_project.checks import dead_letter_evaluation, exactly_once_evaluation, lag_evaluation, tick_lag
from icegroup.iceberg.errors import SourceBlocked
from icegroup.iceberg.leader import TickResult
from icegroup.iceberg.protocol.freshness import judge_lag
from icegroup.iceberg.protocol.group import GroupConfig

Event = dg.AssetMaterialization | dg.AssetObservation | dg.AssetCheckEvaluation


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


@dataclass(frozen=True)
class Shown:
    """The events one sensor evaluation reports, and the cursor that remembers them."""

    events: list[Event]
    cursor: LeaderCursor


def completion_events(
    group: GroupConfig,
    sink_key: dg.AssetKey,
    source_key: dg.AssetKey,
    result: TickResult,
    log: logging.Logger | dg.DagsterLogManager,
) -> list[Event]:
    """The windows the tick found complete, and the sink's ``exactly_once`` audit once one of them has output.

    The audit judges the sink as the tick left it: the windows reported complete were found so in
    its history, so a Borrower's commit since cannot make the two disagree.
    """
    sink = result.tables.sink if result.tables is not None else None
    events: list[Event] = [
        *complete_events(group, sink_key, source_key, result.complete, result.provenance, sink),
    ]
    audit = exactly_once_evaluation(lambda: sink, group, sink_key, log) if result.provenance and sink else None
    if audit is not None:
        events.append(audit)
    return events


def source_event(source_key: dg.AssetKey, result: TickResult) -> dg.AssetObservation | None:
    """The source's version as the tick saw it, with its table metadata; None for a source with no snapshot."""
    if result.source_head is None:
        return None
    source = result.tables.source if result.tables is not None else None
    return source_observation(source_key, result.source_head, source)


def reported_in_run(
    context: dg.OpExecutionContext, group: GroupConfig, sink_key: dg.AssetKey, source_key: dg.AssetKey
) -> Callable[[TickResult], None]:
    """Report, from inside a run, what each tick it runs found: complete windows, their audit, and the source's version.

    A consume run and a warm Borrower that ticks itself report what the Leader sensor would have:
    each window completes in one tick only, so whichever tick found it reports it. The audit is
    reported on the instance, as the sensor's is; the source's version once per head this run saw.
    """
    observed: dict[str, int | None] = {"head": None}

    def report(result: TickResult) -> None:
        for event in completion_events(group, sink_key, source_key, result, context.log):
            if isinstance(event, dg.AssetCheckEvaluation):
                context.instance.report_runless_asset_event(event)
            else:
                context.log_event(event)
        observed_now = source_event(source_key, result) if result.source_head != observed["head"] else None
        if observed_now is not None:
            context.log_event(observed_now)
            observed["head"] = result.source_head

    return report


def leader_events(
    group: GroupConfig,
    sink_key: dg.AssetKey,
    source_key: dg.AssetKey,
    result: TickResult,
    cursor: LeaderCursor,
    log: logging.Logger | dg.DagsterLogManager,
) -> Shown:
    """Everything a Leader tick reports: what completed, and each check and the source's version that moved."""
    events = completion_events(group, sink_key, source_key, result, log)
    letters = [*result.stopped, *result.parked]
    poison = ",".join(sorted(f"{letter.shard_id}:{letter.action}" for letter in letters))
    if poison != cursor.poison:
        events.append(dead_letter_evaluation(group, sink_key, letters))
    observed = source_event(source_key, result) if str(result.source_head) != cursor.head else None
    if observed is not None:
        events.append(observed)
    lag = tick_lag(group, result, letters)
    if lag.key != cursor.lag:
        events.append(lag_evaluation(sink_key, lag))
    head = str(result.source_head) if result.source_head is not None else cursor.head
    return Shown(events, LeaderCursor(head=head, poison=poison, tick_ms=round(result.elapsed_ms, 1), lag=lag.key))


def stopped_events(group: GroupConfig, sink_key: dg.AssetKey, stop: SourceBlocked, cursor: LeaderCursor) -> Shown:
    """What a Leader stopped at the source reports: the ``lag`` check failing with it, once."""
    stopped = judge_lag(group, stop.status(), None, None)
    if stopped.key == cursor.lag:
        return Shown([], cursor)
    return Shown([lag_evaluation(sink_key, stopped)], replace(cursor, lag=stopped.key))
