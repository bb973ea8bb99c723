"""The default Dagster path with its cold start, timed from the daemon's start, beside a plain Spark job.

``bench_throughput``'s Dagster arms run on a ``dagster dev`` that is already up: its warm arm is
timed from the append, its fallback from turning the sensor on. This one times what a deployment
pays from nothing: a W1 backlog is committed, and then ``dagster-daemon run`` starts over a groups
file that holds one group with the defaults (``warm_borrowers: 1``). The arm is timed from the
daemon's start to the sink commit that catches the group up: the daemon's and the code location's
start, the Leader sensor's first tick, the launch of the Borrower run, its cold JVM and the work.
No webserver runs. The plain job (A2, ``baselines.py batch``) and Structured Streaming's
``AvailableNow`` (B1, ``baselines.py stream``), each a process with its own JVM start, take turns
with it in a rotating order, timed the same way, from the process's start to its sink's last
commit (the exit after that is left out, as the Borrower's is), so each round's ratios set the arms
side by side; every sink is checked equal to its source, key by key. When the round ends the daemon is stopped
with every process it started, the Borrower run (a process the code server spawns) and its JVM
among them, and the round checks that none is left. The run before is kept under ``run_before``.

Run: ``python -m tests.benchmarks.bench_daemon_start`` (writes tests/benchmarks/results/daemon_start.json).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from icegroup.iceberg.config.lakehouse import load_lakehouse
from icegroup.iceberg.protocol.group import GroupConfig
from tests.benchmarks.measure import (
    baseline_command,
    caught_up,
    check_same_rows,
    provenance,
    record_beside_the_run_before,
    run_timed,
    visible_ms,
    wait_for,
)
from tests.benchmarks.workloads import W1, fill
from tests.dagster_dev import dagster_daemon, dagster_env, new_instance
from tests.factories import create_source, write_groups
from tests.stack_env import home_env

ROUNDS = 3
SOURCE = "bench.events"
TRANSFORM = "icegroup.spark_jobs.transforms:enrich_events"
RESULTS = Path(__file__).parent / "results" / "daemon_start.json"


def daemon_round(index: int, folder: Path, home: Path) -> float:
    """Seconds from ``dagster-daemon run``'s start to the sink commit that catches a new default group up."""
    name = f"daemon_{index}"
    groups = write_groups(
        folder / f"groups_{index}.yaml",
        GroupConfig(name=name, source=SOURCE, sink=f"bench.{name}", transform=TRANSFORM),
    )
    env = dagster_env(home, groups, folder / f"dagster_{index}")
    new_instance(folder / f"dagster_{index}")
    catalog = load_lakehouse(env=home_env(home)).catalog()
    log = folder / f"{name}.log"
    started_ms = time.time() * 1000
    with dagster_daemon(env, log):
        wait_for(lambda: caught_up(catalog, name), 900, f"{name} caught up", log)
    elapsed = (visible_ms(catalog.load_table(f"bench.{name}"))[-1][0] - started_ms) / 1000
    check_same_rows(catalog, SOURCE, f"bench.{name}")
    wait_for(lambda: not still_running(env["DAGSTER_HOME"]), 60, f"{name}'s processes gone with the daemon", log)
    return elapsed


def still_running(dagster_home: str) -> list[str]:
    """Pids of the round's Dagster processes and of Spark drivers on this machine (none runs beside a benchmark).

    A run of the default launcher is a process the code server spawns (``multiprocessing.spawn``),
    not a ``dagster api execute_run`` command line; the code server names the instance's home.
    """
    found = []
    for pattern in ("multiprocessing.spawn", "dagster-daemon", dagster_home, "org.apache.spark.deploy.SparkSubmit"):
        found += subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout.split()
    return found


def baseline_round(arm: str, index: int, folder: Path, home: Path) -> float:
    """Seconds from the start of one baseline process (A2 or B1) over the same source to its sink's last commit."""
    sink = f"bench.{arm.lower()}_{index}"
    env = {**os.environ, **home_env(home)}
    if arm == "A2":
        command = baseline_command("batch", SOURCE, sink)
    else:
        command = baseline_command("stream", SOURCE, sink, "--checkpoint", str(folder / f"checkpoint_{index}"))
    started_ms = time.time() * 1000
    run_timed(command, env, folder / f"{arm.lower()}_{index}.log")
    catalog = load_lakehouse(env=home_env(home)).catalog()
    check_same_rows(catalog, SOURCE, sink)
    return (visible_ms(catalog.load_table(sink))[-1][0] - started_ms) / 1000


def main() -> None:
    """Fill W1 once, take the three arms in turn for ``--rounds`` rounds, and record medians and ratios."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="rounds per arm (default %(default)s)")
    args = parser.parse_args()
    measured = provenance()  # before the rounds: the commit whose code they run
    seconds: dict[str, list[float]] = {"A2": [], "B1": [], "dagster_from_daemon": []}
    with tempfile.TemporaryDirectory(prefix="icegroup-bench-daemon-", ignore_cleanup_errors=True) as name:
        folder = Path(name)
        home = folder / "lake"
        fill(create_source(load_lakehouse(env=home_env(home)).catalog(), SOURCE), W1)
        for index in range(args.rounds):
            for arm in [*seconds][index % 3 :] + [*seconds][: index % 3]:
                if arm == "dagster_from_daemon":
                    elapsed = daemon_round(index, folder, home)
                else:
                    elapsed = baseline_round(arm, index, folder, home)
                seconds[arm].append(round(elapsed, 2))
                print(f"W1 round {index + 1}/{args.rounds}: {arm} {elapsed:.1f}s, sink verified", flush=True)
    medians = {arm: round(statistics.median(values), 2) for arm, values in seconds.items()}
    result = {
        **measured,
        "workload": f"W1: {W1.snapshots} snapshots of {W1.rows_per_snapshot} rows, committed before any arm starts",
        "cores": os.cpu_count(),
        "seconds": seconds,
        "median_s": medians,
        "throughput_over_A2": {arm: round(medians["A2"] / median, 2) for arm, median in medians.items()},
        "throughput_over_B1": {arm: round(medians["B1"] / median, 2) for arm, median in medians.items()},
        "round_ratios": {
            baseline: [round(b / d, 2) for b, d in zip(seconds[baseline], seconds["dagster_from_daemon"], strict=True)]
            for baseline in ("A2", "B1")
        },
        "includes_jvm_start": {arm: True for arm in seconds},
    }
    record_beside_the_run_before(RESULTS, result)
    print(f"against A2: {result['throughput_over_A2']}; against B1: {result['throughput_over_B1']}", flush=True)


if __name__ == "__main__":
    main()
