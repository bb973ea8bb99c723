"""Consuming until caught up, the pure half: how long ``consume`` waits, how often it looks, what it hands back.

The ``icegroup consume`` flags and the consume job's run config share these defaults, so that a
scheduled run and a command behave alike unless told otherwise. A run hands its leases back at
its end in one more tick (``spark_jobs/consume.py``), judged by the rules here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from icegroup.iceberg.protocol.liveness import RunState
from icegroup.iceberg.protocol.state import Lease


@dataclass(frozen=True)
class RunOptions:
    """A consume run's patience: seconds without progress before it gives up, seconds between looks, and follow."""

    max_wait_s: float = 600.0
    poll_s: float = 1.0
    follow: bool = False


DEFAULTS = RunOptions()


def next_poll_s(now_s: float, poll_s: float) -> float:
    """When a following consume looks at the source next: the next multiple of ``poll_s`` after ``now_s``.

    This is Structured Streaming's ``processingTime`` trigger (``ProcessingTimeExecutor``): looks
    keep a fixed rhythm whatever a batch took, so a commit waits for the next look, not for a
    whole ``poll_s`` after the last batch ended. A batch that overran its slot is followed by the
    next slot boundary, not by a burst of catch-up looks.
    """
    if poll_s <= 0:
        return now_s
    return (math.floor(now_s / poll_s) + 1) * poll_s


def run_leases(leases: Iterable[Lease], owner_run_id: str) -> list[Lease]:
    """The leases among ``leases`` that the run ``owner_run_id`` holds."""
    return [lease for lease in leases if lease.owner_run_id == owner_run_id]


def at_release(lease: Lease, owner_run_id: str, others: Callable[[Lease], RunState]) -> RunState:
    """A lease's run state in the tick that hands a run's leases back: the run's own ended; others' as observed.

    The hand-back tick runs once every lease thread of the run has ended, so the Leader reconciles
    what they committed, parks a lease on a poison shard and revokes the rest at once.
    """
    return RunState.SUCCEEDED if lease.owner_run_id == owner_run_id else others(lease)


def handed_back(mine: Sequence[Lease]) -> str:
    """How the run's last line names the leases it hands back."""
    return "its lease is" if len(mine) == 1 else f"its {len(mine)} leases are"
