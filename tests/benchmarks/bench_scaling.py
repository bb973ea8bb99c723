"""How the ratio to a plain Spark job grows with the work: W1 at 1x, 4x and 10x, W2 at 300 and 3,000 snapshots.

A user judges icegroup at their own scale. Fixed costs (a tick, the registry, the fenced publish, a
JVM that starts later) weigh most on a small backlog and fade on a large one; what remains at the
largest size is the per-row price of the guarantees. Each size gets one source table, and three
arms move all of it, with the same transform, into sinks of their own:

- ``A2``: a plain Spark batch job (``baselines.py batch``);
- ``B1``: Structured Streaming, trigger ``AvailableNow`` (``baselines.py stream``);
- ``consume``: ``icegroup consume GROUP --until-caught-up``.

Every arm is a process of its own, timed from its start to its exit, so each pays its JVM start, as
a user's job does. The arms alternate in a rotating order for ``--rounds`` rounds (2 by default:
the 10x size takes minutes per arm), and every sink is checked equal to its source, key by key.
W1's sizes keep its 12 snapshots and grow the rows of each (5, 20 and 50 million rows); W2's keep
300 rows a snapshot and grow the snapshots (3,000 of them are committed by Spark, ``spark_fill.py``:
pyiceberg's appends would take an hour). The figures are medians and throughput ratios (``A2
seconds / arm seconds``: 1 is as fast as the plain job). Run: ``make bench-scaling`` (writes
tests/benchmarks/results/scaling.json and scaling.png).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
from pathlib import Path

from matplotlib.figure import Figure

from icegroup.iceberg.config.lakehouse import load_lakehouse
from icegroup.iceberg.protocol.group import GroupConfig
from tests.benchmarks.measure import (
    ArmFailed,
    baseline_command,
    check_same_rows,
    consume_command,
    provenance,
    run_timed,
)
from tests.benchmarks.spark_fill import fill_with_spark
from tests.benchmarks.workloads import W1, W2, Workload, fill
from tests.dagster_dev import dagster_env
from tests.factories import create_source, write_groups
from tests.stack_env import home_env

ARMS = ("A2", "B1", "consume")
ROUNDS = 2
SOURCE = "bench.events"
TRANSFORM = "icegroup.spark_jobs.transforms:enrich_events"
RESULTS = Path(__file__).parent / "results"
# From this many snapshots the source is filled by Spark (``spark_fill.py``), not pyiceberg.
SPARK_FILL_FROM = 1000
SIZES = (
    Workload("W1 1x", W1.snapshots, W1.rows_per_snapshot),
    Workload("W1 4x", W1.snapshots, 4 * W1.rows_per_snapshot),
    Workload("W1 10x", W1.snapshots, 10 * W1.rows_per_snapshot),
    Workload("W2 300", W2.snapshots, W2.rows_per_snapshot),
    Workload("W2 3000", 10 * W2.snapshots, W2.rows_per_snapshot),
)


def arm_command(arm: str, index: int, folder: Path, groups: str) -> tuple[str, list[str]]:
    """The sink and the command line of one round of an arm."""
    sink = f"bench.{arm.lower()}_{index}"
    if arm == "A2":
        return sink, baseline_command("batch", SOURCE, sink)
    if arm == "B1":
        return sink, baseline_command("stream", SOURCE, sink, "--checkpoint", str(folder / f"checkpoint_{index}"))
    return sink, consume_command(groups, sink.split(".")[1])


def failure(log: Path, elapsed: float) -> str:
    """What a failed arm's log says went wrong: its exception lines, for the record (the log goes with its folder)."""
    lines = [line.strip() for line in log.read_text(errors="replace").splitlines()]
    errors = list(dict.fromkeys(line for line in lines if "Exception" in line or "Error" in line))
    return f"exited with an error after {elapsed:.0f}s: " + " | ".join(errors[:4])[:1500]


def run_size(
    workload: Workload, rounds: int, folder: Path, driver_memory: str | None = None
) -> tuple[dict[str, list[float]], dict[str, str]]:
    """Every arm ``rounds`` times on one source of ``workload``'s size: seconds per arm, every sink checked.

    An arm that fails is recorded with what its log says (the second value) and not run again;
    the others go on, since how far a baseline gets at a size is itself a result. ``driver_memory``
    sizes every arm's Spark driver alike (``--driver-memory`` of ``PYSPARK_SUBMIT_ARGS``); unset, Spark's 1g.
    """
    home = folder / "lake"
    catalog = load_lakehouse(env=home_env(home)).catalog()
    print(f"{workload.name}: filling {workload.snapshots} snapshots of {workload.rows_per_snapshot} rows", flush=True)
    source = create_source(catalog, SOURCE)
    if workload.snapshots >= SPARK_FILL_FROM:
        fill_with_spark(home, SOURCE, workload)
    else:
        fill(source, workload)
    groups = [
        GroupConfig(name=f"consume_{i}", source=SOURCE, sink=f"bench.consume_{i}", transform=TRANSFORM)
        for i in range(rounds)
    ]
    env = dagster_env(home, write_groups(folder / "groups.yaml", *groups), folder / "dagster")
    if driver_memory is not None:
        env["PYSPARK_SUBMIT_ARGS"] = f"--driver-memory {driver_memory} pyspark-shell"
    seconds: dict[str, list[float]] = {arm: [] for arm in ARMS}
    failed: dict[str, str] = {}
    for index in range(rounds):
        turn = index % len(ARMS)
        for arm in [arm for arm in ARMS[turn:] + ARMS[:turn] if arm not in failed]:
            sink, command = arm_command(arm, index, folder, env["ICEGROUP_GROUPS"])
            log = folder / f"{arm}_{index}.log"
            try:
                elapsed = run_timed(command, env, log)
            except ArmFailed as exc:
                failed[arm] = failure(log, exc.elapsed_s)
                print(f"{workload.name} round {index + 1}/{rounds}: {arm} {failed[arm]}", flush=True)
                continue
            check_same_rows(catalog, SOURCE, sink)
            seconds[arm].append(round(elapsed, 2))
            print(f"{workload.name} round {index + 1}/{rounds}: {arm} {elapsed:.1f}s, sink verified", flush=True)
    return {arm: values for arm, values in seconds.items() if values}, failed


