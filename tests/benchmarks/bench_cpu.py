"""Where a consume's CPU goes, against the plain Spark job (A2) that moves the same rows: W1, by thread kind.

On this 2-core machine a W1 run keeps both cores busy from the JVM's start to its end, so its wall
time follows the CPU it spends, and every CPU second either arm spends beyond the other's costs
about half a second. ``bench_breakdown.py`` cuts the wall time into phases; this cuts the CPU by who
spent it:

- ``python``: the arm's Python process (imports, Dagster's run, the Leader's tick, the registry);
- ``jit``: the driver JVM's compiler threads (C1 and C2), compiling the code the run went through;
- ``tasks``: Spark's task threads, which read, transform and write the rows;
- ``gc``: the JVM's garbage collector threads;
- ``jvm rest``: every other JVM thread (the driver's planning, the catalog, py4j, Spark's services),
  threads that ended between two reads, and the shell scripts of ``spark-submit``.

Each arm is a process of its own, ``A2`` (``baselines.py batch``) and ``consume`` (``icegroup consume
GROUP --until-caught-up``) in turn for ROUNDS rounds. ``proc_cpu.py`` reads the arm's CPU from
``/proc``, its JVMs' until they have exited too (what it misses is said there); that also keeps each
arm from starting beside the last one's JVM. Every sink is checked equal to its source.
Run: ``python -m tests.benchmarks.bench_cpu`` (writes tests/benchmarks/results/cpu.json and cpu.png).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

from matplotlib.figure import Figure

from icegroup.iceberg.config.lakehouse import load_lakehouse
from icegroup.iceberg.protocol.group import GroupConfig
from tests.benchmarks.measure import REPO, check_same_rows, consume_command, provenance
from tests.benchmarks.plot import stacked_bars
from tests.benchmarks.proc_cpu import KINDS, ArmRun, run_arm
from tests.benchmarks.spark_fill import fill_with_spark
from tests.benchmarks.workloads import W1
from tests.dagster_dev import dagster_env
from tests.factories import create_source, write_groups
from tests.stack_env import home_env

ROUNDS = 3
ARMS = ("A2", "consume")
SOURCE = "bench.events"
TRANSFORM = "icegroup.spark_jobs.transforms:enrich_events"
RESULTS = Path(__file__).parent / "results"


def run_rounds(rounds: int, folder: Path) -> dict[str, list[ArmRun]]:
    """Both arms ``rounds`` times on one W1 source, alternating which goes first; every sink checked."""
    home = folder / "lake"
    catalog = load_lakehouse(env=home_env(home)).catalog()
    create_source(catalog, SOURCE)
    fill_with_spark(home, SOURCE, W1)
    groups = [
        GroupConfig(name=f"consume_{i}", source=SOURCE, sink=f"bench.consume_{i}", transform=TRANSFORM)
        for i in range(rounds)
    ]
    env = dagster_env(home, write_groups(folder / "groups.yaml", *groups), folder / "dagster")
    runs: dict[str, list[ArmRun]] = {arm: [] for arm in ARMS}
    for index in range(rounds):
        for arm in ARMS if index % 2 == 0 else ARMS[::-1]:
            sink = f"bench.{arm.lower()}_{index}"
            command = (
                [sys.executable, "-m", "tests.benchmarks.baselines", "batch", SOURCE, sink]
                if arm == "A2"
                else consume_command(env["ICEGROUP_GROUPS"], sink.split(".")[1])
            )
            runs[arm].append(run_arm(command, env, folder / f"{arm}_{index}.log", cwd=REPO))
            check_same_rows(catalog, SOURCE, sink)
            print(f"round {index}: {arm} {json.dumps(runs[arm][-1].figures())}", flush=True)
    return runs


def summary(runs: dict[str, list[ArmRun]]) -> dict[str, dict[str, float]]:
    """Each arm's medians (wall, JVM linger, CPU by kind and in all), and consume's minus A2's."""
    medians: dict[str, dict[str, float]] = {}
    for arm, found in runs.items():
        figures = [run.figures() for run in found]
        medians[arm] = {key: round(statistics.median(f[key] for f in figures), 2) for key in figures[0]}
    medians["consume - A2"] = {key: round(medians["consume"][key] - medians["A2"][key], 2) for key in medians["A2"]}
    return medians


def plot(medians: dict[str, dict[str, float]], png: Path) -> None:
    """A stacked bar of each arm's median CPU seconds by kind, with its median wall time beside it."""
    figure = Figure(figsize=(10, 3.2))
    axes = figure.subplots()
    parts = {kind: [medians[arm][kind] for arm in ARMS] for kind in KINDS}
    left = stacked_bars(axes, list(ARMS), parts, label_from=1.2)
    for row, arm in enumerate(ARMS):
        axes.annotate(f"wall {medians[arm]['wall_s']:.1f} s", (left[row], row), xytext=(6, 0),
                      textcoords="offset points", va="center", fontsize=8)  # fmt: skip
    axes.set_xlim(0, max(left) * 1.3)
    axes.set_xlabel("CPU seconds, median of the rounds (2 cores: a run's wall time is about half its CPU)")
    axes.set_title("Who spends the CPU: icegroup consume against a plain Spark job (A2) on W1")
    axes.legend(fontsize=8, ncols=2, loc="upper right")
    figure.tight_layout()
    figure.savefig(png, dpi=110)


def main() -> None:
    """Run the rounds, record them with their medians, and draw them."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="rounds per arm (default %(default)s)")
    args = parser.parse_args()
    measured = provenance()  # before the rounds: the commit whose code they run
    with tempfile.TemporaryDirectory(prefix="icegroup-bench-cpu-") as tmp:
        runs = run_rounds(args.rounds, Path(tmp))
    medians = summary(runs)
    result = {
        "workload": {"snapshots": W1.snapshots, "rows_per_snapshot": W1.rows_per_snapshot, "filled_by": "spark_fill"},
        "rounds": args.rounds,
        "cores": os.cpu_count(),
        **measured,
        "median": medians,
        "runs": {arm: [run.figures() for run in found] for arm, found in runs.items()},
    }
    (RESULTS / "cpu.json").write_text(json.dumps(result, indent=2) + "\n")
    plot(medians, RESULTS / "cpu.png")
    print(json.dumps(medians, indent=2))


if __name__ == "__main__":
    main()
