"""Latency side by side: how long a small append takes from its source commit until readers see it in the sink.

Workload L: a producer commits APPENDS snapshots of ROWS rows at random gaps of GAP_S seconds (the
same gaps for every arm, from a fixed seed). Each arm has a source table of its own and runs
alone, in turn:

- ``dagster``: a running ``dagster dev``; the group's Leader sensor ticks every
  ``sensor_interval_s`` (default 5 s) and warm Borrower runs take the leases it grants;
- ``B1``: Structured Streaming with trigger ``processingTime`` of 5 s (``baselines.py stream``);
- ``follow``: ``icegroup consume GROUP --follow --poll 5``, one process that ticks and consumes.

Before the measured appends each arm gets one warm-up append and is waited for until it shows in
the sink, so JVM and run starts are not counted as latency (they are in the throughput benchmark).
A commit's latency runs from the source snapshot's commit time to the moment the sink's snapshot
log says the first sink snapshot holding all its rows became current. Every sink is checked equal
to its source. Run: ``make bench`` (writes tests/benchmarks/results/latency.json and the plot).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from pyiceberg.catalog import Catalog
from pyiceberg.table import Table

from icegroup.iceberg.config.lakehouse import load_lakehouse
from icegroup.iceberg.protocol.group import GroupConfig
from tests.benchmarks.measure import ICEGROUP, REPO, check_same_rows, keys, visible_ms, wait_for
from tests.benchmarks.plot import plot
from tests.benchmarks.workloads import append_events
from tests.dagster_dev import dagster_dev, dagster_env, new_instance
from tests.factories import create_source, write_groups
from tests.stack_env import home_env

APPENDS = 30
ROWS = 300
GAP_S = (2.0, 6.0)
TRIGGER_S = 5
ARMS = ("dagster", "B1", "follow")
TRANSFORM = "icegroup.spark_jobs.transforms:enrich_events"
RESULTS = Path(__file__).parent / "results" / "latency.json"


def has_rows(catalog: Catalog, sink: str, rows: int) -> Callable[[], bool]:
    """Whether the sink exists and holds ``rows`` rows."""

    def check() -> bool:
        if not catalog.table_exists(sink):
            return False
        return len(keys(catalog.load_table(sink))) >= rows

    return check


@contextmanager
def consumer(arm: str, folder: Path, env: dict[str, str], group: GroupConfig) -> Iterator[Path]:
    """The arm's consumer, running until the block ends; yields its log."""
    log = folder / f"{arm}.log"
    if arm == "dagster":
        with dagster_dev(env, log):
            yield log
        return
    if arm == "B1":
        stop = folder / "stop"
        baseline = [sys.executable, "-m", "tests.benchmarks.baselines", "stream", group.source, group.sink]
        command = [*baseline, "--trigger", str(TRIGGER_S), "--checkpoint", str(folder / "ck"), "--stop-file", str(stop)]
    else:
        stop = None
        command = [ICEGROUP, "--groups", env["ICEGROUP_GROUPS"], "consume", group.name, "--follow",
                   "--poll", str(TRIGGER_S)]  # fmt: skip
    with log.open("w") as out:
        process = subprocess.Popen(command, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            yield log
        finally:
            if stop is not None:
                stop.touch()
            else:
                process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def seen_at(sink: Table, appends: list[tuple[int, int]]) -> list[int]:
    """For each append (its first key, its row count): when the sink first showed all its rows (ms)."""
    log = visible_ms(sink)
    seen: list[int] = []
    entry = 0
    for first, count in appends:
        want = np.arange(first, first + count)
        while entry < len(log) and not np.isin(want, keys(sink, log[entry][1])).all():
            entry += 1
        if entry == len(log):
            raise RuntimeError(f"rows {first}..{first + count - 1} never became visible in {sink.name()}")
        seen.append(log[entry][0])
    return seen


def run_arm(arm: str, folder: Path) -> list[float]:
    """Latency in seconds of each measured append for one arm; its sink is checked."""
    home = folder / "lake"
    catalog = load_lakehouse(env=home_env(home)).catalog()
    source_name, sink_name = f"lat.events_{arm.lower()}", f"lat.out_{arm.lower()}"
    source = create_source(catalog, source_name)
    group = GroupConfig(name=f"lat_{arm.lower()}", source=source_name, sink=sink_name, transform=TRANSFORM)
    env = dagster_env(home, write_groups(folder / "groups.yaml", group), folder / "dagster")
    new_instance(folder / "dagster")
    append_events(source, 1, ROWS, seed=0)
    gaps = random.Random(7)
    with consumer(arm, folder, env, group) as log:
        wait_for(has_rows(catalog, sink_name, ROWS), 300, f"{arm}: the warm-up append in the sink", log)
        committed: list[tuple[int, int]] = []
        for index in range(1, APPENDS + 1):
            time.sleep(gaps.uniform(*GAP_S))
            snapshot = append_events(source, 1 + index * ROWS, ROWS, seed=index)
            committed.append((snapshot.timestamp_ms, 1 + index * ROWS))
        wait_for(has_rows(catalog, sink_name, ROWS * (APPENDS + 1)), 120, f"{arm}: every append in the sink", log)
    check_same_rows(catalog, source_name, sink_name)
    seen = seen_at(catalog.load_table(sink_name), [(first, ROWS) for _, first in committed])
    return [round((visible - at) / 1000, 2) for (at, _), visible in zip(committed, seen, strict=True)]


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (nearest rank), as the latency tables in the README give it."""
    ranked = sorted(values)
    return ranked[min(len(ranked) - 1, max(0, round(q / 100 * len(ranked) + 0.5) - 1))]


def main() -> None:
    """Run the arms in turn (``--arm`` for some; the others keep their recorded figures) and record them."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arm", choices=ARMS, action="append", help="default: every arm")
    args = parser.parse_args()
    recorded = json.loads(RESULTS.read_text())["latency_s"] if args.arm and RESULTS.exists() else {}
    latencies: dict[str, list[float]] = {arm: recorded[arm] for arm in ARMS if arm in recorded}
    for arm in args.arm or ARMS:
        with tempfile.TemporaryDirectory(prefix=f"icegroup-bench-latency-{arm}-") as folder:
            latencies[arm] = run_arm(arm, Path(folder))
        stats = {q: percentile(latencies[arm], q) for q in (50, 90, 95)}
        print(f"L {arm}: p50 {stats[50]:.1f}s  p90 {stats[90]:.1f}s  p95 {stats[95]:.1f}s", flush=True)
    result = {
        "workload": {"appends": APPENDS, "rows_per_append": ROWS, "gap_s": list(GAP_S), "trigger_s": TRIGGER_S},
        "cores": os.cpu_count(),
        "latency_s": {arm: latencies[arm] for arm in ARMS if arm in latencies},
        "p50_s": {arm: percentile(v, 50) for arm, v in latencies.items()},
        "p90_s": {arm: percentile(v, 90) for arm, v in latencies.items()},
        "p95_s": {arm: percentile(v, 95) for arm, v in latencies.items()},
        "max_s": {arm: max(v) for arm, v in latencies.items()},
        "mean_s": {arm: round(statistics.mean(v), 2) for arm, v in latencies.items()},
    }
    result["follow_over_B1_p50"] = round(result["p50_s"]["follow"] / result["p50_s"]["B1"], 2)  # type: ignore[index]
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    plot()


if __name__ == "__main__":
    main()
