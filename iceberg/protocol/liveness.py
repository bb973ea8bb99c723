"""Pure liveness rules: the lease lifecycle, driven by what its Borrower run is doing.

The Leader side follows EMQX's shared-subscription protocol: a lease is *granting* until its
Borrower run is seen running, then *granted*. When the Borrower is dead (its run failed or was
canceled, its heartbeat stopped for longer than the session timeout, it is still running past the
lease deadline, or its run worker vanished, which run monitoring reports as a failure), the lease
goes through *revoking* (the fence is raised so the old
attempt cannot commit, and a run past its deadline is terminated) to *revoked*, and is re-granted
as the next attempt from the last committed shard: Pravega's "reader offline" takeover. A lease
whose shard turned out poison is *parked* until it is re-driven.

Rebalancing is incremental by construction: the Leader never takes a lease from a live Borrower.
New shards go to free slots, and only the shards of a dead Borrower move.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from icegroup.iceberg.protocol.state import Lease, LeasePhase, Origin

# The catalog property, set when a catalog is opened, naming the database heartbeats are kept in
# (SQLAlchemy URL); unset on a SQL catalog, whose own database keeps them.
HEARTBEATS_URI = "icegroup.heartbeats-uri"


class RunState(StrEnum):
    """A Borrower run as the Leader sees it; the orchestrator maps its own statuses onto these."""

    MISSING = "missing"
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELED = "canceled"


class BorrowerPhase(StrEnum):
    """The Borrower's side of a lease: EMQX's connecting -> connected -> unsubscribing."""

    CONNECTING = "connecting"
    CONNECTED = "connected"
    UNSUBSCRIBING = "unsubscribing"


class LeaseAction(StrEnum):
    """What a tick does with a lease that still has uncommitted shards."""

    WAIT = "wait"
    LAUNCH = "launch"
    REGRANT = "regrant"
    PARK = "park"


@dataclass(frozen=True)
class Decision:
    """A lease's next phase, what the tick must do, and why (for the log)."""

    phase: LeasePhase
    action: LeaseAction
    reason: str
    terminate: bool = False


def holder_of(lease: Lease) -> str:
    """Who beats for a lease: the run that executes it in-process, else the lease attempt's own run."""
    return lease.owner_run_id or f"{lease.lease_id}#{lease.attempt}"


def still_beating(lease: Lease, beats: Mapping[str, int], now_ms: int, session_timeout_s: int) -> bool:
    """Whether the lease's holder beat within the session timeout: a process alive, which sees an epoch change itself.

    A reset ends the runs of the leases it leaves behind. A run whose process still beats is not
    ended: it is a consume that goes on in the new epoch (its old leases can no longer commit), and
    marking its run canceled while it goes on committing would make its outcome depend on which of
    the two wrote last.
    """
    last = beats.get(holder_of(lease))
    return last is not None and now_ms - last <= session_timeout_s * 1000


def lease_action(
    lease: Lease,
    run: RunState,
    now_ms: int,
    poisoned: bool = False,
    last_beat_ms: int | None = None,
    session_timeout_s: int | None = None,
    holder_gone: bool = False,
) -> Decision:
    """Decide from run state, deadline and the dead-letter table; for leases with shards uncommitted.

    - a shard of the lease is parked or stopped: park the lease; it keeps its stream, so the
      stream's order holds, and waits for a re-drive;
    - parked and re-driven: revoke and re-grant;
    - failed, canceled, or succeeded without committing everything: revoke and re-grant; the next
      attempt resumes after the last committed shard;
    - its holder's process has ended, as the Leader sees on its own machine (``holder_gone``; see
      ``iceberg/store/heartbeats.py``): revoke now, terminating the run if it still looks alive;
    - its holder beat once and then went silent for longer than the session timeout (a process
      killed with ``kill -9`` leaves its run looking alive): revoke, terminating the run if it
      still looks alive; a holder that never beat yet (a run still starting) is judged by its run
      state and deadline alone;
    - past the deadline: revoke; a run still queued or running is terminated, and the raised fence
      stops it from committing even if it does not die;
    - no Borrower has taken it yet (``owner_run_id`` is None): it waits for one, however long a
      Borrower run sits in Dagster's queue; its deadline only counts once a Borrower takes it
      (``protocol/borrower.py``);
    - no run yet (the Leader died between the registry commit and the launch): launch it again;
      the run key makes a second launch of the same attempt a no-op.
    """
    if poisoned:
        if lease.phase is LeasePhase.PARKED:
            return Decision(LeasePhase.PARKED, LeaseAction.WAIT, "parked: waiting for `icegroup redrive`")
        return Decision(LeasePhase.PARKED, LeaseAction.PARK, "a shard is poison")
    if lease.phase is LeasePhase.PARKED:
        return Decision(LeasePhase.REVOKED, LeaseAction.REGRANT, "re-driven")
    if lease.owner_run_id is None:
        return Decision(LeasePhase.GRANTING, LeaseAction.LAUNCH, "waiting for a Borrower to take it")
    if run in (RunState.FAILED, RunState.CANCELED, RunState.SUCCEEDED):
        return Decision(LeasePhase.REVOKED, LeaseAction.REGRANT, f"Borrower run {run.value}")
    alive = run in (RunState.QUEUED, RunState.RUNNING)
    if holder_gone:
        return Decision(LeasePhase.REVOKING, LeaseAction.REGRANT, "its Borrower's process ended", terminate=alive)
    if last_beat_ms is not None and session_timeout_s is not None:
        silent_s = (now_ms - last_beat_ms) / 1000
        if silent_s > session_timeout_s:
            reason = f"no heartbeat for {silent_s:.0f}s (session_timeout_s: {session_timeout_s})"
            return Decision(LeasePhase.REVOKING, LeaseAction.REGRANT, reason, terminate=alive)
    if now_ms > lease.deadline_ms:
        reason = f"past its deadline ({run.value})" if alive else "past its deadline, never launched"
        return Decision(LeasePhase.REVOKING, LeaseAction.REGRANT, reason, terminate=alive)
    if run is RunState.MISSING:
        return Decision(LeasePhase.GRANTING, LeaseAction.LAUNCH, "no run yet")
    if run is RunState.QUEUED:
        return Decision(LeasePhase.GRANTING, LeaseAction.WAIT, "run queued")
    return Decision(LeasePhase.GRANTED, LeaseAction.WAIT, "run alive")


