"""A Borrower process for fault injection: the chaos suite and the zombie test start and kill these.

Modes:

- ``consume``: Leader and Borrower in one process, as ``icegroup consume`` runs, until a ``stop``
  file appears. Several of these run at once, so several Leaders race for the registry. A lease's
  owner is this process's run id. Every other worker's run looks alive, as a ``kill -9``'d
  ``icegroup consume`` run stays STARTED in Dagster: only its stopped heartbeat shows that it is
  gone, after the group's default ``session_timeout_s``. The pid file is only for the chaos runner,
  to name the leases a killed worker held.
- ``borrow``: a warm Borrower, as a ``<group>_borrower`` run does (``icegroup.spark_jobs.borrower.warm``): one
  SparkSession, taking the leases a separate Leader granted, until the stop file appears. Its run
  looks alive to the Leader as long as it exists, so only its heartbeat shows that it was killed.
- ``leader``: the Leader alone, as the sensor runs it: a tick every ``TICK_S`` seconds that grants
  leases to wait for a Borrower, until the stop file appears.
- ``lease``: execute one granted lease attempt.
- ``tick``: one Leader tick that sees every Borrower run as ``--observe`` says, as a sensor does.

The lakehouse comes from ``ICEGROUP_*`` variables, the group from a YAML file.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
import uuid
from pathlib import Path

from pyiceberg.catalog import Catalog
from pyspark.sql import SparkSession

from icegroup.iceberg.config.groups import load_groups
from icegroup.iceberg.config.lakehouse import LakehouseConfig, load_lakehouse
from icegroup.iceberg.errors import BorrowerOutdated, NotCaughtUp, RegistryConflict, ResetInterrupted, StaleLease
from icegroup.iceberg.leader import tick
from icegroup.iceberg.protocol.borrower import ungranted
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.liveness import RunState
from icegroup.iceberg.protocol.state import Lease
from icegroup.spark_jobs.borrower.lease import fetch_lease, run_lease
from icegroup.spark_jobs.borrower.warm import borrow
from icegroup.spark_jobs.session import get_session
from tests.consuming import consume

STALE_EXIT = 3
TICK_S = 1.0
# A Borrower looks for the stop file after this long idle: the runner gives every worker 60 s to stop, and a
# Borrower idle for the group's borrower_idle_s (60 s) would not make it once it had just finished a lease.
STOP_CHECK_S = 5.0


def looks_running(lease: Lease) -> RunState:
    """Another worker's run, as an orchestrator without run monitoring sees it: running, dead or alive."""
    return RunState.MISSING if lease.owner_run_id is None else RunState.RUNNING


def ready(folder: Path, name: str) -> tuple[str, LakehouseConfig, SparkSession]:
    """A worker's run id (in its pid file, for the chaos runner), its lakehouse and its warm session."""
    run_id = f"{name}-{uuid.uuid4().hex[:8]}"
    (folder / f"{run_id}.pid").write_text(str(os.getpid()))
    lakehouse = load_lakehouse()
    spark = get_session(lakehouse)
    print(f"ready {run_id}", flush=True)
    return run_id, lakehouse, spark


def run_consume(group: GroupConfig, folder: Path, name: str) -> None:
    """Consume until the stop file appears; every lease this process is granted runs here."""
    run_id, lakehouse, spark = ready(folder, name)
    while not (folder / "stop").exists():
        try:
            consume(
                lambda: spark, lakehouse, group, run_id, looks_running,
                progress=lambda line: print(line, flush=True), max_wait_s=20, poll_s=0.2,
            )  # fmt: skip
        except NotCaughtUp as exc:
            print(f"waiting on leases held elsewhere: {exc}", flush=True)
        except ResetInterrupted as exc:  # the chaos runner completes the reset, as an operator would
            print(f"waiting for a reset to be completed: {exc}", flush=True)
        time.sleep(0.3)


