"""Consume until caught up: the Leader tick and the Borrower in one loop, in one process.

This is what ``icegroup consume`` and a scheduled group's run execute. It uses the same ``tick`` as
the Leader sensor and the same ``run_lease`` as a Borrower run; it only differs in who executes a
lease: this process, right after the tick that granted it, several at once on one warm
SparkSession.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial

from pyiceberg.catalog import Catalog
from pyspark.sql import SparkSession

from icegroup.iceberg.config.lakehouse import LakehouseConfig
from icegroup.iceberg.errors import (
    CatalogUnavailable,
    GroupStopped,
    NotCaughtUp,
    RegistryConflict,
    ResetInFlight,
    SourceBlocked,
)
from icegroup.iceberg.leader import RunObserver, TickResult, tick
from icegroup.iceberg.protocol.consume import (
    DEFAULTS,
    RunOptions,
    Step,
    TickFacts,
    after_tick,
    at_release,
    handed_back,
    next_poll_s,
    out_of_patience,
    run_leases,
)
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.liveness import RunState, hold_of
from icegroup.iceberg.protocol.state import Lease, LeasePhase
from icegroup.iceberg.store.heartbeats import heartbeat, read_beats
from icegroup.spark_jobs.borrower.attempt import LeaseReport
from icegroup.spark_jobs.borrower.runner import LeaseCallback, LeaseRunner, LeaseTotals
from icegroup.spark_jobs.borrower.user_errors import describe_error, is_platform_failure
from icegroup.spark_jobs.follow import FollowReport, follow_upstream
from icegroup.spark_jobs.transforms import load_transform

# Waits a person at the console should hear of as they happen, wherever the run's own log goes: the
# ``icegroup`` command prints this logger's records on the terminal.
WAITS = logging.getLogger("icegroup.waits")


@dataclass
class ConsumeSummary(LeaseTotals):
    """Totals of one consume call, and how its last tick left the group."""

    ticks: int = 0
    caught_up: bool = False
    last_tick: TickResult | None = None


@dataclass(frozen=True)
class ConsumeHooks:
    """What a consume run is handed by its caller: a session to run leases on, a view of other runs, and listeners.

    ``spark`` is called for the session only when this process has a lease to run, so a group with
    nothing to do never starts a JVM. ``observe_others`` tells how another process's run of a lease
    stands. ``terminate`` is handed the revoked attempts whose runs still look alive (a killed
    consumer's run, say), so the orchestrator can mark them ended. ``on_tick`` sees every tick's
    result (its complete windows, their provenance and the source's head), ``on_lease`` each lease
    that ended here, and ``on_follow`` what each follow of an upstream replay replayed.
    """

    spark: Callable[[], SparkSession]
    observe_others: RunObserver
    progress: Callable[[str], None] = print
    on_lease: LeaseCallback | None = None
    on_tick: Callable[[TickResult], None] | None = None
    terminate: Callable[[list[Lease]], object] | None = None
    on_follow: Callable[[FollowReport], None] | None = None


def consume(
    lakehouse: LakehouseConfig,
    group: GroupConfig,
    owner_run_id: str,
    hooks: ConsumeHooks,
    options: RunOptions = DEFAULTS,
    until_caught_up: bool = True,
) -> ConsumeSummary:
    """Tick and execute this process's leases until the group is caught up with the source head.

    Up to ``max_borrowers`` leases run at once, on threads of one SparkSession (``LeaseRunner``);
    the loop ticks again as soon as one ends, or every ``poll_s`` while a slot is free, so new
    source snapshots are granted to a free slot within about ``poll_s``; while the source has more
    to plan than a tick plans, it ticks again at once, planning while the leases run. What follows
    each tick is decided by ``after_tick`` (``iceberg/protocol/consume.py``). With ``follow`` it goes on after
    catching up, looking at the source at every multiple of ``poll_s`` (``next_poll_s``: the rhythm
    of Structured Streaming's ``processingTime`` trigger), until it is interrupted.
    The process beats for its leases while it runs (``iceberg/store/heartbeats.py``), so if it dies its leases
    are re-granted at the next tick of a Leader on its machine, else a session timeout later. Leases
    held by other live Borrowers are waited for, up to ``max_wait_s`` without progress; then it raises
    ``NotCaughtUp``, naming each held lease, its holder and until when it is theirs. With
    ``until_caught_up=False`` it stops after one round: one tick and the leases it granted.
    A Borrower error propagates once the other leases in flight have ended: the run fails, and the
    next tick re-grants the lease. Two are expected and handled (``LeaseRunner``): a lease fenced by
    a re-grant elsewhere, and a shard parked by ``on_poison: park``. A stopped group raises
    ``GroupStopped``; a paused one raises ``NotCaughtUp`` once nothing is left to run here. A reset
    in flight (``ResetInFlight``) is waited out like a lost race, polling every ``poll_s``; if it
    still runs after ``max_wait_s`` without progress, that error is raised. A group with
    ``follow_upstream`` that stops at an upstream replay follows it here and goes on.
    """
    load_transform(group.transform)  # a transform that does not import fails before any lease is granted
    catalog = lakehouse.catalog()
    runner = LeaseRunner(hooks.spark, lakehouse, group, owner_run_id, group.max_borrowers, hooks.progress)
    loop = ConsumeLoop(catalog, lakehouse, group, owner_run_id, hooks, options, runner)
    beating = heartbeat(catalog, group.name, owner_run_id, interval_s=group.session_timeout_s / 3)
    releasing = released_at_end(runner, partial(release, catalog, group, owner_run_id, hooks, loop.summary))
    with beating, releasing, runner:  # the runner's threads end first, then its leases are handed back
        while True:
            result = loop.tick_once()
            if result is not None and loop.act(result, until_caught_up):
                return loop.summary


@dataclass
class ConsumeLoop:
    """One consume run between its ticks: its leases, its totals, and how long it has gone without progress."""

    catalog: Catalog
    lakehouse: LakehouseConfig
    group: GroupConfig
    owner_run_id: str
    hooks: ConsumeHooks
    options: RunOptions
    runner: LeaseRunner
    summary: ConsumeSummary = field(default_factory=lambda: ConsumeSummary())
    idle_since: float = field(default_factory=time.monotonic)
    said_caught_up: int | None = None
    outage: Outage = field(init=False)

    def __post_init__(self) -> None:
        """A run starts with the whole patience for an outage of the catalog."""
        self.outage = Outage(self.group.name, self.options.max_wait_s)

    def observe(self, lease: Lease) -> RunState:
        """How a lease's run stands: this process's from its runner, another's from the caller's observer."""
        return self.runner.state(lease) if lease.owner_run_id == self.owner_run_id else self.hooks.observe_others(lease)

    def account(self, finished: list[tuple[Lease, LeaseReport]]) -> None:
        """Count the leases that ended here, and tell the caller of each."""
        self.summary.add(finished, self.hooks.on_lease)

    def tick_once(self) -> TickResult | None:
        """One Leader tick, shown to the caller; None when the loop waited (a race, an outage) or followed a replay."""
        try:
            result = tick(self.catalog, self.group, self.observe, owner_run_id=self.owner_run_id)
        except RegistryConflict as exc:
            self.back_off(exc)
            return None
        except SourceBlocked as exc:
            self.follow(exc)
            return None
        except Exception as exc:
            if not is_platform_failure(exc):
                raise
            self.wait_out(exc)
            return None
        self.outage.over()
        self.summary.ticks += 1
        self.summary.last_tick = result
        if self.hooks.on_tick is not None:
            self.hooks.on_tick(result)
        if result.terminate and self.hooks.terminate is not None:
            self.hooks.terminate(result.terminate)
        return result

    def act(self, result: TickResult, until_caught_up: bool) -> bool:
        """Do what ``after_tick`` decides after ``result``; True once the run is over."""
        mine = [le for le in run_leases(result.launch, self.owner_run_id) if not self.runner.knows(le)]
        facts = TickFacts(
            stopped=bool(result.stopped), caught_up=result.caught_up, paused=result.paused,
            more_windows_due=result.more_windows_due, progressed=bool(result.new_shards or result.committed),
            mine=len(mine), busy=self.runner.busy, idle_s=time.monotonic() - self.idle_since,
            planning_behind=result.planning_behind,
        )  # fmt: skip
        step = after_tick(facts, self.options, until_caught_up)
        if step is Step.STOP:
            self.runner.drain()
            # A lease of this process may have stopped the group before its error reached the loop:
            # its own error (the poison shard and its deliveries) says more than the stop does.
            self.account(self.runner.finished(0))
            raise GroupStopped(result.stop_message())
        if step is Step.CAUGHT_UP:
            return self.caught_up(result)
        if step is Step.PAUSED:
            raise NotCaughtUp(result.pause_message())
        self.start(result, mine)
        if step is Step.ONE_ROUND:
            while self.runner.busy:
                self.account(self.runner.finished(None))
            return True
        if step is Step.WAIT_FOR_A_LEASE:
            self.account(self.runner.finished(None if self.runner.free == 0 else self.options.poll_s))
        elif step is Step.PLAN_AHEAD:
            self.account(self.runner.finished(0))  # whatever ended meanwhile, without waiting
        elif step is Step.GIVE_UP:
            raise not_caught_up(self.catalog, self.group, self.summary, self.owner_run_id, self.options.max_wait_s)
        elif step is Step.SLEEP:
            time.sleep(self.options.poll_s)
        if step in (Step.WAIT_FOR_A_LEASE, Step.PLAN_AHEAD, Step.TICK):
            self.idle_since = time.monotonic()
        return False

    def start(self, result: TickResult, mine: list[Lease]) -> None:
        """Start the leases the tick granted this run, saying what the tick did when it did anything."""
        if mine or result.new_shards or result.committed:
            self.hooks.progress(
                f"{self.group.name}: tick {self.summary.ticks} in {result.elapsed_ms:.0f} ms: {result.new_shards} "
                f"new shards, {len(result.committed)} committed, {len(result.state.shards)} pending, "
                f"{len(result.state.leases)} leases in flight ({self.runner.busy + len(mine)} running here)"
            )
        for lease in mine:
            self.runner.start(lease, [result.state.shards[s] for s in lease.shard_ids if s in result.state.shards])

    def caught_up(self, result: TickResult) -> bool:
        """Wait for the reports of this run's last leases and say so once; True unless the run follows the source."""
        while self.runner.busy:  # committed, and caught up, but a lease's own report may not be counted yet
            self.account(self.runner.finished(None))
        self.summary.caught_up = True
        if self.said_caught_up != result.source_head:
            self.hooks.progress(f"{self.group.name}: caught up at source snapshot {result.source_head}")
            self.said_caught_up = result.source_head
        if not self.options.follow:
            return True
        now = time.time()
        time.sleep(next_poll_s(now, self.options.poll_s) - now)
        return False

    def back_off(self, exc: RegistryConflict) -> None:
        """After a tick that lost the registry, or found a reset in flight: wait a little, or give up."""
        self.hooks.progress(f"{self.group.name}: backing off: {exc}")
        if out_of_patience(time.monotonic() - self.idle_since, self.runner.busy, self.options):
            if isinstance(exc, ResetInFlight):
                raise exc  # it names the reset, and when to run again
            raise not_caught_up(
                self.catalog, self.group, self.summary, self.owner_run_id, self.options.max_wait_s
            ) from exc
        self.account(self.runner.finished(self.options.poll_s))
        if isinstance(exc, ResetInFlight) and not self.runner.busy:
            WAITS.warning(
                f"{self.group.name}: waiting for a reset in flight, at most {self.options.max_wait_s:.0f}s: {exc}"
            )
            time.sleep(self.options.poll_s)  # the reset commits in a moment: tick again then, not at once

    def follow(self, stop: SourceBlocked) -> None:
        """Follow the upstream replay the group stopped at (``follow_upstream``), or raise the stop."""
        if not (self.group.follow_upstream and stop.followable):
            raise stop
        self.hooks.progress(f"{self.group.name}: {stop.status()}; following it (follow_upstream)")
        report = follow_upstream(self.hooks.spark(), self.lakehouse, self.group, self.owner_run_id, self.hooks.progress)
        if not report.followed:
            raise stop
        if self.hooks.on_follow is not None:
            self.hooks.on_follow(report)

    def wait_out(self, exc: Exception) -> None:
        """Wait for the catalog that failed under the tick, within patience (``Outage``)."""
        waiting = self.outage.wait_or_give_up(exc)
        self.hooks.progress(waiting)
        WAITS.warning(waiting)
        if self.runner.busy:
            self.account(self.runner.finished(self.outage.next_wait_s))
        else:
            time.sleep(self.outage.next_wait_s)


@contextmanager
def released_at_end(runner: LeaseRunner, release_leases: Callable[[], None]) -> Iterator[None]:
    """As the block ends, hand back the leases this process still holds, in one more tick, not at a timeout.

    Once every lease thread of this run has ended, the tick sees the run as ended: it reconciles
    what the leases committed, parks a lease on a poison shard, and revokes the rest (raising their
    fences), granting them again for the next Borrower. So ``describe`` and ``list`` show no lease
    held by a process that is gone. While a thread still runs (the runner was interrupted before it
    ended), nothing is handed back: the next Leader tick or the session timeout does it, as it does
    when the tick cannot run (a race, the catalog away).
    """
    try:
        yield
    finally:
        if not runner.working:
            release_leases()


def release(
    catalog: Catalog, group: GroupConfig, owner_run_id: str, hooks: ConsumeHooks, summary: ConsumeSummary
) -> None:
    """The tick that hands back this run's leases (``released_at_end``) if the last tick left some."""
    last = summary.last_tick
    mine = run_leases(last.state.leases.values(), owner_run_id) if last is not None else []
    if not mine:
        return
    held = handed_back(mine)
    progress = hooks.progress
    try:
        result = tick(catalog, group, partial(at_release, owner_run_id=owner_run_id, others=hooks.observe_others))
    except SourceBlocked as exc:  # the tick committed the hand-back, then found the group stopped
        progress(f"{group.name}: this run ended; {held} handed back; {exc.status()}")
        return
    except Exception as exc:  # releasing early is a courtesy: the next tick or the session timeout still does it
        progress(f"{group.name}: the leases of this run are released at the next tick ({describe_error(exc)})")
        return
    summary.last_tick = result
    progress(f"{group.name}: this run ended; {held} handed back (what they committed stays)")
    if hooks.on_tick is None:
        return
    try:
        hooks.on_tick(result)
    except Exception as exc:  # a report must not hide why the run ended
        progress(f"{group.name}: the last tick's events were not reported ({describe_error(exc)})")


@dataclass
class Outage:
    """The catalog (or its database, or the network to it) failing under the tick: waited out, within patience.

    An outage is the platform's, not the group's: nothing is lost while the tick cannot run, and
    leases in flight retry their own commits. So the loop waits, backing off up to 30 s between
    tries, and goes on once the catalog answers; past ``patience_s`` it stops with
    ``CatalogUnavailable`` (exit 2), naming the cause.
    """

    group: str
    patience_s: float
    since: float | None = None
    next_wait_s: float = 1.0

    def wait_or_give_up(self, exc: BaseException) -> str:
        """What to tell the operator while waiting; raises ``CatalogUnavailable`` once patience ran out."""
        now = time.monotonic()
        self.since = now if self.since is None else self.since
        waited = now - self.since
        cause = describe_error(exc)
        if waited > self.patience_s:
            raise CatalogUnavailable(
                f"group {self.group!r}: the catalog has not answered for {waited:.0f}s ({cause}). Nothing was "
                "lost or dead-lettered: run again once the catalog is back, or raise --max-wait to wait longer"
            ) from exc
        self.next_wait_s = min(self.next_wait_s * 2, 30.0) if waited else 1.0
        return (
            f"{self.group}: waiting for the catalog, unavailable for {waited:.0f}s ({cause}); trying again in "
            f"{self.next_wait_s:.0f}s, and giving up after {self.patience_s:.0f}s without an answer (--max-wait)"
        )

    def over(self) -> None:
        """The catalog answered: the next outage gets the whole patience again."""
        self.since = None
        self.next_wait_s = 1.0


def not_caught_up(
    catalog: Catalog, group: GroupConfig, summary: ConsumeSummary, owner_run_id: str, waited_s: float
) -> NotCaughtUp:
    """Why consuming stopped short: each lease held elsewhere, by whom, and until when."""
    now_ms = int(time.time() * 1000)
    beats = {holder: b.beat_ms for holder, b in read_beats(catalog, group.name).items()}
    state = summary.last_tick.state if summary.last_tick is not None else None
    leases = list(state.leases.values()) if state else []
    parked = [lease for lease in leases if lease.phase is LeasePhase.PARKED]
    held = [lease for lease in leases if lease.owner_run_id != owner_run_id and lease not in parked]
    reasons = [hold_of(lease, beats, group.session_timeout_s).describe(now_ms) for lease in held]
    reasons += [
        f"lease {lease.lease_id} ({', '.join(lease.streams)}) is parked on a poison shard: see `icegroup "
        f"dead-letters {group.name}`, fix the cause, then `icegroup redrive {group.name}`"
        for lease in parked
    ]
    why = "; ".join(reasons) or "Another Leader kept winning the registry."
    return NotCaughtUp(
        f"group {group.name!r} is not caught up: no progress for {waited_s:.0f}s "
        f"({summary.shards} shards committed here). {why}. Run again once those leases are re-granted, "
        "or raise --max-wait"
    )