def regrant(
    lease: Lease,
    now_ms: int,
    timeout_s: int,
    owner_run_id: str | None,
    sink_snapshot: int | None,
    origin: Origin | None = None,
) -> Lease:
    """The next attempt of a lease: same id and shards; new deadline, owner and validation base.

    The base moves to the sink head the tick just reconciled: every commit up to it is already
    accounted for, so the commit check needs to look only at what comes after it. The origin moves
    to the group's current one, so a config change accepted meanwhile reaches the next attempt.
    """
    return lease.model_copy(
        update={
            "attempt": lease.attempt + 1,
            "granted_at_ms": now_ms,
            "deadline_ms": now_ms + timeout_s * 1000,
            "owner_run_id": owner_run_id,
            "sink_snapshot_at_grant": sink_snapshot if sink_snapshot is not None else lease.sink_snapshot_at_grant,
            "phase": LeasePhase.GRANTING,
            "origin": origin if origin is not None else lease.origin,
        }
    )


@dataclass(frozen=True)
class Hold:
    """Who holds a lease, when it was last heard of, and when it is re-granted if it stays silent.

    A lease nobody executes says so instead (``waits``): one parked on a poison shard waits for a
    re-drive, one granted but not yet taken waits for a Borrower. Neither is re-granted by a
    timeout, so neither shows one.
    """

    lease_id: str
    attempt: int
    streams: tuple[str, ...]
    holder: str
    last_beat_ms: int | None
    regrant_at_ms: int
    deadline_ms: int
    waits: str | None = None

    def describe(self, now_ms: int) -> str:
        """One line for a person: the lease, its holder, and until when it is theirs."""
        if self.waits is not None:
            return f"lease {self.lease_id}#{self.attempt} ({', '.join(self.streams)}): {self.waits}"
        lease = f"lease {self.lease_id}#{self.attempt} ({', '.join(self.streams)}) held by {self.holder}"
        if self.last_beat_ms is None:
            heard = "no heartbeat yet"
        else:
            heard = f"last heartbeat {max(0, now_ms - self.last_beat_ms) / 1000:.0f}s ago"
        until = f"re-granted in {max(0, self.regrant_at_ms - now_ms) / 1000:.0f}s if it stays silent"
        return f"{lease}: {heard}; {until}, at the latest in {max(0, self.deadline_ms - now_ms) / 1000:.0f}s"


def hold_of(lease: Lease, beats: Mapping[str, int], session_timeout_s: int, redrive: str | None = None) -> Hold:
    """The hold on ``lease``: a silent holder loses it a session timeout after its last beat (next tick).

    ``redrive`` is the command that re-drives the group's poison shards, given when a shard of the
    lease is in the dead-letter table: whoever ran it has stopped, and the lease waits for that
    command (``lease_action`` parks it at the next tick).
    """
    holder = holder_of(lease)
    last = beats.get(holder)
    regrant = min(lease.deadline_ms, last + session_timeout_s * 1000) if last is not None else lease.deadline_ms
    waits = None
    if redrive is not None or lease.phase is LeasePhase.PARKED:
        waits = f"on a poison shard; waits for `{redrive or 'icegroup redrive'}` after the fix"
    elif lease.owner_run_id is None:
        waits = "granted, waiting for a Borrower to take it"
    return Hold(
        lease_id=lease.lease_id,
        attempt=lease.attempt,
        streams=tuple(lease.streams),
        holder=holder,
        last_beat_ms=last,
        waits=waits,
        regrant_at_ms=regrant,
        deadline_ms=lease.deadline_ms,
    )
