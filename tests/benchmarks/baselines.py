"""The baselines icegroup is measured against, each a process of its own, as a user would run it.

- ``batch`` (A2): a plain Spark batch job. It reads the whole source, applies the group's transform
  and appends to an Iceberg sink: the practical limit of a job that moves the same rows.
- ``batch --warm-up TABLE`` (A2 warm): the same job in a session that is already running, as a
  warm Borrower's is. The process first runs the job on the small TABLE, then runs it on the source
  and prints the seconds of that second job alone (``job seconds: S``): no JVM start, no first
  job's class loading.
- ``stream`` (B1): Spark Structured Streaming from the Iceberg source into an Iceberg sink, with
  the same transform, trigger ``AvailableNow`` (``--trigger now``, for throughput) or
  ``processingTime`` (``--trigger 5``, seconds, for latency; it runs until ``--stop-file`` exists).

Both use icegroup's own Spark settings (``spark_jobs/session.py``): the same catalog, jars,
shuffle partitions and cores. Run: ``python -m tests.benchmarks.baselines batch SOURCE SINK``, with
``ICEGROUP_HOME`` naming the lakehouse.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

from icegroup.iceberg.config.lakehouse import load_lakehouse
from icegroup.spark_jobs.session import get_session
from icegroup.spark_jobs.transforms import enrich_events

STOP_POLL_S = 0.5


def create_sink(spark: SparkSession, rows: DataFrame, sink: str) -> None:
    """An empty sink with the transform's schema, so the job proper only appends."""
    rows.limit(0).writeTo(sink).using("iceberg").createOrReplace()


def batch(spark: SparkSession, source: str, sink: str) -> None:
    """A2: read the source once, transform, append."""
    rows = enrich_events(spark.table(source))
    create_sink(spark, rows, sink)
    rows.writeTo(sink).append()


def batch_warm(spark: SparkSession, warm_up: str, source: str, sink: str) -> float:
    """A2 warm: run the job once on ``warm_up``, then time it on ``source``; the seconds of that second job."""
    batch(spark, warm_up, f"{sink}_warm_up")
    started = time.perf_counter()
    batch(spark, source, sink)
    return time.perf_counter() - started


def stream(spark: SparkSession, source: str, sink: str, trigger: str, checkpoint: Path, stop_file: Path) -> None:
    """B1: a streaming query from the source's first snapshot on; ``now`` stops once caught up."""
    rows = enrich_events(spark.readStream.format("iceberg").load(source))
    create_sink(spark, enrich_events(spark.table(source)), sink)
    writer = rows.writeStream.format("iceberg").outputMode("append").option("checkpointLocation", str(checkpoint))
    if trigger == "now":
        writer.trigger(availableNow=True).toTable(sink).awaitTermination()
        return
    query = writer.trigger(processingTime=f"{float(trigger)} seconds").toTable(sink)
    while not stop_file.exists() and query.isActive:
        time.sleep(STOP_POLL_S)
    query.stop()
    if query.exception() is not None:
        raise RuntimeError(f"the streaming query failed: {query.exception()}")


def main() -> None:
    """Parse the arm and run it against the lakehouse in ``ICEGROUP_HOME``."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("arm", choices=("batch", "stream"))
    parser.add_argument("source", help="source table, namespace.table")
    parser.add_argument("sink", help="sink table, namespace.table; replaced if it exists")
    parser.add_argument("--warm-up", help="batch: a small table to run the job on first; only the second job is timed")
    parser.add_argument("--trigger", default="now", help="stream: 'now' (AvailableNow) or seconds (processingTime)")
    parser.add_argument("--checkpoint", type=Path, help="stream: the checkpoint folder")
    parser.add_argument("--stop-file", type=Path, help="stream with processingTime: stop once this file exists")
    args = parser.parse_args()
    lakehouse = load_lakehouse()
    spark = get_session(lakehouse)
    source, sink = f"{lakehouse.catalog_name}.{args.source}", f"{lakehouse.catalog_name}.{args.sink}"
    if args.arm == "batch" and args.warm_up:
        print(f"job seconds: {batch_warm(spark, f'{lakehouse.catalog_name}.{args.warm_up}', source, sink):.3f}")
    elif args.arm == "batch":
        batch(spark, source, sink)
    else:
        if args.checkpoint is None or (args.trigger != "now" and args.stop_file is None):
            parser.error("stream needs --checkpoint, and --stop-file unless --trigger now")
        stream(spark, source, sink, args.trigger, args.checkpoint, args.stop_file or Path("/nonexistent"))
    spark.stop()


if __name__ == "__main__":
    main()
