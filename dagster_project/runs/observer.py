"""Liveness from the Dagster instance: map a lease to the state of the run that holds it."""

from __future__ import annotations

from collections.abc import Iterable

import dagster as dg

from icegroup.dagster_project.runs.tags import ROLE_BORROWER, TAG_CODE, TAG_GROUP, TAG_ROLE, TAG_WARM
from icegroup.iceberg.leader import RunObserver
from icegroup.iceberg.protocol.borrower import BorrowerRun
from icegroup.iceberg.protocol.liveness import RunState
from icegroup.iceberg.protocol.state import Lease

STATES = {
    dg.DagsterRunStatus.QUEUED: RunState.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED: RunState.QUEUED,
    dg.DagsterRunStatus.STARTING: RunState.QUEUED,
    dg.DagsterRunStatus.MANAGED: RunState.RUNNING,
    dg.DagsterRunStatus.STARTED: RunState.RUNNING,
    dg.DagsterRunStatus.CANCELING: RunState.RUNNING,
    dg.DagsterRunStatus.SUCCESS: RunState.SUCCEEDED,
    dg.DagsterRunStatus.FAILURE: RunState.FAILED,
    dg.DagsterRunStatus.CANCELED: RunState.CANCELED,
}
UNFINISHED = [status for status, state in STATES.items() if state in (RunState.QUEUED, RunState.RUNNING)]


def observe_runs(instance: dg.DagsterInstance, group: str) -> RunObserver:
    """A lease's run is the Borrower run that took it; a lease no Borrower took yet has none (missing)."""

    def observe(lease: Lease) -> RunState:
        if lease.owner_run_id is None:
            return RunState.MISSING
        run = instance.get_run_by_id(lease.owner_run_id)
        return STATES[run.status] if run is not None else RunState.FAILED

    return observe


def borrower_runs(instance: dg.DagsterInstance, group: str) -> list[BorrowerRun]:
    """The group's Borrower runs that have not ended (queued, starting or running), each with its warm and code tags."""
    records = instance.get_run_records(
        filters=dg.RunsFilter(tags={TAG_GROUP: group, TAG_ROLE: ROLE_BORROWER}, statuses=UNFINISHED)
    )
    return [
        BorrowerRun(
            run_id=record.dagster_run.run_id,
            state=STATES[record.dagster_run.status],
            started_ms=int(record.start_time * 1000) if record.start_time is not None else None,
            warm=record.dagster_run.tags.get(TAG_WARM) == "1",
            code=record.dagster_run.tags.get(TAG_CODE),
        )
        for record in records
    ]


def terminate_runs(
    instance: dg.DagsterInstance,
    group: str,
    leases: list[Lease],
    reason: str = "its Borrower went silent or ran past its deadline; lease re-granted",
) -> list[str]:
    """Terminate the Borrower runs of revoked attempts that still look alive; returns their ids.

    They are past their deadline, or their heartbeat stopped (a process killed with ``kill -9``
    leaves its run STARTED for good). A lease no Borrower took has no run to end. Either way the
    raised fence keeps the old attempt from committing (where the sink did not exist at the
    re-grant, the new attempt raises it when it connects, and the commit's shard check keeps any
    shard from landing twice).
    """
    return end_runs(instance, [lease.owner_run_id for lease in leases if lease.owner_run_id is not None], reason)


def end_runs(instance: dg.DagsterInstance, run_ids: Iterable[str], reason: str) -> list[str]:
    """Cancel each run that has not ended; returns the ids of those it ended.

    A run the launcher cannot reach (its worker is gone, or it never started) is marked canceled,
    so the instance does not show it running forever.
    """
    stopped = []
    for run_id in dict.fromkeys(run_ids):
        run = instance.get_run_by_id(run_id)
        if run is not None and not run.is_finished:
            if not instance.run_coordinator.cancel_run(run_id):
                instance.report_run_canceled(run, message=f"icegroup: {reason}")
            stopped.append(run_id)
    return stopped
