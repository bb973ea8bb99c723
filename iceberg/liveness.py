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

    - no run yet (the Leader died between the registry commit and the launch): launch it again;
      the run key makes a second launch of the same attempt a no-op;
    - failed, canceled, or succeeded without committing everything: re-grant as the next attempt,
      which resumes from the last committed shard;
    - queued or running past the deadline: the Borrower is presumed dead; re-grant. Fencing makes a
      late commit of the old attempt fail.
    """
    if run is RunState.MISSING:
        return LeaseAction.LAUNCH
    if run in (RunState.FAILED, RunState.CANCELED, RunState.SUCCEEDED):
        return LeaseAction.REGRANT
    return LeaseAction.REGRANT if now_ms > lease.deadline_ms else LeaseAction.WAIT


def regrant(lease: Lease, now_ms: int, timeout_s: int, owner_run_id: str | None) -> Lease:
    """The next attempt of a lease: same id, shards and validation base; new deadline and owner."""
    return lease.model_copy(
        update={
            "attempt": lease.attempt + 1,
            "granted_at_ms": now_ms,
            "deadline_ms": now_ms + timeout_s * 1000,
            "owner_run_id": owner_run_id,
        }
    )
