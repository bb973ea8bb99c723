"""Long history: does a Leader tick cost the same after 10,000 ticks and sink commits as after 100?

A group that runs for a year must stay as fast as on its first day. Every tick commits the
registry and the lineage table, and every lease a sink snapshot, so each table's metadata grows by
a snapshot per tick; pyiceberg copies the whole metadata on each commit, so without expiry a tick
gets slower as history grows. Here ``icegroup expire`` runs on its schedule (every
``EXPIRE_EVERY`` ticks, keeping the last ``KEEP_LAST`` snapshots of the state tables), as the
Dagster schedule would.

Two groups in one lakehouse, measured side by side (these machines are noisy):
- ``short``: a group with ``BASELINE`` ticks and commits behind it, then only measured;
- ``long``: the group driven through ``COMMITS`` ticks and commits, measured at each checkpoint.
Each tick of the drive is busy: one new source snapshot to plan, the previous lease's commit to
reconcile and record in lineage, one lease to grant. The Borrower's sink commit is made without
Spark (``tests/sink_commits.py``: the rows and summary properties a Borrower commits), since Spark
costs the same at any history and would only stretch the run. At a checkpoint, each round measures
a busy tick and an idle tick (nothing new) of each group in turn; the ratio long/short is the
answer (the issue's bar: at most 2x).

Run: ``python -m tests.benchmarks.bench_long_history [--commits N]`` (writes
tests/benchmarks/results/long_history.json, and long_history.png).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure
from pyiceberg.catalog import Catalog
from pyiceberg.table import Table, TableProperties

from icegroup.iceberg.config.lakehouse import load_lakehouse
from icegroup.iceberg.leader import tick
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.liveness import RunState
from icegroup.iceberg.protocol.retention import StateRetention
from icegroup.iceberg.retention import expire
from icegroup.iceberg.store.lineage import lineage_identifier
from icegroup.iceberg.store.registry import registry_identifier
from tests.factories import create_source, events
from tests.sink_commits import commit_lease, sink_of
from tests.stack_env import home_env

COMMITS = 10_000
BASELINE = 100
EXPIRE_EVERY = 100
KEEP_LAST = 100
ROUNDS = 9
CHECKPOINTS = (100, 300, 1_000, 3_000, 10_000)
ROWS = 3
RESULTS = Path(__file__).parent / "results" / "long_history.json"
PNG = RESULTS.with_suffix(".png")
OWNER = "bench-borrower"


def running(_: object) -> RunState:
    """Every lease's run looks alive: the drive commits each lease before the next tick."""
    return RunState.RUNNING


@dataclass
class Driven:
    """A group driven tick by tick: a source snapshot, a tick, the granted lease's sink commit."""

    catalog: Catalog
    group: GroupConfig
    source: Table
    next_id: int = 1
    ticks: int = 0
    commits: int = 0
    expiries: int = 0

    def tick(self) -> float:
        """One Leader tick; commits the lease it grants, as a Borrower would; returns the tick's milliseconds."""
        started = time.perf_counter()
        result = tick(self.catalog, self.group, running, owner_run_id=OWNER)
        elapsed = (time.perf_counter() - started) * 1000
        self.ticks += 1
        for lease in result.launch:
            commit_lease(self.catalog, self.group, result.state, lease, OWNER)
            self.commits += len(lease.shard_ids)
        if self.ticks % EXPIRE_EVERY == 0:
            self.expire()
        return elapsed

    def expire(self) -> None:
        """``icegroup expire`` of the group's tables, as its schedule runs it."""
        keep = StateRetention(keep_last=KEEP_LAST, keep_for=timedelta(0))
        expire(self.catalog, {self.group.name: self.group}, keep, execute=True)
        self.expiries += 1

    def busy(self) -> float:
        """A tick with a new source snapshot to plan (and the last lease's commit to reconcile)."""
        self.source.append(events(self.next_id, ROWS, self.next_id, regions=("eu",)))
        self.next_id += ROWS
        return self.tick()

    def idle(self) -> float:
        """A tick with nothing new, after one that reconciled the last commit."""
        self.tick()
        return self.tick()

    def sizes(self) -> dict[str, int]:
        """Snapshots each of the group's tables keeps now: what expiry bounds."""
        names = {"source": self.group.source, "sink": self.group.sink}
        names |= {"registry": registry_identifier(self.group.name), "lineage": lineage_identifier(self.group.name)}
        return {role: len(self.catalog.load_table(name).snapshots()) for role, name in names.items()}


