"""What isolating poison rows costs: a consume that bisects 3 bad rows out of a 100,000-row shard, beside a clean one.

One warm SparkSession runs every arm on the same data (one stream, one snapshot of ROWS rows, so
one shard), in ROUNDS rounds with fresh groups:

- ``plain_spark``: the baseline, a plain Spark job that reads the source and appends it to a table;
- ``consume_clean``: the group's consumption with a transform that fails on no row;
- ``consume_isolating``: the same with a transform that raises on 3 rows, under ``on_poison:
  isolate`` and ``max_deliver: 1``: one failed delivery, the bisection, then the other rows' commit;
- ``redrive``: the 3 rows re-driven after the fix (``icegroup.spark_jobs.redrive_rows``).

Each round checks the sink: 99,997 rows after the isolating consume, all of them after the re-drive.
Figures are medians, with ratios to ``consume_clean`` and ``plain_spark``, and the bisection's tries.
Run: ``make bench`` (writes tests/benchmarks/results/isolation.json).
"""

from __future__ import annotations

import json
import os
import re
import statistics
import tempfile
import time
from pathlib import Path

from pyspark.sql import SparkSession

from icegroup.iceberg.config.lakehouse import LakehouseConfig, load_lakehouse
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.liveness import RunState
from icegroup.iceberg.verify import verify_group
from icegroup.spark_jobs.redrive_rows import redrive_rows
from icegroup.spark_jobs.session import get_session
from tests.consuming import consume
from tests.factories import create_source, events

ROUNDS = 3
ROWS = 100_000
POISON = "tests.integration.transforms:fail_on_three_ids"
FIXED = "icegroup.spark_jobs.transforms:identity"
RESULTS = Path(__file__).parent / "results" / "isolation.json"
ARMS = ("plain_spark", "consume_clean", "consume_isolating", "redrive")


def run_round(spark: SparkSession, lakehouse: LakehouseConfig, ns: str) -> tuple[dict[str, float], int]:
    """Every arm once on fresh groups in namespace ``ns``: seconds per arm, and the bisection's tries."""
    catalog = lakehouse.catalog()
    create_source(catalog, f"{ns}.events").append(events(1, ROWS, seed=5, regions=("eu",)))
    clean = GroupConfig(name=f"clean_{ns}", source=f"{ns}.events", sink=f"{ns}.clean", transform=FIXED)
    isolating = GroupConfig(
        name=f"isolating_{ns}", source=f"{ns}.events", sink=f"{ns}.isolating", transform=POISON,
        on_poison="isolate", max_deliver=1,
    )  # fmt: skip
    seconds: dict[str, float] = {}
    lines: list[str] = []
    clock = time.perf_counter()

    def lap(arm: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        seconds[arm] = round(now - clock, 2)
        clock = now

    source = f"{lakehouse.catalog_name}.{ns}.events"
    spark.table(source).writeTo(f"{lakehouse.catalog_name}.{ns}.plain").using("iceberg").create()
    lap("plain_spark")
    consume(lambda: spark, lakehouse, clean, f"clean-{ns}", lambda _: RunState.MISSING, progress=quiet)
    lap("consume_clean")
    consume(lambda: spark, lakehouse, isolating, f"isolating-{ns}", lambda _: RunState.MISSING, progress=lines.append)
    lap("consume_isolating")
    fixed = isolating.model_copy(update={"transform": FIXED, "on_change": "continue"})
    redriven = redrive_rows(spark, lakehouse, fixed, f"redrive-{ns}", quiet)
    lap("redrive")
    if sum(r.rows for r in redriven) != 3 or not verify_group(catalog, fixed, key="event_id").ok:
        raise RuntimeError(f"{ns}: the re-drive did not make the sink whole: {redriven}")
    tries = [int(m.group(1)) for line in lines if (m := re.search(r"3 rows isolated in (\d+) tries", line))]
    if len(tries) != 1:
        raise RuntimeError(f"{ns}: no isolation of 3 rows in the consume's progress: {lines}")
    return seconds, tries[0]


def quiet(_: str) -> None:
    """Progress lines are not printed."""


def main() -> None:
    """Run the rounds and record the medians and ratios."""
    times: dict[str, list[float]] = {arm: [] for arm in ARMS}
    tries: list[int] = []
    with tempfile.TemporaryDirectory(prefix="icegroup-bench-isolation-") as folder:
        lakehouse = load_lakehouse(env={"ICEGROUP_HOME": folder})
        spark = get_session(lakehouse)
        for index in range(ROUNDS):
            seconds, probes = run_round(spark, lakehouse, f"r{index}")
            tries.append(probes)
            for arm, value in seconds.items():
                times[arm].append(value)
            shown = "  ".join(f"{a} {seconds[a]:.1f}s" for a in ARMS)
            print(f"round {index + 1}/{ROUNDS}: {shown}  tries {probes}", flush=True)
    medians = {arm: round(statistics.median(values), 2) for arm, values in times.items()}
    result = {
        "workload": {"rows": ROWS, "poison_rows": 3, "shards": 1, "files": 1},
        "cores": os.cpu_count(),
        "seconds": times,
        "median_s": medians,
        "bisection_tries": tries,
        "over_consume_clean": {arm: round(medians[arm] / medians["consume_clean"], 2) for arm in ARMS},
        "over_plain_spark": {arm: round(medians[arm] / medians["plain_spark"], 2) for arm in ARMS},
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    ratio = result["over_consume_clean"]["consume_isolating"]
    print(f"isolating consume / clean consume: {ratio}x; re-drive of the 3 rows: {medians['redrive']}s")


if __name__ == "__main__":
    main()