def summary(
    workload: Workload, seconds: dict[str, list[float]], failed: dict[str, str], driver_memory: str | None
) -> dict[str, object]:
    """One size's medians, its arms' throughput against A2 and against B1 (where each ran), and the arms that failed."""
    medians = {arm: round(statistics.median(values), 2) for arm, values in seconds.items()}
    against = {f"throughput_over_{base}": base for base in ("A2", "B1") if base in medians}
    return {
        "snapshots": workload.snapshots,
        "rows_per_snapshot": workload.rows_per_snapshot,
        "rows": workload.rows,
        "rounds": len(seconds["A2"]),
        "driver_memory": driver_memory or "1g (Spark's default)",
        **provenance(),
        "seconds": seconds,
        "median_s": medians,
        **{
            key: {arm: round(medians[base] / median, 2) for arm, median in medians.items()}
            for key, base in against.items()
        },
        **({"failed": failed} if failed else {}),
    }


def plot(sizes: dict[str, dict[str, object]], png: Path) -> None:
    """Two panels: each arm's throughput over A2 against W1's rows and against W2's snapshots."""
    figure = Figure(figsize=(10, 3.8))
    panels = figure.subplots(1, 2)
    for axes, family, measure in ((panels[0], "W1", "rows"), (panels[1], "W2", "snapshots")):
        chosen = [size for name, size in sizes.items() if name.startswith(family)]
        if not chosen:
            continue
        xs = [int(size[measure]) for size in chosen]  # type: ignore[call-overload]
        for arm in ARMS:
            points = [
                (x, size["throughput_over_A2"][arm])  # type: ignore[index]
                for x, size in zip(xs, chosen, strict=True)
                if arm in size["throughput_over_A2"]  # type: ignore[operator]
            ]
            axes.plot([x for x, _ in points], [y for _, y in points], marker="o", label=arm)
        for x, size in zip(xs, chosen, strict=True):
            if failed := size.get("failed"):
                axes.annotate(f"failed: {', '.join(failed)}", (x, 1.0), textcoords="offset points", xytext=(-60, -40))  # type: ignore[arg-type]
        axes.axhline(1.0, color="grey", linewidth=0.8)
        axes.set_xscale("log")
        axes.set_xlabel(f"{family}: source {measure}")
        axes.set_ylabel("throughput over the plain job (A2)")
        axes.legend(fontsize=8)
    figure.suptitle("icegroup consume against a plain Spark job as the work grows (each arm a process, JVM included)")
    figure.tight_layout()
    figure.savefig(png, dpi=110)


def main() -> None:
    """Run the chosen sizes, record them beside earlier ones and draw the curve."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="rounds per arm (default %(default)s)")
    parser.add_argument("--driver-memory", help="every arm's Spark driver heap, e.g. 4g (default: Spark's 1g)")
    parser.add_argument(
        "--size", choices=[size.name for size in SIZES], action="append", help="a size to run (default: every one)"
    )
    args = parser.parse_args()
    path = RESULTS / "scaling.json"
    result: dict[str, object] = json.loads(path.read_text()) if path.exists() else {}
    sizes: dict[str, dict[str, object]] = result.get("sizes", {})  # type: ignore[assignment]
    for workload in SIZES:
        if args.size is not None and workload.name not in args.size:
            continue
        with tempfile.TemporaryDirectory(prefix="icegroup-bench-scaling-", ignore_cleanup_errors=True) as folder:
            seconds, failed = run_size(workload, args.rounds, Path(folder), args.driver_memory)
        measured = summary(workload, seconds, failed, args.driver_memory)
        before = sizes.get(workload.name)
        if before is not None:  # the runs before, each nested under the next: this machine's speed moves by the day
            measured["run_before"] = before
        sizes[workload.name] = measured
        print(f"{workload.name}: {json.dumps(sizes[workload.name]['throughput_over_A2'])}", flush=True)
        record(sizes, path)  # after each size: the largest take many minutes, and a stopped run keeps the others


def record(sizes: dict[str, dict[str, object]], path: Path) -> None:
    """Write the sizes measured so far, in SIZES' order, and draw their curve beside ``path``."""
    ordered = {size.name: sizes[size.name] for size in SIZES if size.name in sizes}
    result = {"cores": os.cpu_count(), "transform": TRANSFORM, "sizes": ordered}
    written = path.with_suffix(".json.tmp")
    written.write_text(json.dumps(result, indent=2) + "\n")
    written.replace(path)  # whole or not at all: a stop mid-write must not cost the sizes recorded before
    plot(ordered, path.with_suffix(".png"))


if __name__ == "__main__":
    main()
