"""Asset checks on each sink: exactly once per window, keeping up with the source, and no shard stopped by poison.

Dagster shows a check's latest result on the asset and in its Checks tab, and a failed one in the
asset graph. Each check runs on demand from the UI (``Execute``), in each run of the group's
replay job (``icegroup replay``: the job selects the asset's checks) and of a UI backfill of the
sink, and is also reported as the group goes: ``exactly_once`` whenever the Leader or a consume run
finds windows complete, so the sink is judged whenever a window's output becomes final; ``lag`` by
the Leader whenever its verdict moves
(``iceberg/protocol/freshness.py``: stopped, paused, past a bound, or back) and at the end of each
consume run; ``dead_letters`` by the Leader whenever the group's poison shards change.

``exactly_once`` judges the whole sink, every window, not the partition just written: its latest
result is then the sink's state, and a window that failed stays failed in it until it is replayed.
(Dagster 1.13 cannot run a partitioned check on its own, so a per-partition check could not be run
on demand.)
"""

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

import dagster as dg
from pyiceberg.catalog import Catalog
from pyiceberg.table import Table

from icegroup.dagster_project.resources import lakehouse_of
from icegroup.iceberg.describe import describe_group
from icegroup.iceberg.leader import TickResult
from icegroup.iceberg.protocol.dead_letters import STOPPED, DeadLetter
from icegroup.iceberg.protocol.durations import format_duration
from icegroup.iceberg.protocol.freshness import LagVerdict, judge_lag
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.status import status_of
from icegroup.iceberg.protocol.window_audit import SinkAudit
from icegroup.iceberg.store.dead_letters import open_letters
from icegroup.iceberg.window_audit import audit_sink, audit_table

EXACTLY_ONCE = "exactly_once"
LAG = "lag"
DEAD_LETTERS = "dead_letters"


def audit_verdict(audit: SinkAudit) -> dict[str, Any]:
    """A sink audit as a check's verdict: passed, why (each failing window with its remedy), and numbers to plot."""
    return {
        "passed": audit.ok,
        "severity": dg.AssetCheckSeverity.ERROR,
        "description": audit.describe(),
        "metadata": {
            "windows": dg.MetadataValue.int(len(audit.windows)),
            "rows": dg.MetadataValue.int(audit.rows),
            "failing_windows": dg.MetadataValue.json([window.window for window in audit.failing()]),
            "problems": dg.MetadataValue.json({w.window: w.problems for w in audit.failing()}),
        },
    }


def lag_check_verdict(verdict: LagVerdict) -> dict[str, Any]:
    """The lag verdict as a check's: a warning or an error, why, and the age to plot."""
    return {
        "passed": verdict.passed,
        "severity": dg.AssetCheckSeverity.ERROR if verdict.severity == "error" else dg.AssetCheckSeverity.WARN,
        "description": verdict.description,
        "metadata": {} if verdict.age_s is None else {"lag_age_s": dg.MetadataValue.float(round(verdict.age_s, 1))},
    }


def lag_evaluation(sink_key: dg.AssetKey, verdict: LagVerdict) -> dg.AssetCheckEvaluation:
    """The ``lag`` result, as an event the Leader or a consume run reports."""
    return dg.AssetCheckEvaluation(asset_key=sink_key, check_name=LAG, **lag_check_verdict(verdict))


def tick_lag(group: GroupConfig, result: TickResult, letters: list[DeadLetter]) -> LagVerdict:
    """The lag check's verdict after a tick, from the status ``icegroup describe`` would show and the lag's age."""
    oldest = result.oldest_unconsumed_ms
    status = status_of(result.state, {d.shard_id: d for d in letters}, int(oldest is not None), result.blocked)
    age_s = None if oldest is None else max(0.0, time.time() - oldest / 1000)
    return judge_lag(group, status, age_s, None)


def lag_now(catalog: Catalog, group: GroupConfig) -> LagVerdict:
    """The lag verdict from the group as ``icegroup describe`` sees it now."""
    view = describe_group(catalog, group)
    return judge_lag(group, view.status, view.lag_age_s, view.lag_rows)


def lag_evaluation_now(
    catalog: Catalog, group: GroupConfig, sink_key: dg.AssetKey, log: logging.Logger | dg.DagsterLogManager
) -> dg.AssetCheckEvaluation | None:
    """The ``lag`` result now, as a run reports it at its end; a failure to judge is logged, not raised."""
    try:
        return lag_evaluation(sink_key, lag_now(catalog, group))
    except Exception:  # a report must not fail the run that consumed
        log.exception(f"{group.name}: the lag check could not describe the group; `Execute` the check to retry")
        return None


