"""What a Borrower's write costs beyond a plain Spark job's, on one warm SparkSession: lineage and staging.

Every sink row carries five lineage columns (``_ig_group``, ``_ig_lease``, ``_ig_shard``,
``_ig_epoch``, ``_ig_window``), the sink is partitioned by the window, and shard output is staged
(write-audit-publish) before the fenced commit publishes it. A plain Spark job (A2) writes none of
that. Side by side, in one process, after a warm-up round so that JIT and class loading are paid
before any arm is timed, on the same 1.68 M rows (four snapshots of 420,000 rows, three streams):

- ``plain``: read the table, apply the benchmark's transform, append to an unpartitioned sink (A2's work);
- ``lineage``: the same rows with the five lineage columns, appended to a sink partitioned by window;
- ``staged``: what a Borrower does for one shard: the incremental read of the shard's snapshot range,
  the transform, the lineage columns, and the staged write to a sink made by ``ensure_sink``.

The arms alternate for ROUNDS rounds; medians, and ratios to ``plain`` (above 1 is slower). Run:
``make bench`` (writes tests/benchmarks/results/lineage_cost.json).
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

from iceberg.lakehouse import load_lakehouse
from iceberg.protocol.shards import Shard
from spark_jobs.fenced_commit import WRITE_OPTIONS, ensure_sink, stage_shard, with_lineage
from spark_jobs.session import get_session
from spark_jobs.shard_reader import read_shard
from spark_jobs.transforms import enrich_events
from tests.benchmarks.workloads import Workload, fill
from tests.factories import create_source

ROUNDS = 3
WORKLOAD = Workload("lineage", snapshots=4, rows_per_snapshot=420_000)
RESULTS = Path(__file__).parent / "results" / "lineage_cost.json"


def lineage(rows: DataFrame) -> DataFrame:
    """The benchmark's rows with the lineage columns a Borrower adds (a 16-hex lease and shard id)."""
    return with_lineage(rows, "bench", "0123456789abcdef", "fedcba9876543210", 0, "2026-01-01")


def arms(spark: SparkSession, catalog: str, shard: Shard) -> dict[str, Callable[[str], None]]:
    """Each arm as a function of the sink name it writes to."""
    source = f"{catalog}.bench.events"

    def plain(sink: str) -> None:
        rows = enrich_events(spark.table(source))
        rows.limit(0).writeTo(sink).using("iceberg").createOrReplace()
        rows.writeTo(sink).append()

    def with_columns(sink: str) -> None:
        rows = lineage(enrich_events(spark.table(source)))
        rows.limit(0).writeTo(sink).using("iceberg").partitionedBy(rows["_ig_window"]).createOrReplace()
        rows.writeTo(sink).options(**WRITE_OPTIONS).append()

    def staged(sink: str) -> None:
        rows = lineage(enrich_events(read_shard(spark, source, shard, shard.snapshots[0], None)))
        ensure_sink(spark, catalog, sink.split(".", 1)[1], rows)
        stage_shard(rows, sink)

    return {"plain": plain, "lineage": with_columns, "staged": staged}


def main() -> None:
    """Fill the source, warm the session up, time the arms interleaved, record medians and ratios."""
    with tempfile.TemporaryDirectory(prefix="icegroup-bench-lineage-") as tmp:
        lakehouse = load_lakehouse(env={"ICEGROUP_HOME": str(Path(tmp) / "lake")})
        table = create_source(lakehouse.catalog(), "bench.events")
        fill(table, WORKLOAD)
        snapshots = [s.snapshot_id for s in table.snapshots()]
        files = [task.file.file_path for task in table.scan().plan_files()]
        shard = Shard(
            shard_id="fedcba9876543210", stream="all", from_snapshot=None, to_snapshot=snapshots[-1],
            to_sequence=len(snapshots), schema_id=0, window_start_ms=0, snapshots=snapshots, files=files,
            rows=WORKLOAD.rows, bytes=0, identity={},
        )  # fmt: skip
        spark = get_session(lakehouse)
        runs = arms(spark, lakehouse.catalog_name, shard)
        for arm, run in runs.items():
            run(f"{lakehouse.catalog_name}.bench.warm_{arm}")
        seconds: dict[str, list[float]] = {arm: [] for arm in runs}
        for index in range(ROUNDS):
            for arm in list(runs)[index % 3 :] + list(runs)[: index % 3]:
                started = time.perf_counter()
                runs[arm](f"{lakehouse.catalog_name}.bench.{arm}_{index}")
                seconds[arm].append(round(time.perf_counter() - started, 2))
            print(f"round {index + 1}/{ROUNDS}: " + "  ".join(f"{a} {s[-1]:.2f}s" for a, s in seconds.items()))
        spark.stop()
    medians = {arm: statistics.median(values) for arm, values in seconds.items()}
    result = {
        "workload": f"{WORKLOAD.snapshots} snapshots x {WORKLOAD.rows_per_snapshot} rows, 3 streams; one warm session",
        "cores": os.cpu_count(),
        "seconds": seconds,
        "median_s": medians,
        "over_plain": {arm: round(m / medians["plain"], 2) for arm, m in medians.items()},
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print("over plain: " + "  ".join(f"{arm} {ratio}x" for arm, ratio in result["over_plain"].items()))  # type: ignore[attr-defined]


if __name__ == "__main__":
    main()
