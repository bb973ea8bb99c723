"""Pure liveness rules: what the Leader does with a lease, given what its Borrower run is doing."""

from __future__ import annotations

from enum import StrEnum

from iceberg.state import Lease


class RunState(StrEnum):
    """A Borrower run as the Leader sees it; the orchestrator maps its own statuses onto these."""

    MISSING = "missing"
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELED = "canceled"


class LeaseAction(StrEnum):
    """What a tick does with a lease that still has uncommitted shards."""

    WAIT = "wait"
    LAUNCH = "launch"
    REGRANT = "regrant"


def lease_action(lease: Lease, run: RunState, now_ms: int) -> LeaseAction:
    """Decide from run state and deadline; called only for leases with shards still uncommitted.

    - failed, canceled, or succeeded without committing everything: re-grant as the next attempt,
      which resumes from the last committed shard;
    - past the deadline, whatever the run does: the Borrower is presumed dead (or was never
      launched); re-grant. Fencing makes a late commit of a shard by the old attempt fail;
    - no run yet (the Leader died between the registry commit and the launch): launch it again;
      the run key makes a second launch of the same attempt a no-op.
    """
    if run in (RunState.FAILED, RunState.CANCELED, RunState.SUCCEEDED) or now_ms > lease.deadline_ms:
        return LeaseAction.REGRANT
    return LeaseAction.LAUNCH if run is RunState.MISSING else LeaseAction.WAIT


def regrant(lease: Lease, now_ms: int, timeout_s: int, owner_run_id: str | None, sink_snapshot: int | None) -> Lease:
    """The next attempt of a lease: same id and shards; new deadline, owner and validation base.

    The base moves to the sink head the tick just reconciled: every commit up to it is already
    accounted for, so a shard still in the lease has no files before it, and a later commit of
    it by the old attempt is caught by validation. An old base could meanwhile have been expired.
    """
    return lease.model_copy(
        update={
            "attempt": lease.attempt + 1,
            "granted_at_ms": now_ms,
            "deadline_ms": now_ms + timeout_s * 1000,
            "owner_run_id": owner_run_id,
            "sink_snapshot_at_grant": sink_snapshot if sink_snapshot is not None else lease.sink_snapshot_at_grant,
        }
    )
