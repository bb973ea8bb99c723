"""A warm Borrower: one run, one SparkSession, and every lease the Leader grants, until idle or stopped.

A Borrower run per lease paid a JVM start per lease and two such JVMs shared the cores. A warm
Borrower keeps one session (its Dagster op boots it on a thread as the run starts): it takes
waiting leases from the registry (``iceberg/borrower.py``) into its free slots, runs them at once
(``LeaseRunner``), and asks again every ``poll_s``. One the Leader started for work exits cleanly
with nothing to take for ``idle_timeout_s``, and the Leader starts another when work comes; one of
the group's ``warm_borrowers`` never exits when idle (``iceberg/protocol/borrower.py``). It beats for its
leases all along, so if it is killed they are re-granted: at the Leader's next tick when the
Leader shares its machine and sees its process gone, else a session timeout later; fencing keeps
it from committing them.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from pyspark.sql import SparkSession

from icegroup.iceberg.borrower import SourceWatch, take_leases
from icegroup.iceberg.config.lakehouse import LakehouseConfig
from icegroup.iceberg.errors import BorrowerOutdated
from icegroup.iceberg.protocol.borrower import rehearses
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.store.heartbeats import heartbeat
from icegroup.spark_jobs.borrower.rehearsal import Rehearsal
from icegroup.spark_jobs.borrower.runner import LeaseCallback, LeaseRunner, LeaseTotals
from icegroup.spark_jobs.borrower.user_errors import describe_error
from icegroup.spark_jobs.transforms import load_transform


def borrow(
    spark: Callable[[], SparkSession],
    lakehouse: LakehouseConfig,
    group: GroupConfig,
    run_id: str,
    on_lease: LeaseCallback | None = None,
    progress: Callable[[str], None] = print,
    idle_timeout_s: float | None = 60.0,
    poll_s: float = 1.0,
    lead: Callable[[str], bool] | None = None,
) -> LeaseTotals:
    """Take and run waiting leases, up to ``leases_per_borrower`` at once, until idle for ``idle_timeout_s``.

    With ``idle_timeout_s`` None (a warm Borrower the Leader keeps up) it never exits when idle,
    only when stopped. Either way it exits once its leases have ended if the registry is pinned
    to another config than its own (``BorrowerOutdated``): the Leader starts one on the new config.
    A lease error other than a fence or a parked shard ends the run once its other leases have
    ended; the Leader sees the run failed and re-grants what it held.

    With ``lead`` (a Leader tick given why it runs, and what the caller reports of it), a Borrower with a free slot
    and nothing to take ticks itself once the source's head moved (``SourceWatch``), and takes what
    that tick granted at once: new snapshots become its leases within ``poll_s``, not at the Leader
    sensor's next evaluation. Ticks race safely by the registry's compare-and-swap; one that loses
    or fails leaves the work to the sensor.

    One that never exits when idle rehearses its lease path once, when it first has nothing to do,
    unless a lease of its own has read ``borrower_rehearsal_rows`` rows before (``rehearsal.py``); a
    lease it takes cuts the rehearsal short.
    """
    load_transform(group.transform)  # a transform that does not import fails before any lease is taken
    catalog = lakehouse.catalog()
    summary = LeaseTotals()
    runner = LeaseRunner(spark, lakehouse, group, run_id, group.leases_per_borrower, progress)
    watch = SourceWatch(catalog, group.source) if lead is not None else None
    if watch is not None:
        watched(watch, progress)  # the head as the run starts: a move from here on, busy or not, is seen
    beating = heartbeat(catalog, group.name, run_id, interval_s=group.session_timeout_s / 3, forget_at_end=False)
    rehearsal = Rehearsal(spark, group, f"{lakehouse.catalog_name}.{group.source}", progress)
    with beating, runner, rehearsal:
        idle_since = time.monotonic()
        left, owed = False, False  # the last own tick left shards ungranted; a lease has ended since
        while True:
            try:
                taken = take_leases(catalog, group, run_id, runner.free) if runner.free else []
                if (
                    not taken
                    and runner.free
                    and watch is not None
                    and lead is not None
                    and (watched(watch, progress) or owed)
                ):
                    left = lead("a lease ended and shards were left ungranted" if owed else "the source moved")
                    owed = False
                    taken = take_leases(catalog, group, run_id, runner.free)
            except BorrowerOutdated as exc:
                if not runner.busy:
                    progress(f"{group.name}: Borrower {run_id} exits: {exc}")
                    return summary
                taken = []
            if taken:
                rehearsal.cancel()
            for lease, shards in taken:
                progress(
                    f"{group.name} lease {lease.lease_id}#{lease.attempt}: taken by {run_id}, {len(shards)} shards"
                )
                runner.start(lease, shards)
            if runner.busy:
                running = runner.busy
                summary.add(runner.finished(None if runner.free == 0 else poll_s), on_lease)
                owed = owed or (left and runner.busy < running)  # a lease ended, committed or not
                idle_since = time.monotonic()
            elif idle_timeout_s is not None and time.monotonic() - idle_since >= idle_timeout_s:
                progress(f"{group.name}: Borrower {run_id} took no lease for {idle_timeout_s:.0f}s; exiting")
                return summary
            else:
                largest = max((report.rows_in for report in summary.reports), default=0)
                if rehearses(idle_timeout_s is None, rehearsal.started, largest, group.borrower_rehearsal_rows):
                    rehearsal.start()
                time.sleep(poll_s)


def watched(watch: SourceWatch, progress: Callable[[str], None]) -> bool:
    """Whether the source moved; one that cannot be read counts as not moved (the sensor plans), said once."""
    try:
        moved = watch.moved()
    except Exception as exc:
        if not watch.failing:
            progress(
                f"source {watch.source} could not be read ({describe_error(exc)}); the Leader sensor plans its work"
            )
        watch.failing = True
        return False
    watch.failing = False
    return moved