def run_borrow(group: GroupConfig, folder: Path, name: str) -> None:
    """A warm Borrower until the stop file appears: it takes leases, runs them, and waits idle in between.

    It also ticks as a Leader itself when the source moved, as the Dagster Borrower op does, so the
    kills land in a Borrower's own ticks too.
    """
    run_id, lakehouse, spark = ready(folder, name)
    catalog = lakehouse.catalog()
    while not (folder / "stop").exists():  # the same run takes leases again at once, as a warm Borrower does
        borrow(lambda: spark, lakehouse, group, run_id, progress=lambda line: print(line, flush=True),
               idle_timeout_s=STOP_CHECK_S, poll_s=0.5, lead=lambda why: lead(catalog, group, why))  # fmt: skip


def lead(catalog: Catalog, group: GroupConfig, why: str) -> bool:
    """A Borrower's own Leader tick: it backs off from what stops a Leader's tick, as ``run_leader`` does."""
    try:
        result = tick(catalog, group, looks_running, pin_config=False)
    except (RegistryConflict, ResetInterrupted, BorrowerOutdated) as exc:
        print(f"borrower's tick ({why}): {exc}", flush=True)
        return False
    print(f"borrower's tick ({why}): {len(result.launch)} to launch, {len(result.committed)} committed", flush=True)
    return ungranted(result.state)


def run_leader(group: GroupConfig, folder: Path) -> None:
    """Tick every ``TICK_S`` until the stop file appears; every Borrower run looks alive, as in Dagster."""
    catalog = load_lakehouse().catalog()
    (folder / f"leader-{uuid.uuid4().hex[:8]}.pid").write_text(str(os.getpid()))
    print("ready leader", flush=True)
    while not (folder / "stop").exists():
        try:
            result = tick(catalog, group, looks_running)
        except RegistryConflict as exc:
            print(f"backing off: {exc}", flush=True)
        except (NotCaughtUp, ResetInterrupted) as exc:
            print(f"leader: {exc}", flush=True)
        else:
            if result.launch or result.committed:
                print(f"tick: {len(result.launch)} granted, {len(result.committed)} committed", flush=True)
        time.sleep(TICK_S)


def run_one_lease(group: GroupConfig, lease_id: str, attempt: int) -> int:
    """Execute one lease attempt; exit code 3 when it was fenced."""
    lakehouse = load_lakehouse()
    spark = get_session(lakehouse)
    lease, shards = fetch_lease(lakehouse.catalog(), group.name, lease_id, attempt)
    print("ready", flush=True)
    try:
        report = run_lease(spark, lakehouse, group, lease, shards, progress=lambda line: print(line, flush=True))
    except StaleLease as exc:
        print(f"fenced: {exc}", flush=True)
        return STALE_EXIT
    print(f"committed {len(report.committed)}", flush=True)
    return 0


def run_tick(group: GroupConfig, observed: str) -> int:
    """One Leader tick; prints what it would launch."""
    result = tick(load_lakehouse().catalog(), group, lambda _: RunState(observed))
    print(f"launch {len(result.launch)}", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point: ``python -m tests.chaos.worker consume|lease ...``."""
    parser = argparse.ArgumentParser(prog="tests.chaos.worker")
    parser.add_argument("mode", choices=["consume", "borrow", "leader", "lease", "tick"])
    parser.add_argument("--groups", type=Path, required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--folder", type=Path, help="consume, borrow, leader: pid files and the stop file")
    parser.add_argument("--name", default="w")
    parser.add_argument("--lease")
    parser.add_argument("--attempt", type=int, default=0)
    parser.add_argument("--observe", default="missing", help="tick: the run state every lease's run has")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    group = load_groups(args.groups)[args.group]
    if args.mode == "consume":
        run_consume(group, args.folder, args.name)
        return 0
    if args.mode == "borrow":
        run_borrow(group, args.folder, args.name)
        return 0
    if args.mode == "leader":
        run_leader(group, args.folder)
        return 0
    if args.mode == "tick":
        return run_tick(group, args.observe)
    return run_one_lease(group, args.lease, args.attempt)


if __name__ == "__main__":
    sys.exit(main())
