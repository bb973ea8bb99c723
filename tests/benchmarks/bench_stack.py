"""Throughput on the scale-out stack, side by side with the embedded stack, on the same data.

The same workload (``workloads.py``, same seed) fills two lakehouses: the embedded default (SQLite,
a local warehouse) and one on the running stack (its PostgreSQL catalog, a warehouse in
``.stack/``). The arms move all of it into a sink of their own, with the same transform:

- ``A2``: the plain Spark batch job (``baselines.py batch``) on ``local[*]``, the embedded lakehouse;
- ``embedded``: ``icegroup consume`` on ``local[*]``, the embedded lakehouse;
- ``stack_2w``: ``icegroup consume`` on the stack, both workers up; the application may take 2 cores
  (``spark.cores_max``), one executor per core;
- ``stack_1w``: the same with worker 2 stopped, so both executors run on worker 1.

Each round runs the arms in a rotating order; worker 2 is stopped for the ``stack_1w`` arm and started
again after it (``icegroup.infra.stack.up``). Every arm is a process timed from start to exit, so each pays
its own JVM start; every sink is checked equal to its source, key by key. The figures are medians and
ratios to A2 and to ``embedded``. The stack runs on the same machine as the embedded arms (2 cores
here), so a second worker adds executors but no cores: the comparison shows what the distributed
path costs (executor JVMs, the driver's file server, a PostgreSQL catalog), not a speed-up.

Run: ``make stack-up`` and then ``python -m tests.benchmarks.bench_stack``. It writes
tests/benchmarks/results/stack_throughput.json and stack_throughput.png.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

import yaml
from matplotlib.figure import Figure

from icegroup.iceberg.config.lakehouse import load_lakehouse
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.infra.processes import terminate
from icegroup.infra.stack import Stack, alive_workers, up
from icegroup.infra.stack_layout import default_layout
from tests.benchmarks.measure import ICEGROUP, check_same_rows, run_timed
from tests.benchmarks.workloads import W1, W2, Workload, fill
from tests.factories import create_source, write_groups
from tests.stack_env import ENV_TEST_STACK, drop_scratch_databases, scratch_database

ROUNDS = 3
ARMS = ("A2", "embedded", "stack_2w", "stack_1w")
SOURCE = "bench.events"
TRANSFORM = "icegroup.spark_jobs.transforms:enrich_events"
RESULTS = Path(__file__).parent / "results" / "stack_throughput.json"
PNG = RESULTS.with_suffix(".png")


def stack_lakehouse_file(folder: Path, database: str) -> Path:
    """The stack's lakehouse config with a REST warehouse and heartbeat database of this run's own, 2 cores per app."""
    layout = default_layout()
    config = yaml.safe_load((layout.folder / "lakehouse.yaml").read_text())
    config["rest"]["warehouse"] = database
    config["heartbeats_uri"] = layout.catalog_uri(database)
    config["spark"]["cores_max"] = 2
    path = folder / "stack-lakehouse.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def worker_2(layout_folder: Path) -> int:
    """The pid of the stack's second worker."""
    stack = Stack.load(layout_folder)
    if stack is None:
        raise SystemExit("no stack is running; run `make stack-up` first")
    part = next(p for p in stack.parts if p.name == "spark-worker-2")
    assert part.pid is not None
    return part.pid


