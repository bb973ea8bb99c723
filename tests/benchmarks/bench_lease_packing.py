"""A backlog as one lease or as a lease per slot, in one warm session, beside the plain job in that session.

A warm Borrower's leases share its SparkSession. When the Leader spread a window's streams over a
lease per slot, the Borrower ran two leases at once, each its own Spark jobs and its own commits;
now it puts them in one lease per Borrower run (``iceberg/protocol/assignment.py``), which reads the
streams in one Spark job and publishes them in one fenced commit (``commit_batch_rows``). One
process, one session, warmed up once on a 300-row table; then, in a rotating order for ``--rounds``
rounds, on the same W1 or W2 source, each arm into a sink of its own:

- ``A2_warm``: the plain job (``baselines.py batch``): read the source once, transform, append;
- ``one_lease``: ``consume`` (``spark_jobs/consume.py``, the loop ``icegroup consume`` and a warm
  Borrower run) of a new group with the defaults: one lease, one Spark job, one commit;
- ``lease_per_slot``: the same with the grants this replaced (``leases_per_borrower: 1``, so a lease
  per slot, and ``commit_batch_rows`` 1,000,000, its old default);
- ``one_lease_per_shard_jobs``: one lease with ``commit_batch_rows`` 1,000,000, so each of W1's 1.68
  M-row shards commits alone: whether the gain is one lease or one Spark job (W2's 90,000 rows stay
  one batch, so there it is ``one_lease`` again).

No arm starts a JVM, and none waits for a tick from an append: the consume arms tick at once. Every
sink is checked equal to its source, key by key. The figures are medians, and throughput ratios to
``A2_warm`` (``A2_warm seconds / arm seconds``). Run: ``python -m tests.benchmarks.bench_lease_packing``
(writes tests/benchmarks/results/lease_packing.json).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from pyspark.sql import SparkSession

from icegroup.iceberg.config.lakehouse import LakehouseConfig, load_lakehouse
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.liveness import RunState
from icegroup.spark_jobs.consume import ConsumeHooks, consume
from icegroup.spark_jobs.session import get_session
from tests.benchmarks.baselines import batch
from tests.benchmarks.measure import check_same_rows
from tests.benchmarks.workloads import W1, W2, Workload, append_events, fill
from tests.factories import create_source
from tests.stack_env import home_env

ROUNDS = 4
SOURCE = "bench.events"
WARM_UP = "bench.warm_up"
TRANSFORM = "icegroup.spark_jobs.transforms:enrich_events"
OLD_BATCH_ROWS = 1_000_000
ARMS: dict[str, dict[str, int]] = {
    "one_lease": {},
    "lease_per_slot": {"leases_per_borrower": 1, "commit_batch_rows": OLD_BATCH_ROWS},
    "one_lease_per_shard_jobs": {"commit_batch_rows": OLD_BATCH_ROWS},
}
RESULTS = Path(__file__).parent / "results" / "lease_packing.json"


def consumed(spark: SparkSession, lakehouse: LakehouseConfig, name: str, source: str, fields: dict[str, int]) -> str:
    """Consume ``source`` until caught up with a new group ``name`` of these fields; returns its sink."""
    group = GroupConfig.model_validate(
        {"name": name, "source": source, "sink": f"bench.{name}", "transform": TRANSFORM, "warm_borrowers": 0, **fields}
    )
    hooks = ConsumeHooks(spark=lambda: spark, observe_others=lambda _: RunState.MISSING, progress=lambda _: None)
    summary = consume(lakehouse, group, f"bench-{name}", hooks)
    if not summary.caught_up:
        raise RuntimeError(f"{name}: consume ended before it caught up")
    return group.sink


def run_workload(workload: Workload, rounds: int, home: Path) -> dict[str, list[float]]:
    """Every arm ``rounds`` times on one source, in one warm session; seconds per arm, every sink checked."""
    lakehouse = load_lakehouse(env=home_env(home))
    catalog = lakehouse.catalog()
    fill(create_source(catalog, SOURCE), workload)
    append_events(create_source(catalog, WARM_UP), 1_000_000_000, 300, seed=1)
    spark = get_session(lakehouse)
    name = lakehouse.catalog_name
    batch(spark, f"{name}.{WARM_UP}", f"{name}.bench.a2_warm_up")
    consumed(spark, lakehouse, "consume_warm_up", WARM_UP, {})
    arms = ("A2_warm", *ARMS)
    seconds: dict[str, list[float]] = {arm: [] for arm in arms}
    for index in range(rounds):
        for arm in arms[index % len(arms) :] + arms[: index % len(arms)]:
            sink = f"bench.{arm.lower()}_{index}"
            started = time.perf_counter()
            if arm == "A2_warm":
                batch(spark, f"{name}.{SOURCE}", f"{name}.{sink}")
            else:
                sink = consumed(spark, lakehouse, f"{arm}_{index}", SOURCE, ARMS[arm])
            elapsed = time.perf_counter() - started
            check_same_rows(catalog, SOURCE, sink)
            seconds[arm].append(round(elapsed, 2))
            print(f"{workload.name} round {index + 1}/{rounds}: {arm} {elapsed:.2f}s, sink verified", flush=True)
    spark.stop()
    return seconds


def main() -> None:
    """Run the arms on each workload and record them."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="rounds per arm (default %(default)s)")
    parser.add_argument("--workload", choices=("W1", "W2"), action="append", help="default: both")
    args = parser.parse_args()
    chosen = [w for w in (W1, W2) if w.name in (args.workload or ["W1", "W2"])]
    result: dict[str, object] = {"measured_at": datetime.now(UTC).isoformat(timespec="seconds"), "rounds": args.rounds}
    for workload in chosen:
        with tempfile.TemporaryDirectory(prefix="icegroup-bench-packing-") as tmp:
            seconds = run_workload(workload, args.rounds, Path(tmp) / "lake")
        medians = {arm: statistics.median(values) for arm, values in seconds.items()}
        ratios = {arm: round(medians["A2_warm"] / m, 2) for arm, m in medians.items()}
        result[workload.name] = {
            "rows": workload.rows,
            "snapshots": workload.snapshots,
            "seconds": seconds,
            "median_s": medians,
            "throughput_over_A2_warm": ratios,
        }
        print(f"{workload.name}: {ratios}", flush=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
