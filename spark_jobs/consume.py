"""Consume until caught up: the Leader tick and the Borrower in one loop, in one process.

This is what ``icegroup consume`` and a scheduled group's run execute. It uses the same ``tick`` as
the Leader sensor and the same ``run_lease`` as a Borrower run; it only differs in who executes a
lease: this process, right after the tick that granted it, with one warm SparkSession.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from pyspark.sql import SparkSession

from iceberg.errors import GroupStopped, PoisonShard, RegistryConflict, StaleLease
from iceberg.groups import GroupConfig
from iceberg.lakehouse import LakehouseConfig
from iceberg.leader import RunObserver, TickResult, tick
from iceberg.protocol.liveness import RunState
from iceberg.protocol.state import Lease
from spark_jobs.borrower import LeaseReport, run_lease
from spark_jobs.transforms import load_transform

LeaseCallback = Callable[[Lease, LeaseReport], None]


@dataclass
class ConsumeSummary:
    """Totals of one consume call."""

    ticks: int = 0
    leases: int = 0
    shards: int = 0
    rows_in: int = 0
    rows_out: int = 0
    caught_up: bool = False
    last_tick: TickResult | None = None
    reports: list[LeaseReport] = field(default_factory=list)


def consume(
    spark: SparkSession,
    lakehouse: LakehouseConfig,
    group: GroupConfig,
    owner_run_id: str,
    observe_others: RunObserver,
    on_lease: LeaseCallback | None = None,
    progress: Callable[[str], None] = print,
    max_wait_s: float = 600.0,
    poll_s: float = 1.0,
    until_caught_up: bool = True,
) -> ConsumeSummary:
    """Tick and execute this process's leases until the group is caught up with the source head.

    Leases held by other live Borrowers are waited for, up to ``max_wait_s`` without progress.
    With ``until_caught_up=False`` it stops after one round: one tick and the leases it granted.
    A Borrower error propagates: the run fails, and the next tick re-grants the lease. Two are
    expected and handled here: a lease fenced by a re-grant elsewhere, and a shard parked by
    ``on_poison: park``; the loop goes on with the other streams. A stopped group raises
    ``GroupStopped``.
    """
    executed: dict[tuple[str, int], RunState] = {}  # leases this process ran to the end

    def observe(lease: Lease) -> RunState:
        if lease.owner_run_id == owner_run_id:
            return executed.get((lease.lease_id, lease.attempt), RunState.MISSING)
        return observe_others(lease)

    load_transform(group.transform)  # a transform that does not import fails before any lease is granted
    catalog = lakehouse.catalog()
    summary = ConsumeSummary()
    idle_since = time.monotonic()
    while True:
        try:
            result = tick(catalog, group, observe, owner_run_id=owner_run_id)
        except RegistryConflict as exc:
            progress(f"{group.name}: backing off: {exc}")
            if time.monotonic() - idle_since > max_wait_s:
                return summary
            time.sleep(poll_s)
            continue
        summary.ticks += 1
        summary.last_tick = result
        if result.stopped:
            raise GroupStopped(result.stop_message())
        if result.caught_up:
            summary.caught_up = True
            progress(f"{group.name}: caught up at source snapshot {result.source_head}")
            return summary
        mine = [lease for lease in result.launch if lease.owner_run_id == owner_run_id]
        pending = len(result.state.shards)
        progress(
            f"{group.name}: tick {summary.ticks}: {result.new_shards} new shards, {len(result.committed)} "
            f"committed, {pending} pending, {len(result.state.leases)} leases in flight ({len(mine)} here)"
        )
        for lease in mine:
            shards = [result.state.shards[sid] for sid in lease.shard_ids if sid in result.state.shards]
            try:
                report = run_lease(spark, lakehouse, group, lease, shards, progress=progress)
            except (StaleLease, PoisonShard) as exc:
                if isinstance(exc, PoisonShard) and group.on_poison == "stop":
                    raise
                executed[(lease.lease_id, lease.attempt)] = RunState.FAILED
                progress(f"{group.name}: lease {lease.lease_id} attempt {lease.attempt} ended: {exc}")
                continue
            executed[(lease.lease_id, lease.attempt)] = RunState.SUCCEEDED
            summary.leases += 1
            summary.shards += len(report.committed)
            summary.rows_in += report.rows_in
            summary.rows_out += report.rows_out
            summary.reports.append(report)
            if on_lease is not None:
                on_lease(lease, report)
        if not until_caught_up:
            return summary
        if mine or result.new_shards or result.committed:
            idle_since = time.monotonic()
        elif time.monotonic() - idle_since > max_wait_s:
            progress(f"{group.name}: no progress for {max_wait_s:.0f}s; leases held elsewhere; stopping")
            return summary
        else:
            time.sleep(poll_s)