def run_workload(workload: Workload, rounds: int, folder: Path) -> dict[str, list[float]]:
    """Every arm ``rounds`` times on both lakehouses; seconds per arm, every sink checked."""
    layout = default_layout()
    os.environ[ENV_TEST_STACK] = str(layout.folder)
    groups = write_groups(
        folder / "groups.yaml",
        *[
            GroupConfig(name=f"{arm}_{i}", source=SOURCE, sink=f"bench.{arm}_{i}", transform=TRANSFORM)
            for i in range(rounds)
            for arm in ARMS[1:]
        ],
    )
    embedded_env = {**os.environ, "ICEGROUP_HOME": str(folder / "embedded"), "ICEGROUP_GROUPS": str(groups)}
    for key in ("ICEGROUP_LAKEHOUSE", "ICEGROUP_CATALOG_URI", "ICEGROUP_SPARK_MASTER", "ICEGROUP_WAREHOUSE"):
        embedded_env.pop(key, None)
    stack_env = {
        **embedded_env,
        "ICEGROUP_LAKEHOUSE": str(stack_lakehouse_file(folder, scratch_database("bench_stack"))),
    }
    catalogs = {}
    for name, env in (("embedded", embedded_env), ("stack", stack_env)):
        catalog = load_lakehouse(env=env).catalog()
        fill(create_source(catalog, SOURCE), workload)
        catalogs[name] = catalog
    print(f"{workload.name}: {workload.snapshots} snapshots of {workload.rows_per_snapshot} rows, in both", flush=True)
    seconds: dict[str, list[float]] = {arm: [] for arm in ARMS}
    for index in range(rounds):
        order = ARMS[index % len(ARMS) :] + ARMS[: index % len(ARMS)]
        for arm in order:
            sink = f"bench.{arm}_{index}"
            on_stack = arm.startswith("stack")
            if arm == "A2":
                command = [sys.executable, "-m", "tests.benchmarks.baselines", "batch", SOURCE, sink]
            else:
                command = [ICEGROUP, "--groups", str(groups), "consume", f"{arm}_{index}"]
            if arm == "stack_1w":
                terminate([worker_2(layout.folder)], grace_s=10)
            try:
                elapsed = run_timed(command, stack_env if on_stack else embedded_env, folder / f"{sink}.log")
            finally:
                if arm == "stack_1w":
                    up(layout)
            if on_stack and alive_workers(layout) != len(layout.worker_ui_ports):
                raise RuntimeError("the stack did not get its workers back after the 1-worker arm")
            check_same_rows(catalogs["stack" if on_stack else "embedded"], SOURCE, sink)
            seconds[arm].append(round(elapsed, 2))
            print(f"{workload.name} round {index + 1}/{rounds}: {arm} {elapsed:.1f}s, sink verified", flush=True)
    return seconds


def summary(workload: Workload, seconds: dict[str, list[float]]) -> dict[str, object]:
    """Medians and throughput ratios to A2 and to the embedded consume."""
    medians = {arm: round(statistics.median(values), 2) for arm, values in seconds.items()}
    return {
        "workload": {"snapshots": workload.snapshots, "rows_per_snapshot": workload.rows_per_snapshot},
        "seconds": seconds,
        "median_s": medians,
        "throughput_over_A2": {arm: round(medians["A2"] / m, 2) for arm, m in medians.items()},
        "throughput_over_embedded": {arm: round(medians["embedded"] / m, 2) for arm, m in medians.items()},
    }


def plot(result: dict[str, dict[str, dict[str, float]]]) -> None:
    """Bars of throughput over A2 per arm, one group of bars per workload."""
    figure = Figure(figsize=(8, 4.5))
    axes = figure.subplots()
    workloads = [w for w in ("W1", "W2") if w in result]
    width = 0.8 / max(1, len(workloads))
    for offset, name in enumerate(workloads):
        ratios = result[name]["throughput_over_A2"]
        bars = axes.bar([i + offset * width for i in range(len(ARMS))], [ratios[a] for a in ARMS], width, label=name)
        axes.bar_label(bars, fmt="%.2f", fontsize=8)
    axes.axhline(1.0, color="grey", linewidth=0.8)
    axes.set_xticks([i + width * (len(workloads) - 1) / 2 for i in range(len(ARMS))], ARMS)
    axes.set_ylabel("throughput / plain Spark batch on local[*] (A2)")
    axes.set_title(f"Embedded vs the stack (Spark standalone, PostgreSQL), {os.cpu_count()} cores, medians")
    axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(PNG, dpi=110)


def main() -> None:
    """Run the workloads and record them."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="rounds per arm (default %(default)s)")
    parser.add_argument("--workload", choices=("W1", "W2"), action="append", help="default: both")
    args = parser.parse_args()
    result: dict[str, object] = {"cores": os.cpu_count(), "rounds": args.rounds, "transform": TRANSFORM}
    for workload in [w for w in (W1, W2) if args.workload is None or w.name in args.workload]:
        with tempfile.TemporaryDirectory(prefix=f"icegroup-stack-{workload.name}-", ignore_cleanup_errors=True) as tmp:
            try:
                result[workload.name] = summary(workload, run_workload(workload, args.rounds, Path(tmp)))
            finally:
                drop_scratch_databases()
        ratios = result[workload.name]["throughput_over_A2"]  # type: ignore[index]
        print(f"{workload.name} throughput / A2: " + "  ".join(f"{a} {r}x" for a, r in ratios.items()), flush=True)
        RESULTS.write_text(json.dumps(result, indent=2) + "\n")
        plot(result)  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
