"""How long a replay of one window and a reset take, against the first consumption of the same data.

One warm SparkSession runs every arm, on the same data (SNAPSHOTS appends of ROWS_PER_SNAPSHOT rows
over 3 streams, all committed now, so one day window), in ROUNDS rounds with a fresh group each:

- ``plain_spark``: the baseline, a plain Spark job that reads the source and appends it to a table;
- ``consume``: the group's first consumption (``icegroup.spark_jobs.consume``: Leader tick and Borrower in
  one process, every shard a fenced commit);
- ``replay``: replaying the window (``icegroup.spark_jobs.replay``): plan from the sink history, read, stage,
  one overwrite commit;
- ``reset_plan`` and ``reset_execute``: ``--to-earliest``, its dry run and its execution (fence,
  delete the window's output by shard id, registry commit); ``reconsume``: consuming it all again.

Each round verifies the sink against the source. Figures are medians, and ratios to ``consume`` and
to ``plain_spark``. Run: ``make bench`` (writes tests/benchmarks/results/replay_reset.json).
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from pyspark.sql import SparkSession

from icegroup.iceberg.config.lakehouse import LakehouseConfig, load_lakehouse
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.liveness import RunState
from icegroup.iceberg.protocol.reset import ResetTarget
from icegroup.iceberg.reset import execute_reset, plan_reset
from icegroup.iceberg.verify import verify_group
from icegroup.spark_jobs.replay import replay_window
from icegroup.spark_jobs.session import get_session
from tests.consuming import consume
from tests.factories import append_batches, create_source

ROUNDS = 3
SNAPSHOTS = 24
ROWS_PER_SNAPSHOT = 20_000
RESULTS = Path(__file__).parent / "results" / "replay_reset.json"
ARMS = ("plain_spark", "consume", "replay", "reset_plan", "reset_execute", "reconsume")


def run_round(spark: SparkSession, lakehouse: LakehouseConfig, ns: str) -> dict[str, float]:
    """Every arm once on a fresh group in namespace ``ns``; seconds per arm. The sink is verified."""
    catalog = lakehouse.catalog()
    group = GroupConfig(
        name=f"bench_{ns}", source=f"{ns}.events", sink=f"{ns}.events_out", max_borrowers=2,
        shard_caps={"max_files": 4}, lease_max_shards=2,
    )  # fmt: skip
    append_batches(create_source(catalog, group.source), SNAPSHOTS, ROWS_PER_SNAPSHOT)
    seconds: dict[str, float] = {}
    clock = time.perf_counter()

    def lap(arm: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        seconds[arm] = round(now - clock, 2)
        clock = now

    spark.table(f"{lakehouse.catalog_name}.{group.source}").writeTo(f"{lakehouse.catalog_name}.{ns}.plain").using(
        "iceberg"
    ).create()
    lap("plain_spark")
    consume(lambda: spark, lakehouse, group, f"bench-{ns}", lambda _: RunState.MISSING, progress=quiet)
    lap("consume")
    replay_window(spark, lakehouse, group, time.strftime("%Y-%m-%d", time.gmtime()), progress=quiet)
    lap("replay")
    plan = plan_reset(catalog, group, ResetTarget("earliest"))
    lap("reset_plan")
    execute_reset(catalog, group, plan.target)
    lap("reset_execute")
    consume(lambda: spark, lakehouse, group, f"bench-{ns}-again", lambda _: RunState.MISSING, progress=quiet)
    lap("reconsume")
    check = verify_group(catalog, group, key="event_id")
    if not check.ok:
        raise RuntimeError(f"{ns}: {check.line()}")
    return seconds


def quiet(_: str) -> None:
    """Progress lines are not printed."""


def main() -> None:
    """Run the rounds and record the medians and ratios."""
    times: dict[str, list[float]] = {arm: [] for arm in ARMS}
    with tempfile.TemporaryDirectory(prefix="icegroup-bench-replay-") as folder:
        lakehouse = load_lakehouse(env={"ICEGROUP_HOME": folder})
        spark = get_session(lakehouse)
        for index in range(ROUNDS):
            seconds = run_round(spark, lakehouse, f"r{index}")
            for arm, value in seconds.items():
                times[arm].append(value)
            print(f"round {index + 1}/{ROUNDS}: " + "  ".join(f"{a} {seconds[a]:.1f}s" for a in ARMS), flush=True)
    medians = {arm: round(statistics.median(values), 2) for arm, values in times.items()}
    result = {
        "workload": {"snapshots": SNAPSHOTS, "rows_per_snapshot": ROWS_PER_SNAPSHOT, "streams": 3, "windows": 1},
        "cores": os.cpu_count(),
        "seconds": times,
        "median_s": medians,
        "over_consume": {arm: round(medians[arm] / medians["consume"], 2) for arm in ARMS},
        "over_plain_spark": {arm: round(medians[arm] / medians["plain_spark"], 2) for arm in ARMS},
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    replay = result["over_consume"]["replay"]
    print(f"replay / first consumption: {replay}x; reset --execute: {medians['reset_execute']}s")


if __name__ == "__main__":
    main()
