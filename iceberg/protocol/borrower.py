"""Warm Borrowers, pure: a lease waits for a Borrower, a Borrower takes it, the Leader starts Borrowers.

EMQX's shared subscriptions keep a *connected* member and hand it the next stream, rather than
creating a member per grant. icegroup does the same with Borrower runs:

- the Leader grants a lease to no one in particular (``owner_run_id`` is None): it *waits for a
  Borrower*. It has no deadline yet, so a Borrower still in Dagster's run queue can never make it
  expire;
- a running Borrower *takes* waiting leases, up to its free slots, by a compare-and-swap of the
  registry. From then on the lease is its own: its deadline counts from that moment, and its
  heartbeat is the Borrower's;
- the Leader starts a Borrower run only for waiting leases that no live Borrower has a free slot
  for, and never more runs than ``max_borrowers``. A Borrower with nothing to take for its idle
  timeout exits;
- except the group's ``warm_borrowers``: those the Leader keeps up even with nothing to do, Spark
  started, so a new lease finds a session already up. They never exit when idle; one launched
  with other code or settings than the Leader's (a stale ``code`` stamp) is ended, and the Leader
  starts a fresh one. A Borrower whose config the registry moved on from takes no lease and exits.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from icegroup.iceberg.protocol.liveness import RunState
from icegroup.iceberg.protocol.state import GroupState, Lease, LeasePhase


def waiting(state: GroupState) -> list[Lease]:
    """Leases granted and waiting for a Borrower to take them, oldest window and grant first."""
    free = [le for le in state.leases.values() if le.owner_run_id is None and le.phase is not LeasePhase.PARKED]
    return sorted(free, key=lambda le: (le.window_start_ms, le.granted_at_ms, le.lease_id))


def ungranted(state: GroupState) -> bool:
    """Whether shards are cut and in no lease: their streams were busy (or the slots full) at the grant.

    A Borrower whose own tick left such shards ticks again once one of its leases ends, since
    that frees streams and a slot; else they would wait for the Leader sensor's next evaluation.
    """
    granted = {shard_id for lease in state.leases.values() for shard_id in lease.shard_ids}
    return any(shard_id not in granted for shard_id in state.shards)


def taken(lease: Lease, run_id: str, now_ms: int, timeout_s: int) -> Lease:
    """The lease as ``run_id`` holds it from ``now_ms``: its deadline counts from now, not from the grant."""
    return lease.model_copy(
        update={
            "owner_run_id": run_id,
            "granted_at_ms": now_ms,
            "deadline_ms": now_ms + timeout_s * 1000,
            "phase": LeasePhase.GRANTED,
        }
    )


def take(state: GroupState, run_id: str, now_ms: int, timeout_s: int, slots: int) -> tuple[GroupState, list[Lease]]:
    """``run_id`` takes up to ``slots`` waiting leases; the state to commit and the leases taken."""
    chosen = [taken(lease, run_id, now_ms, timeout_s) for lease in waiting(state)[: max(0, slots)]]
    if not chosen:
        return state, []
    new = state.model_copy(deep=True)
    for lease in chosen:
        new.leases[lease.lease_id] = lease
    return new, chosen


@dataclass(frozen=True)
class BorrowerRun:
    """A Borrower run that has not ended, as the orchestrator shows it."""

    run_id: str
    state: RunState
    started_ms: int | None = None
    warm: bool = False
    code: str | None = None


@dataclass(frozen=True)
class Census:
    """The group's Borrower runs: alive ones with their free slots, and silent ones to end."""

    live: tuple[str, ...]
    free_slots: int
    silent: tuple[str, ...]
    warm: int = 0


