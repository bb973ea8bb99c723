"""Where a consume's time goes, against the plain Spark job (A2) that moves the same rows, from Spark's event log.

Each arm runs as a process of its own, on W1 and on W2 (``workloads.py``), with Spark's event log
on. Its wall time is cut at the moments Spark itself records:

- ``start``: process start to the SparkContext's start: Python imports, config, the Dagster
  instance (``consume`` only) and the JVM's start;
- ``before jobs``: to the first Spark job: the Leader's tick and the registry (``consume``),
  catalog and table loads, the sink's checks and creation, the scan's planning;
- ``jobs``: the first job's submission to the last job's end: reading, transforming, adding the
  lineage columns and writing, as Spark's tasks do it (two leases' jobs may overlap);
- ``after jobs``: to the process's exit: the fenced publish, the registry, the report, the Dagster
  run record, the JVM's stop.

The ``consume`` arm runs ``icegroup consume GROUP --until-caught-up``, as the docs tell users to.
It also sums the tasks' executor run time, the compute the rows took. ``A2`` and ``consume``
alternate for ROUNDS rounds; every sink is checked equal to its source. The per-row costs inside
``jobs`` (the pinned read, the lineage columns, the staged write) are ``bench_lineage_cost.py``'s.
Run: ``make bench`` (writes tests/benchmarks/results/breakdown.json and breakdown.png).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from matplotlib.figure import Figure

from icegroup.iceberg.config.lakehouse import load_lakehouse
from icegroup.iceberg.protocol.group import GroupConfig
from tests.benchmarks.measure import check_same_rows, consume_command, provenance, record_beside_the_run_before
from tests.benchmarks.plot import stacked_bars
from tests.benchmarks.workloads import W1, W2, Workload, fill
from tests.dagster_dev import dagster_env
from tests.factories import create_source, write_groups
from tests.stack_env import home_env

ROUNDS = 3
ARMS = ("A2", "consume")
PHASES = ("start", "before jobs", "jobs", "after jobs")
SOURCE = "bench.events"
TRANSFORM = "icegroup.spark_jobs.transforms:enrich_events"
RESULTS = Path(__file__).parent / "results"


def timeline(event_log: Path, started_s: float, ended_s: float) -> dict[str, float]:
    """The run's phases in seconds, and its tasks' run time, from its event log and its wall clock."""
    app_ms = None
    job_starts: list[int] = []
    job_ends: list[int] = []
    task_ms = 0
    for line in event_log.read_text().splitlines():
        event = json.loads(line)
        kind = event["Event"]
        if kind == "SparkListenerApplicationStart":
            app_ms = event["Timestamp"]
        elif kind == "SparkListenerJobStart":
            job_starts.append(event["Submission Time"])
        elif kind == "SparkListenerJobEnd":
            job_ends.append(event["Completion Time"])
        elif kind == "SparkListenerTaskEnd":
            task_ms += event.get("Task Metrics", {}).get("Executor Run Time", 0)
    if app_ms is None or not job_starts:
        raise RuntimeError(f"{event_log}: no application start or no job")
    app, first, last = app_ms / 1000, min(job_starts) / 1000, max(job_ends) / 1000
    return {
        "start": app - started_s,
        "before jobs": first - app,
        "jobs": last - first,
        "after jobs": ended_s - last,
        "total": ended_s - started_s,
        "task_run_s": task_ms / 1000,
    }


def run_arm(command: list[str], env: dict[str, str], events: Path) -> dict[str, float]:
    """Run one arm with Spark's event log in ``events``; its timeline."""
    events.mkdir(parents=True)
    conf = events / "conf"
    conf.mkdir()
    (conf / "spark-defaults.conf").write_text(f"spark.eventLog.enabled true\nspark.eventLog.dir file://{events}\n")
    started = time.time()
    done = subprocess.run(command, env={**env, "SPARK_CONF_DIR": str(conf)}, capture_output=True, text=True)
    ended = time.time()
    if done.returncode != 0:
        raise RuntimeError(f"{command}: exit {done.returncode}\n{done.stderr[-3000:]}")
    (log,) = [p for p in events.iterdir() if p.is_file()]
    return timeline(log, started, ended)