def driven(catalog: Catalog, name: str) -> Driven:
    """A new group on a new one-stream source; no replay horizon, so expiry keeps only what the group needs.

    Source and sink merge their manifests on append, as Iceberg's Java writers (Spark, Flink, the
    Borrower's commit) do by default; pyiceberg's own appends would otherwise grow each table's
    manifest list by one entry per commit, a cost of the stand-in writers, not of icegroup.
    """
    group = GroupConfig(name=name, source=f"{name}.events", sink=f"{name}.out", replay_retention=timedelta(0))
    source = create_source(catalog, group.source)
    for table in (source, sink_of(catalog, group)):
        table.transaction().set_properties({TableProperties.MANIFEST_MERGE_ENABLED: "true"}).commit_transaction()
    return Driven(catalog, group, catalog.load_table(group.source))


def checkpoint(short: Driven, long: Driven) -> dict[str, Any]:
    """Busy and idle ticks of both groups, in turn, ``ROUNDS`` times; medians and the long/short ratios.

    The group measured first alternates from round to round, so neither arm always follows the other.
    Both groups are expired first: a commit to a state table costs in proportion to the snapshots
    it keeps (pyiceberg copies the metadata), which rise from ``KEEP_LAST`` to about three times
    that between two expiries. Measured at the same point of that cycle, the two differ by their
    history alone.
    """
    short.expire()
    long.expire()
    samples: dict[str, list[float]] = {"short_busy": [], "long_busy": [], "short_idle": [], "long_idle": []}
    for round_ in range(ROUNDS):
        arms = [("short", short), ("long", long)]
        for name, arm in arms if round_ % 2 == 0 else arms[::-1]:
            samples[f"{name}_busy"].append(arm.busy())
        for name, arm in arms if round_ % 2 == 0 else arms[::-1]:
            samples[f"{name}_idle"].append(arm.idle())
    ms = {key: round(statistics.median(values), 1) for key, values in samples.items()}
    return {
        "long_ticks": long.ticks,
        "long_commits": long.commits,
        "short_commits": short.commits,
        "median_ms": ms,
        "busy_ratio": round(ms["long_busy"] / ms["short_busy"], 2),
        "idle_ratio": round(ms["long_idle"] / ms["short_idle"], 2),
        "long_snapshots_kept": long.sizes(),
        "load_avg": [round(x, 2) for x in os.getloadavg()],
    }


def main(argv: list[str] | None = None) -> int:
    """Drive both groups, measure at each checkpoint, print and record the ratios."""
    parser = argparse.ArgumentParser(prog="tests.benchmarks.bench_long_history")
    parser.add_argument("--commits", type=int, default=COMMITS, help="ticks and sink commits of the long group")
    args = parser.parse_args(argv)
    home = Path(tempfile.mkdtemp(prefix="icegroup-long-history-"))
    catalog = load_lakehouse(env=home_env(home)).catalog()
    short, long = driven(catalog, "short"), driven(catalog, "long")
    for _ in range(BASELINE):
        short.busy()
    checkpoints = sorted({c for c in (*CHECKPOINTS, args.commits) if c <= args.commits})
    found = []
    started = time.monotonic()
    for target in checkpoints:
        while long.commits < target:
            long.busy()
            if long.ticks % 500 == 0:
                print(
                    f"long: {long.ticks} ticks, {long.commits} commits, {time.monotonic() - started:.0f}s", flush=True
                )
        found.append(checkpoint(short, long))
        first = found[0]["median_ms"]
        found[-1]["long_vs_itself_at_first_checkpoint"] = {
            key: round(found[-1]["median_ms"][f"long_{key}"] / first[f"long_{key}"], 2) for key in ("busy", "idle")
        }
        print(json.dumps(found[-1]), flush=True)
        done = target == checkpoints[-1]
        record(report_of(args.commits, found, time.monotonic() - started, long.expiries, complete=done))
    return 0


