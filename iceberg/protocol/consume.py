"""Consuming until caught up, the pure half: what to do after each tick, how long to wait, what to hand back.

``spark_jobs/consume.py`` ticks and runs leases; after each tick it asks ``after_tick`` what comes
next (tick again, wait for a lease, run the new ones, give up, stop, return), so the loop does and
this module decides. The ``icegroup consume`` flags and the consume job's run config share these
defaults, so that a scheduled run and a command behave alike unless told otherwise. A run hands its
leases back at its end in one more tick, judged by the rules here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import Enum

from icegroup.iceberg.protocol.liveness import RunState
from icegroup.iceberg.protocol.state import Lease


@dataclass(frozen=True)
class RunOptions:
    """A consume run's patience: seconds without progress before it gives up, seconds between looks, and follow."""

    max_wait_s: float = 600.0
    poll_s: float = 1.0
    follow: bool = False


DEFAULTS = RunOptions()


class Step(Enum):
    """What a consume run does after a tick."""

    STOP = "the group is stopped: let the leases here end, then raise"
    CAUGHT_UP = "caught up: report it, then return (or, following, look again at the next poll)"
    PAUSED = "paused with nothing left to run here: raise, naming the pause"
    ONE_ROUND = "run the leases granted, wait for them, then return"
    WAIT_FOR_A_LEASE = "run the leases granted, then wait until one ends (or a slot is free at the next poll)"
    PLAN_AHEAD = "run the leases granted, then tick again at once while they run: the source has more to plan"
    TICK = "run the leases granted, then tick again at once: the last tick made progress"
    GIVE_UP = "no progress for the patience: raise, naming the leases held elsewhere"
    SLEEP = "nothing to run here yet: look again after a poll"


@dataclass(frozen=True)
class TickFacts:
    """What the loop knows after a tick: the tick's verdicts, and the leases of this run."""

    stopped: bool
    caught_up: bool
    paused: bool
    more_windows_due: bool
    progressed: bool
    mine: int
    busy: int
    idle_s: float
    planning_behind: bool = False


def after_tick(facts: TickFacts, options: RunOptions, until_caught_up: bool) -> Step:
    """The next step after a tick: ``facts.mine`` leases were just granted here, ``facts.busy`` run already.

    Caught up means every window due has been reported complete too (a tick reports a bounded
    number), so a run with windows due ticks on. A paused group raises only once nothing is left to
    run here. The patience (``max_wait_s``) counts time without progress, and a following run never
    runs out of it. While leases run and the source has more to plan than one tick plans
    (``planning_behind``), the next tick plans while they run, not after one ends: a backlog of
    many small snapshots otherwise planned 500 of them per lease that ended, its slot idle.
    """
    if facts.stopped:
        return Step.STOP
    if facts.caught_up and not facts.more_windows_due:
        return Step.CAUGHT_UP
    if facts.paused and not facts.mine and not facts.busy and not facts.more_windows_due:
        return Step.PAUSED
    if not until_caught_up:
        return Step.ONE_ROUND
    if facts.busy or facts.mine:
        return Step.PLAN_AHEAD if facts.planning_behind else Step.WAIT_FOR_A_LEASE
    if facts.progressed or facts.more_windows_due:
        return Step.TICK
    if facts.idle_s > options.max_wait_s and not options.follow:
        return Step.GIVE_UP
    return Step.SLEEP


def out_of_patience(idle_s: float, busy: int, options: RunOptions) -> bool:
    """Whether a run whose tick keeps losing (a race, a reset in flight) gives up: no lease here, and no progress."""
    return idle_s > options.max_wait_s and not busy


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
