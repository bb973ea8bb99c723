"""``icegroup consume`` against the plain job on sources of other shapes than W1 and W2.

W1 and W2 are partitioned by three regions, so a backlog is three streams. A user's table may have
hundreds of partitions, each a stream of its own, with a file per partition in every commit, or
none at all. Each shape here is one source, filled with pyiceberg, and two arms move all of it, with
W1's transform, into sinks of their own:

- ``A2``: the plain Spark batch job (``baselines.py batch``);
- ``consume``: ``icegroup consume GROUP --until-caught-up``.

Each arm is a process of its own (its JVM start included), in alternating order for ``--rounds``
rounds, every sink checked equal to its source key by key. The figures are medians and the
consume's throughput against A2 (``A2 seconds / consume seconds``). Run: ``python -m
tests.benchmarks.bench_shapes`` (writes tests/benchmarks/results/shapes.json).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC

from icegroup.iceberg.config.lakehouse import load_lakehouse
from icegroup.iceberg.protocol.group import GroupConfig
from tests.benchmarks.measure import (
    check_same_rows,
    consume_command,
    provenance,
    record_beside_the_run_before,
    run_timed,
)
from tests.benchmarks.workloads import events
from tests.dagster_dev import dagster_env
from tests.factories import SCHEMA, SPEC, write_groups
from tests.stack_env import home_env

ROUNDS = 2
SOURCE = "bench.events"
TRANSFORM = "icegroup.spark_jobs.transforms:enrich_events"
RESULTS = Path(__file__).parent / "results" / "shapes.json"


@dataclass(frozen=True)
class Shape:
    """``snapshots`` appends of ``rows_per_snapshot`` rows over ``partitions`` regions (0: an unpartitioned table)."""

    name: str
    partitions: int
    snapshots: int
    rows_per_snapshot: int


SHAPES = (
    Shape("100 partitions", 100, 10, 200_000),
    Shape("300 partitions", 300, 30, 30_000),
    Shape("unpartitioned", 0, 12, 420_000),
)


def fill_shape(home: Path, shape: Shape) -> None:
    """Create the source with the shape's partitioning and commit its snapshots, event ids from 1."""
    catalog = load_lakehouse(env=home_env(home)).catalog()
    catalog.create_namespace_if_not_exists("bench")
    spec = SPEC if shape.partitions else UNPARTITIONED_PARTITION_SPEC
    table = catalog.create_table(SOURCE, schema=SCHEMA, partition_spec=spec)
    regions = [f"r{index:03d}" for index in range(max(shape.partitions, 1))]
    for index in range(shape.snapshots):
        first = 1 + index * shape.rows_per_snapshot
        table.append(events(first, shape.rows_per_snapshot, 11 + index, regions))


def run_shape(shape: Shape, rounds: int, folder: Path) -> dict[str, list[float]]:
    """Both arms ``rounds`` times on one source of ``shape``; seconds per arm, every sink checked."""
    home = folder / "lake"
    fill_shape(home, shape)
    catalog = load_lakehouse(env=home_env(home)).catalog()
    groups = [
        GroupConfig(name=f"consume_{i}", source=SOURCE, sink=f"bench.consume_{i}", transform=TRANSFORM)
        for i in range(rounds)
    ]
    env = dagster_env(home, write_groups(folder / "groups.yaml", *groups), folder / "dagster")
    seconds: dict[str, list[float]] = {"A2": [], "consume": []}
    for index in range(rounds):
        for arm in ("A2", "consume") if index % 2 == 0 else ("consume", "A2"):
            sink = f"bench.{arm.lower()}_{index}"
            command = (
                [sys.executable, "-m", "tests.benchmarks.baselines", "batch", SOURCE, sink]
                if arm == "A2"
                else consume_command(env["ICEGROUP_GROUPS"], sink.split(".")[1])
            )
            elapsed = run_timed(command, env, folder / f"{arm}_{index}.log")
            check_same_rows(catalog, SOURCE, sink)
            seconds[arm].append(round(elapsed, 2))
            print(f"{shape.name} round {index + 1}/{rounds}: {arm} {elapsed:.1f}s, sink verified", flush=True)
    return seconds


def main() -> None:
    """Run every shape and record its medians and the consume's ratio."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="rounds per arm (default %(default)s)")
    args = parser.parse_args()
    measured = provenance()
    shapes: dict[str, object] = {}
    for shape in SHAPES:
        with tempfile.TemporaryDirectory(prefix="icegroup-bench-shapes-", ignore_cleanup_errors=True) as folder:
            seconds = run_shape(shape, args.rounds, Path(folder))
        medians = {arm: round(statistics.median(values), 2) for arm, values in seconds.items()}
        ratio = round(medians["A2"] / medians["consume"], 2)
        shapes[shape.name] = {
            "partitions": shape.partitions,
            "snapshots": shape.snapshots,
            "rows_per_snapshot": shape.rows_per_snapshot,
            "rows": shape.snapshots * shape.rows_per_snapshot,
            "seconds": seconds,
            "median_s": medians,
            "consume_over_A2": ratio,
        }
        print(f"{shape.name}: consume {ratio}x A2", flush=True)
    result = {
        **measured,
        "rounds": args.rounds,
        "transform": TRANSFORM,
        "shapes": shapes,
    }
    record_beside_the_run_before(RESULTS, result)


if __name__ == "__main__":
    main()