def report_of(
    commits: int, checkpoints: list[dict[str, Any]], drive_s: float, expiries: int, complete: bool
) -> dict[str, Any]:
    """What a run found so far; ``complete`` once it measured its last checkpoint."""
    return {
        "what": (
            f"Leader tick (busy: one new snapshot, one commit to reconcile, one grant; idle: nothing new) of a group "
            f"driven to {commits} ticks and sink commits, against one with {BASELINE}, side by side; "
            f"icegroup expire every {EXPIRE_EVERY} ticks keeping {KEEP_LAST} state snapshots; "
            f"median of {ROUNDS} rounds per checkpoint"
        ),
        "bar": "busy_ratio and idle_ratio at most 2.0 at the last checkpoint",
        "read": (
            "busy_ratio/idle_ratio: the long group against the 100-commit group measured in the same rounds; "
            "long_vs_itself_at_first_checkpoint: the long group against itself at 100 commits (another moment)"
        ),
        "complete": complete,
        "machine": {"cpus": os.cpu_count()},
        "drive_s": round(drive_s, 1),
        "expiries": expiries,
        "checkpoints": checkpoints,
    }


def record(report: dict[str, Any]) -> None:
    """Write the report and its plot; a run that is stopped keeps what it measured up to then."""
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    print(f"recorded {RESULTS} and {plot(report)} (complete: {report['complete']})", flush=True)


def plot(report: dict[str, Any]) -> Path:
    """Tick times of both arms against the long group's commits, and the ratio against the 2x bar."""
    points = report["checkpoints"]
    commits = [p["long_commits"] for p in points]
    figure = Figure(figsize=(12, 4.5))  # no pyplot: no GUI backend, no global figure state
    left, right = figure.subplots(1, 2)
    for key, label in (("busy", "busy tick"), ("idle", "idle tick")):
        left.plot(commits, [p["median_ms"][f"long_{key}"] for p in points], marker="o", label=f"{label}, long group")
        left.plot(commits, [p["median_ms"][f"short_{key}"] for p in points], marker="x", linestyle="--",
                  label=f"{label}, {BASELINE}-commit group (same moment)")  # fmt: skip
        right.plot(commits, [p[f"{key}_ratio"] for p in points], marker="o", label=label)
    left.set_xscale("log")
    left.set_xlabel("ticks and sink commits behind the long group")
    left.set_ylabel("median tick (ms)")
    left.set_title(f"Leader tick, icegroup expire every {EXPIRE_EVERY} ticks")
    left.legend(fontsize=8)
    right.axhline(2.0, color="red", linewidth=0.8, label="the bar: 2x")
    right.axhline(1.0, color="grey", linewidth=0.8)
    right.set_xscale("log")
    right.set_ylim(0, max(2.5, *(p["busy_ratio"] for p in points), *(p["idle_ratio"] for p in points)) * 1.1)
    right.set_xlabel("ticks and sink commits behind the long group")
    right.set_ylabel(f"long group / {BASELINE}-commit group")
    right.set_title("Cost against history (lower is better)")
    right.legend(fontsize=8)
    if not report["complete"]:
        last = report["checkpoints"][-1]["long_commits"]
        figure.suptitle(f"run stopped after the checkpoint at {last:,} commits, before its target")
    figure.tight_layout()
    figure.savefig(PNG, dpi=110)
    return PNG


if __name__ == "__main__":
    sys.exit(main())