def run_workload(workload: Workload, folder: Path) -> dict[str, list[dict[str, float]]]:
    """Every arm ROUNDS times on one source; each run's timeline (every sink checked)."""
    home = folder / "lake"
    catalog = load_lakehouse(env=home_env(home)).catalog()
    fill(create_source(catalog, SOURCE), workload)
    groups = [
        GroupConfig(name=f"consume_{i}", source=SOURCE, sink=f"bench.consume_{i}", transform=TRANSFORM)
        for i in range(ROUNDS)
    ]
    env = {**os.environ, **dagster_env(home, write_groups(folder / "groups.yaml", *groups), folder / "dagster")}
    runs: dict[str, list[dict[str, float]]] = {arm: [] for arm in ARMS}
    for index in range(ROUNDS):
        for arm in ARMS if index % 2 == 0 else ARMS[::-1]:
            sink = f"bench.{arm.lower()}_{index}"
            command = (
                [sys.executable, "-m", "tests.benchmarks.baselines", "batch", SOURCE, sink]
                if arm == "A2"
                else consume_command(env["ICEGROUP_GROUPS"], sink.split(".")[1])
            )
            runs[arm].append(run_arm(command, env, folder / "events" / f"{arm}_{index}"))
            check_same_rows(catalog, SOURCE, sink)
            print(
                f"{workload.name} round {index}: {arm} "
                + json.dumps({k: round(v, 2) for k, v in runs[arm][-1].items()}),
                flush=True,
            )
    return runs


def summary(runs: dict[str, list[dict[str, float]]]) -> dict[str, dict[str, float]]:
    """Each arm's median per phase, and consume's over A2's."""
    medians = {arm: {key: round(statistics.median(r[key] for r in rs), 2) for key in rs[0]} for arm, rs in runs.items()}
    medians["consume / A2"] = {
        key: round(medians["consume"][key] / medians["A2"][key], 2) for key in medians["A2"] if medians["A2"][key] > 0
    }
    return medians


def plot(result: dict[str, dict[str, dict[str, dict[str, float]]]], png: Path) -> None:
    """A stacked bar per arm and workload: its median seconds in each phase."""
    figure = Figure(figsize=(10, 3.6))
    axes = figure.subplots()
    labels = [f"{workload} {arm}" for workload in result for arm in ARMS]
    parts = {phase: [result[workload]["median"][arm][phase] for workload in result for arm in ARMS] for phase in PHASES}
    stacked_bars(axes, labels, parts, label_from=1.5)
    axes.set_xlabel("seconds, median of the rounds; each arm a process of its own (JVM start included)")
    axes.set_title("Where the time goes: icegroup consume against a plain Spark job (A2) on the same rows")
    axes.legend(fontsize=8, ncols=4, loc="upper right")
    figure.tight_layout()
    figure.savefig(png, dpi=110)


def main() -> None:
    """Run both workloads, record the medians and draw them."""
    measured_code = provenance()  # before the rounds: the commit whose code they run
    result: dict[str, dict[str, dict[str, dict[str, float]]]] = {}
    runs: dict[str, object] = {}
    for workload in (W1, W2):
        with tempfile.TemporaryDirectory(prefix=f"icegroup-bench-breakdown-{workload.name}-") as tmp:
            measured = run_workload(workload, Path(tmp))
        runs[workload.name] = measured
        result[workload.name] = {"median": summary(measured)}
    record_beside_the_run_before(
        RESULTS / "breakdown.json",
        {**measured_code, "rounds": ROUNDS, "cores": os.cpu_count(), "result": result, "runs": runs},
    )
    plot(result, RESULTS / "breakdown.png")
    for name, part in result.items():
        print(name, json.dumps(part["median"]))


if __name__ == "__main__":
    main()
