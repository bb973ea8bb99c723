"""A workload's source filled by Spark ``INSERT``s, in a process of its own: for thousands of snapshots.

pyiceberg writes each commit's whole table metadata in Python, so its appends slow down as
snapshots accumulate: W2's 3,000 would take about an hour, Spark's about ten minutes. The rows have
the same ids, regions and times as ``workloads.events``; amounts and users are drawn by Spark's
``rand``, so they differ (each size is a source of its own). Spark's appends would merge manifests
(``commit.manifest-merge.enabled``), which pyiceberg's do not: the fill turns that off, so the
source is laid out as pyiceberg lays out the smaller sizes, one manifest per snapshot. The fill runs
in its own process, so that no JVM of it is left beside the timed arms. Run: ``python -m
tests.benchmarks.spark_fill HOME TABLE SNAPSHOTS ROWS`` on a source that exists and is empty.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from icegroup.iceberg.config.lakehouse import load_lakehouse
from icegroup.spark_jobs.session import get_session
from tests.benchmarks.measure import run_in_session
from tests.benchmarks.workloads import Workload
from tests.factories import EVENTS_START, REGIONS
from tests.stack_env import home_env


def fill_with_spark(home: Path, table: str, workload: Workload) -> None:
    """Fill ``table`` (``namespace.name``) of the lakehouse at ``home`` with ``workload``, in a new process."""
    command = [
        sys.executable,
        "-m",
        "tests.benchmarks.spark_fill",
        str(home),
        table,
        str(workload.snapshots),
        str(workload.rows_per_snapshot),
    ]
    returncode, _ = run_in_session(command)  # its JVM has stopped before the first arm starts
    if returncode != 0:
        raise subprocess.CalledProcessError(returncode, command)


def main() -> None:
    """Commit the snapshots, each one ``INSERT`` of event ids from 1 on."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("home", type=Path)
    parser.add_argument("table")
    parser.add_argument("snapshots", type=int)
    parser.add_argument("rows", type=int)
    args = parser.parse_args()
    lakehouse = load_lakehouse(env=home_env(args.home))
    spark = get_session(lakehouse)
    table = f"{lakehouse.catalog_name}.{args.table}"
    # The columns are required, and ``range`` makes only the ids non-null to Spark.
    spark.conf.set("spark.sql.iceberg.check-nullability", "false")
    spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ('commit.manifest-merge.enabled'='false')")
    start_us = int(EVENTS_START.timestamp() * 1_000_000)
    regions = ", ".join(f"'{region}'" for region in REGIONS)
    for index in range(args.snapshots):
        first = 1 + index * args.rows
        spark.sql(
            f"INSERT INTO {table} SELECT id AS event_id, "
            f"element_at(array({regions}), CAST(id % {len(REGIONS)} AS INT) + 1) AS region, "
            f"timestamp_micros({start_us} + id * 1000000) AS event_ts, "
            f"round(1 + rand({11 + index}) * 99, 2) AS amount, "
            f"CAST(1 + floor(rand({1_000_011 + index}) * 499) AS BIGINT) AS user_id "
            f"FROM range({first}, {first + args.rows}, 1, 1)"
        )
        if (index + 1) % 500 == 0:
            print(f"filled {index + 1}/{args.snapshots} snapshots", flush=True)
    spark.sql(f"ALTER TABLE {table} UNSET TBLPROPERTIES ('commit.manifest-merge.enabled')")
    spark.stop()


if __name__ == "__main__":
    main()
