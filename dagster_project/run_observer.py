"""Liveness from the Dagster instance: map a lease to the state of the run that holds it."""

from __future__ import annotations

import dagster as dg

from dagster_project.tags import TAG_ATTEMPT, TAG_GROUP, TAG_LEASE
from iceberg.leader import RunObserver
from iceberg.protocol.liveness import RunState
from iceberg.protocol.state import Lease

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


def observe_runs(instance: dg.DagsterInstance, group: str) -> RunObserver:
    """A lease held in-process is its owner run's state; otherwise the run tagged with lease+attempt.

    A run that failed but that Dagster will retry counts as still running.
    """

    def observe(lease: Lease) -> RunState:
        if lease.owner_run_id is not None:
            run = instance.get_run_by_id(lease.owner_run_id)
            return STATES[run.status] if run is not None else RunState.FAILED
        runs = instance.get_runs(
            filters=dg.RunsFilter(tags={TAG_GROUP: group, TAG_LEASE: lease.lease_id, TAG_ATTEMPT: str(lease.attempt)}),
            limit=1,
        )
        if not runs:
            return RunState.MISSING
        run = runs[0]
        if run.status == dg.DagsterRunStatus.FAILURE and run.tags.get("dagster/will_retry") == "true":
            return RunState.RUNNING
        return STATES[run.status]

    return observe


def terminate_runs(
    instance: dg.DagsterInstance,
    group: str,
    leases: list[Lease],
    reason: str = "its Borrower went silent or ran past its deadline; lease re-granted",
) -> list[str]:
    """Terminate the runs of revoked attempts that still look alive; returns their ids.

    They are past their deadline, or their heartbeat stopped (a process killed with ``kill -9``
    leaves its run STARTED for good).

    A run the launcher cannot reach (its worker is gone, or it never started) is marked canceled,
    so the instance does not show it running forever. Either way the raised fence keeps it from
    committing (where the sink did not exist at the re-grant, the new attempt raises it when it
    connects, and the commit's shard check keeps any shard from landing twice).
    """
    stopped = []
    for lease in leases:
        if lease.owner_run_id is not None:
            run_ids = [lease.owner_run_id]
        else:
            tags = {TAG_GROUP: group, TAG_LEASE: lease.lease_id, TAG_ATTEMPT: str(lease.attempt)}
            run_ids = [run.run_id for run in instance.get_runs(filters=dg.RunsFilter(tags=tags))]
        for run_id in run_ids:
            run = instance.get_run_by_id(run_id)
            if run is not None and not run.is_finished:
                if not instance.run_coordinator.cancel_run(run_id):
                    instance.report_run_canceled(run, message=f"icegroup: {reason}")
                stopped.append(run_id)
    return stopped