def dead_letter_verdict(group: GroupConfig, letters: Iterable[DeadLetter]) -> dict[str, Any]:
    """Failed while a shard is poison: an error if it stopped the group, a warning if only its stream is parked."""
    shards = sorted(letter.shard_id for letter in letters)
    stopped = sorted(letter.shard_id for letter in letters if letter.action == STOPPED)
    redrive = f"fix the transform or the data, then run `icegroup redrive {group.name} --execute`"
    if stopped:
        description = f"group {group.name} is stopped by {len(stopped)} poison shards; {redrive}"
    elif shards:
        description = f"{len(shards)} poison shards of group {group.name} are parked, their streams wait; {redrive}"
    else:
        description = f"no poison shard in group {group.name}"
    return {
        "passed": not shards,
        "severity": dg.AssetCheckSeverity.ERROR if stopped else dg.AssetCheckSeverity.WARN,
        "description": description,
        "metadata": {
            "stopped": dg.MetadataValue.int(len(stopped)),
            "parked": dg.MetadataValue.int(len(shards) - len(stopped)),
            "shards": dg.MetadataValue.json(shards),
        },
    }


def exactly_once_evaluation(
    read_sink: Callable[[], Table | None],
    group: GroupConfig,
    sink_key: dg.AssetKey,
    log: logging.Logger | dg.DagsterLogManager,
) -> dg.AssetCheckEvaluation | None:
    """The ``exactly_once`` result of the sink ``read_sink`` gives, as an event reported once a window is final.

    The audit only reports: if it fails to read the sink, that is logged and nothing is reported, so
    the tick's own events (the windows it completed, reported once) and the run still stand.
    """
    try:
        audit = audit_table(read_sink(), group)
    except Exception:  # any failure of a report must not cost the tick or the run that made it
        log.exception(f"{group.name}: the exactly_once audit of {group.sink} failed; `Execute` the check to retry")
        return None
    return dg.AssetCheckEvaluation(asset_key=sink_key, check_name=EXACTLY_ONCE, **audit_verdict(audit))


def dead_letter_evaluation(
    group: GroupConfig, sink_key: dg.AssetKey, letters: Iterable[DeadLetter]
) -> dg.AssetCheckEvaluation:
    """The ``dead_letters`` result, as an event the Leader reports when the group's poison shards change."""
    return dg.AssetCheckEvaluation(asset_key=sink_key, check_name=DEAD_LETTERS, **dead_letter_verdict(group, letters))


def sink_checks(group: GroupConfig, sink_key: dg.AssetKey, resource_key: str) -> list[dg.AssetChecksDefinition]:
    """The checks of one group's sink, as the UI runs them on demand."""

    @dg.asset_check(
        asset=sink_key,
        name=EXACTLY_ONCE,
        required_resource_keys={resource_key},
        description=(
            f"In every window of the sink, each commit of group {group.name} holds all the rows it added, no row "
            "was written or deleted outside icegroup, and no shard was committed twice; read from the sink's "
            "metadata alone. A failure names each window and the replay that writes it again."
        ),
    )
    def exactly_once(context: dg.AssetCheckExecutionContext) -> dg.AssetCheckResult:
        """Audit every window of the sink."""
        catalog = lakehouse_of(context.resources, resource_key).catalog()
        return dg.AssetCheckResult(**audit_verdict(audit_sink(catalog, group)))

    @dg.asset_check(
        asset=sink_key,
        name=DEAD_LETTERS,
        required_resource_keys={resource_key},
        description=f"No shard of group {group.name} is in its dead-letter table: an error while one stops the group.",
    )
    def dead_letters(context: dg.AssetCheckExecutionContext) -> dg.AssetCheckResult:
        """Read the group's open dead letters."""
        catalog = lakehouse_of(context.resources, resource_key).catalog()
        return dg.AssetCheckResult(**dead_letter_verdict(group, open_letters(catalog, group.name).values()))

    @dg.asset_check(
        asset=sink_key,
        name=LAG,
        required_resource_keys={resource_key},
        description=(
            f"Group {group.name} keeps up with {group.source}: a warning once the oldest source commit it has not "
            f"consumed is older than {format_duration(group.lag_warn_after)} (lag_warn_after), an error past "
            f"{format_duration(group.lag_error_after)} (lag_error_after); an error at once while the group is stopped "
            "(poison, an upstream replay), a warning while it is paused, each naming the command that moves it on."
        ),
    )
    def lag(context: dg.AssetCheckExecutionContext) -> dg.AssetCheckResult:
        """Describe the group and judge its lag."""
        catalog = lakehouse_of(context.resources, resource_key).catalog()
        return dg.AssetCheckResult(**lag_check_verdict(lag_now(catalog, group)))

    return [exactly_once, lag, dead_letters]
