"""Poison shards: the dead-letter record, and parking the lease that holds one.

A shard whose read or transform failed ``max_deliver`` times is *poison*. The Borrower records a
dead letter (``iceberg/store/dead_letters.py`` keeps them in a table); the Leader then either stops the
group (``on_poison: stop``) or parks the lease on the poisoned stream while the other streams go
on (``on_poison: park``). ``icegroup redrive`` releases it. This module is the part of that which
needs no table.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass

from icegroup.iceberg.protocol.state import GroupState, Lease, LeasePhase

PARKED = "parked"
STOPPED = "stopped"
REDRIVEN = "redriven"


@dataclass(frozen=True)
class DeadLetter:
    """The latest word on one poison shard."""

    shard_id: str
    stream: str
    lease_id: str
    attempt: int
    action: str
    error: str
    from_snapshot: int | None
    to_snapshot: int
    at_ms: int


def latest_per_shard(letters: Iterable[DeadLetter]) -> dict[str, DeadLetter]:
    """Each shard's latest letter: the table is append-only, so the newest row is the shard's state."""
    out: dict[str, DeadLetter] = {}
    for letter in sorted(letters, key=lambda d: d.at_ms):
        out[letter.shard_id] = letter
    return out


def is_open(letter: DeadLetter) -> bool:
    """A parked or stopped shard that was not re-driven since."""
    return letter.action in (PARKED, STOPPED)


def park_poisoned_lease(state: GroupState, lease: Lease, poisoned: Collection[str]) -> Lease:
    """The lease cut down to its poisoned streams, parked, at a new attempt.

    Its other streams' pending shards go back to the pool, so they are granted again and go on. The
    attempt moves on (and its fence with it), so the Borrower that gave up commits nothing more.
    """
    pending = [sid for sid in lease.shard_ids if sid in state.shards]
    streams = {state.shards[sid].stream for sid in pending if sid in poisoned}
    return lease.model_copy(
        update={
            "phase": LeasePhase.PARKED,
            "attempt": lease.attempt + 1,
            "shard_ids": [sid for sid in pending if state.shards[sid].stream in streams],
            "streams": sorted(streams),
        }
    )