def census(
    runs: list[BorrowerRun],
    state: GroupState,
    beats: Mapping[str, int],
    now_ms: int,
    session_timeout_s: int,
    slots_per_borrower: int,
    gone: Collection[str] = (),
) -> Census:
    """Which Borrower runs are alive, and how many more leases they can take.

    A queued run is alive: it takes work once it starts. A running one is alive while it beats
    within the session timeout; one that never beat gets two session timeouts from its start, time
    enough to import and connect. A run that a ``kill -9`` left looking alive is *silent*: it
    holds no slot, and the Leader ends it. A run in ``gone`` (its process ended, as the Leader sees
    on its own machine) is silent at once.
    """
    held: dict[str, int] = {}
    for lease in state.leases.values():
        if lease.owner_run_id is not None:
            held[lease.owner_run_id] = held.get(lease.owner_run_id, 0) + 1
    live: list[str] = []
    silent: list[str] = []
    for run in runs:
        beat = beats.get(run.run_id)
        if run.state is RunState.QUEUED:
            alive = True
        elif run.run_id in gone:
            alive = False
        elif beat is not None:
            alive = now_ms - beat <= session_timeout_s * 1000
        else:
            alive = run.started_ms is None or now_ms - run.started_ms <= 2 * session_timeout_s * 1000
        (live if alive else silent).append(run.run_id)
    free = sum(max(0, slots_per_borrower - held.get(run_id, 0)) for run_id in live)
    warm = sum(1 for run in runs if run.warm and run.run_id in live)
    return Census(live=tuple(live), free_slots=free, silent=tuple(silent), warm=warm)


def borrowers_to_start(waiting_leases: int, found: Census, slots_per_borrower: int, max_borrowers: int) -> int:
    """Borrower runs to start: enough for the waiting leases no live one has room for, within ``max_borrowers``."""
    short = waiting_leases - found.free_slots
    if short <= 0:
        return 0
    return max(0, min(math.ceil(short / slots_per_borrower), max_borrowers - len(found.live)))


@dataclass(frozen=True)
class Starts:
    """Borrower runs to start: ``warm`` ones that stay up idle, and ``for_work`` ones that exit when idle."""

    warm: int
    for_work: int


def starts(for_work: int, found: Census, warm_borrowers: int, max_borrowers: int) -> Starts:
    """The runs to start: those the waiting leases need, of which enough are warm to keep ``warm_borrowers`` up.

    A run started for work is made warm while the group is short of warm ones, so a burst after a
    quiet spell starts one run, not two; with no work, the missing warm ones start alone.
    """
    short = max(0, warm_borrowers - found.warm)
    total = max(0, min(max(for_work, short), max_borrowers - len(found.live)))
    warm = min(short, total)
    return Starts(warm=warm, for_work=total - warm)


def stale(runs: list[BorrowerRun], code: str) -> list[str]:
    """Warm runs to end: those launched with other code or settings than the Leader's now.

    A warm Borrower never exits when idle, so after the code location is reloaded (a new transform
    body, new group settings) it would run the old code for good, and under steady load it is never
    idle. So it is ended even while it holds leases: it stops after its current commit, and its
    leases are re-granted behind a raised fence, like any ended run's.
    """
    return [run.run_id for run in runs if run.warm and run.code != code]


def outdated(state: GroupState, config_hash: str) -> bool:
    """The registry moved on from this Borrower's filter and transform: the Leader grants under newer config.

    True only when the registry recorded a change *from* this config (``on_change: continue``), so
    a Borrower whose config the Leader never granted under (a groups file edited without a reload)
    is not told to exit quietly: ``connect`` refuses its lease, and the run fails, saying why.
    """
    if state.config_hash is None or state.config_hash == config_hash:
        return False
    return any(change.old_hash == config_hash for change in state.config_changes)


def rehearses(stays_warm: bool, rehearsed: bool, largest_lease_rows: int, rehearsal_rows: int) -> bool:
    """Whether an idle Borrower rehearses its lease path now (``spark_jobs/borrower/rehearsal.py``).

    Only one that stays up when idle does: one started for work exits soon after. It rehearses once,
    and not at all once a lease of its own has read ``rehearsal_rows`` source rows, which compiled
    the same code as well as a rehearsal would.
    """
    return stays_warm and not rehearsed and rehearsal_rows > 0 and largest_lease_rows < rehearsal_rows
