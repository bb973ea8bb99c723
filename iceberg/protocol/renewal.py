"""Lease renewal, the pure half: which Spark jobs a lease attempt owns, when it progressed, what a renewal moves.

A Borrower (``spark_jobs/borrower/renewal.py``) runs each lease attempt's Spark jobs in a job group
of its own, and renews the lease when a stage of that group completed tasks since its last look;
the Leader (``iceberg/leader.py``) then moves the attempt's deadline. A shard whose tasks all hang
renews nothing, so the deadline still ends a stuck Borrower.
"""

from __future__ import annotations

from collections.abc import Mapping

from icegroup.iceberg.protocol.state import GroupState, Lease


def job_group(group: str, lease: Lease) -> str:
    """The Spark job group of one lease attempt: its jobs, and only its, are counted for its renewals."""
    return f"icegroup:{group}:{lease.lease_id}#{lease.attempt}"


def progressed(before: Mapping[int, int], now: Mapping[int, int]) -> bool:
    """Whether any stage completed more tasks than at the last look (``before``; tasks done per stage id).

    Per stage, not a total: Spark forgets old jobs' stages, and a total would then fall.
    """
    return any(count > before.get(stage, 0) for stage, count in now.items())


def renewed(state: GroupState, renewals: Mapping[str, tuple[int, int]], lease_timeout_s: int) -> GroupState:
    """Move the deadline of each lease attempt that renewed itself to its renewal plus the lease timeout.

    ``renewals`` maps a lease id to (attempt, renewed at ms): what a Borrower whose Spark jobs still
    complete tasks wrote (``iceberg/store/renewals.py``). A renewal by an older attempt moves
    nothing, and a deadline never moves back. With no renewal to apply the state is returned as is.
    """
    moved = {
        lease_id: renewed_ms + lease_timeout_s * 1000
        for lease_id, (attempt, renewed_ms) in renewals.items()
        if lease_id in state.leases
        and state.leases[lease_id].attempt == attempt
        and renewed_ms + lease_timeout_s * 1000 > state.leases[lease_id].deadline_ms
    }
    if not moved:
        return state
    new = state.model_copy(deep=True)
    for lease_id, deadline_ms in moved.items():
        new.leases[lease_id] = new.leases[lease_id].model_copy(update={"deadline_ms": deadline_ms})
    return new
