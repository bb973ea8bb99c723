"""What naming each output row's source row costs, on a format-v3 source: the ``_ig_row`` column.

On a format-v3 source a Borrower's read asks Iceberg for each row's ``_row_id``, notes it as the row
is read (``row_files.mark_rows``) and writes it back into the row's output (``ROW_REF_SQL``): one
``long`` column more than the file reference every sink row carries. This times that on one warm
SparkSession, on W1's ``region=eu`` stream copied into a format-v3 table (1.68 million rows), with
W1's transform:

- ``plain``: the table read, transformed and appended to a plain table;
- ``file_ref``: that with each row's source-file reference (``_ig_file``), as every sink row has it;
- ``row_noted``: ``file_ref`` with each row's ``_row_id`` read and noted as a Borrower does on a v3
  source, but not written: what reading and noting cost;
- ``row_ref``: ``file_ref`` with the source row's id too, read, noted and written as a Borrower does.

Each arm writes a fresh table, in a rotating order, ROUNDS rounds after one warm-up round; the
figures are medians and multiples of ``plain``. Run: ``make bench`` (writes results/row_lineage.json).
"""

from __future__ import annotations

import json
import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from icegroup.spark_jobs.row_files import FILE_REF_SQL, ROW_ID_COLUMN, ROW_REF_SQL, mark_rows
from icegroup.spark_jobs.session import get_session
from icegroup.spark_jobs.transforms import enrich_events
from tests.benchmarks.bench_lineage_cost import time_arms, w1_shard

ROUNDS = 9
ARMS = ("plain", "file_ref", "row_noted", "row_ref")
RESULTS = Path(__file__).parent / "results" / "row_lineage.json"


def v3_copy(spark: SparkSession, source: str, table: str) -> None:
    """``source``'s ``region=eu`` rows in a new format-v3 table, one append per source snapshot (so many files)."""
    spark.sql(
        f"CREATE TABLE {table} USING iceberg TBLPROPERTIES ('format-version'='3') AS SELECT * FROM {source} LIMIT 0"
    )
    listed = spark.sql(f"SELECT snapshot_id FROM {source}.snapshots ORDER BY committed_at").collect()
    snapshots = [row["snapshot_id"] for row in listed]
    for previous, snapshot in zip([None, *snapshots], snapshots, strict=False):
        reader = spark.read.format("iceberg")  # a reader keeps its options: a fresh one per read
        if previous is None:
            added = reader.option("snapshot-id", str(snapshot)).load(source)
        else:
            added = (
                reader.option("start-snapshot-id", str(previous)).option("end-snapshot-id", str(snapshot)).load(source)
            )
        added.where("region = 'eu'").writeTo(table).append()


def arm_writers(spark: SparkSession, table: str) -> dict[str, Callable[[str], None]]:
    """Each arm as a function that writes its output to the table it is given."""

    def write(out: DataFrame, target: str) -> None:
        out.limit(0).writeTo(target).using("iceberg").create()
        out.writeTo(target).append()

    def plain() -> DataFrame:
        return enrich_events(spark.table(table))

    def file_ref() -> DataFrame:
        return plain().select("*", F.expr(FILE_REF_SQL).alias("_ig_file"))

    def noted() -> DataFrame:
        return enrich_events(mark_rows(spark.table(table).select("*", ROW_ID_COLUMN)).drop(ROW_ID_COLUMN))

    def row_noted() -> DataFrame:
        return noted().select("*", F.expr(FILE_REF_SQL).alias("_ig_file"))

    def row_ref() -> DataFrame:
        return noted().select("*", F.expr(FILE_REF_SQL).alias("_ig_file"), F.expr(ROW_REF_SQL).alias("_ig_row"))

    return {
        "plain": lambda target: write(plain(), target),
        "file_ref": lambda target: write(file_ref(), target),
        "row_noted": lambda target: write(row_noted(), target),
        "row_ref": lambda target: write(row_ref(), target),
    }


def main() -> None:
    """Copy W1's stream into a v3 table, then time the arms and record them."""
    with tempfile.TemporaryDirectory(prefix="icegroup-bench-rows-") as tmp:
        bench = w1_shard(Path(tmp) / "lake")
        spark = get_session(bench.lakehouse)
        table = f"{bench.lakehouse.catalog_name}.bench.events_v3"
        v3_copy(spark, bench.source, table)
        rows = spark.table(table).count()
        seconds = time_arms(arm_writers(spark, table), ARMS, ROUNDS, f"{bench.lakehouse.catalog_name}.bench")
        spark.stop()
    medians = {arm: statistics.median(values) for arm, values in seconds.items()}
    result = {
        "rounds": ROUNDS,
        "rows": rows,
        "seconds": seconds,
        "median_s": medians,
        "cost_over_plain": {arm: round(medians[arm] / medians["plain"], 2) for arm in ARMS},
        "row_ref_over_file_ref": round(medians["row_ref"] / medians["file_ref"], 2),
    }
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["cost_over_plain"]), f"row_ref / file_ref {result['row_ref_over_file_ref']}x")


if __name__ == "__main__":
    main()
