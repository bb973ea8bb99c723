"""What one large shard costs a Borrower beyond the plain Spark job that moves the same rows, and why.

W1's throughput ratio (``bench_throughput.py``) sets ``icegroup consume`` against a plain Spark job
that reads, transforms and appends. A Borrower does more per row: it reads a pinned snapshot range
restricted to the shard's own files, adds the lineage columns that lineage queries, replays and
resets use (the shard as a ``long``, the day window as a ``date``, the row's source file), and
stages the output in the window-partitioned sink for the fenced commit. This isolates those steps
on one warm SparkSession, on one W1 shard: stream ``region=eu`` of W1's source, 12 snapshots, 1.68
million rows, the same transform.

- ``plain``: the stream's rows at the head snapshot, transformed, appended to a plain table;
- ``shard_read``: the shard as the Borrower reads it (``read_shard``), transformed, to a plain table;
- ``lineage``: that, with the lineage columns (``with_lineage``; the shard's number chosen by each
  row's file, ``by_file_number``, as ``spark_jobs/borrower/output.py`` does), to a plain table;
- ``staged``: what the Borrower writes: that, staged in a sink made by ``ensure_sink``
  (window-partitioned, write-audit-publish) with the Borrower's write options (``stage_shard``),
  through the sink's unpartitioned staging spec (``staging_spec``; runs recorded before 5c5ccd2
  routed each row to the window partition);
- ``strings4`` and ``longs4``: ``plain`` with four constant columns added, strings of the lineage
  columns' lengths or ``long`` numbers: what the columns' type costs;
- ``file_ref``: ``plain`` with each row's source-file reference (``_ig_file``: xxhash64 of
  ``input_file_name()``, hashed once per file by ``icegroup_file_ref()``), which ``lineage`` and
  ``staged`` carry too; ``file_ref_per_row`` and ``staged_per_row``: the same with the reference as
  rows carried it before, Spark hashing each row's location;
- ``six``, ``three``, ``three_long`` and ``window_ref``: ``plain`` with the reference and constants
  shaped as lineage columns can be: the six that rows carried before (group, lease, shard, window
  strings, the epoch an ``int``); only the shard and the window, as strings; the shard as a
  ``long``; only the window (a string). What each column costs; ``lineage`` writes the shard as a
  ``long`` and the window as a ``date``.

Each arm writes a fresh table, in a rotating order, ROUNDS rounds after one warm-up round. The
figures are medians, and each arm's cost as a multiple of ``plain``. The publish (a catalog commit,
about 0.1 s) is not included. Run: ``make bench`` (writes tests/benchmarks/results/lineage_cost.json).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date
from pathlib import Path

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from icegroup.iceberg.config.lakehouse import LakehouseConfig, load_lakehouse
from icegroup.iceberg.leader import tick
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.liveness import RunState
from icegroup.iceberg.protocol.shards import Shard
from icegroup.iceberg.protocol.sink_commit import shard_number
from icegroup.spark_jobs.row_files import FILE_REF_SQL, by_file_number, file_ref_column, streams_rows
from icegroup.spark_jobs.session import get_session
from icegroup.spark_jobs.shards import read_shard
from icegroup.spark_jobs.sink.fenced_commit import stage_shard
from icegroup.spark_jobs.sink.shape import ensure_sink, staging_spec, with_lineage
from icegroup.spark_jobs.transforms import enrich_events
from tests.benchmarks.measure import provenance, record_beside_the_run_before
from tests.benchmarks.workloads import W1, fill
from tests.factories import create_source

ROUNDS = 9
ARMS = (
    "plain",
    "shard_read",
    "lineage",
    "staged",
    "staged_per_row",
    "strings4",
    "longs4",
    "file_ref",
    "file_ref_per_row",
    "six",
    "three",
    "three_long",
    "window_ref",
)
STREAM = "0:region=eu"
RESULTS = Path(__file__).parent / "results" / "lineage_cost.json"
# Four constants as the lineage columns have them (group, lease, shard, window), and four numbers.
STRINGS = ("bench", "0123456789abcdef", "fedcba9876543210", "2026-11-25")
LONGS = (1, 0x0123456789ABCDEF, 0x7EDCBA9876543210, 20261125)
# The window every arm's rows carry.
WINDOW = date(2026, 11, 25)
# The reference as rows carried it before it was hashed once per file: Spark hashing each row's location.
PER_ROW_REF_SQL = "CASE WHEN input_file_name() <> '' THEN xxhash64(input_file_name()) END"


def arm_writers(
    spark: SparkSession, catalog: str, source: str, shard: Shard, root: int | None
) -> dict[str, Callable[[str], None]]:
    """Each arm as a function that writes its output to the table it is given."""

    def plain_table(table: str, rows: DataFrame) -> None:
        rows.limit(0).writeTo(table).using("iceberg").create()
        rows.writeTo(table).append()

    def reference(rows: DataFrame, per_row: bool = False) -> Column:
        """The file reference as a Borrower makes it (the plan's verdict first), by the memo or by each row."""
        ref = file_ref_column(rows, source)
        return F.expr(PER_ROW_REF_SQL) if per_row and streams_rows(rows, source) else ref

    def lineage(rows: DataFrame, per_row: bool = False) -> DataFrame:
        """The lineage columns as a lone shard gets them: its number chosen by each row's file where that is known.

        The plan is walked once (``streams_rows``), as a Borrower walks it once per lease.
        """
        if not streams_rows(rows, source):
            return with_lineage(rows, shard.shard_id, WINDOW)
        numbers = {path: shard_number(shard.shard_id) for path in shard.files}
        ref = F.expr(PER_ROW_REF_SQL if per_row else FILE_REF_SQL)
        return with_lineage(rows, by_file_number(spark, numbers), WINDOW, ref)

    def read() -> DataFrame:
        return enrich_events(read_shard(spark, source, shard, root, None))

    def staged(table: str, per_row: bool = False) -> None:
        rows = lineage(read(), per_row)
        ensure_sink(spark, catalog, table.split(".", 1)[1], rows)
        stage_shard(rows, table, spec_id=staging_spec(spark, table))

    def plain() -> DataFrame:
        return enrich_events(spark.table(source).where("region = 'eu'"))

    def with_ref(rows: DataFrame, per_row: bool = False) -> DataFrame:
        return rows.select("*", reference(rows, per_row).alias("ref"))

    def constants(values: tuple[object, ...]) -> DataFrame:
        """``plain`` with a constant column per value; a Python ``int`` is Spark's ``int`` if it fits, else ``long``."""
        return plain().select("*", *[F.lit(value).alias(f"c{index}") for index, value in enumerate(values)])

    return {
        "plain": lambda table: plain_table(table, plain()),
        "strings4": lambda table: plain_table(table, constants(STRINGS)),
        "longs4": lambda table: plain_table(table, constants(LONGS)),
        "file_ref": lambda table: plain_table(table, with_ref(plain())),
        "file_ref_per_row": lambda table: plain_table(table, with_ref(plain(), per_row=True)),
        "six": lambda table: plain_table(table, with_ref(constants((*STRINGS[:3], 0, STRINGS[3])))),
        "three": lambda table: plain_table(table, with_ref(constants(STRINGS[2:]))),
        "three_long": lambda table: plain_table(table, with_ref(constants((LONGS[2], STRINGS[3])))),
        "window_ref": lambda table: plain_table(table, with_ref(constants(STRINGS[3:]))),
        "shard_read": lambda table: plain_table(table, read()),
        "lineage": lambda table: plain_table(table, lineage(read())),
        "staged": staged,
        "staged_per_row": lambda table: staged(table, per_row=True),
    }


@dataclass(frozen=True)
class W1Shard:
    """W1's source in a lakehouse of its own, and its shard of STREAM, as a real Leader tick cut it."""

    lakehouse: LakehouseConfig
    source: str
    shard: Shard
    root: int

    def writers(self, spark: SparkSession) -> dict[str, Callable[[str], None]]:
        """Every arm's writer on this shard, in ``spark``."""
        return arm_writers(spark, self.lakehouse.catalog_name, self.source, self.shard, self.root)


def w1_shard(home: Path) -> W1Shard:
    """Fill W1's source in a lakehouse at ``home`` and cut its shards with a Leader tick; the shard of STREAM."""
    lakehouse = load_lakehouse(env={"ICEGROUP_HOME": str(home)})
    catalog = lakehouse.catalog()
    group = GroupConfig(name="bench", source="bench.events", sink="bench.events_out")
    table = create_source(catalog, group.source)
    fill(table, W1)
    root = min(table.snapshots(), key=lambda s: s.sequence_number or 0).snapshot_id
    shards = tick(catalog, group, lambda _: RunState.MISSING).state.shards.values()
    shard = next(s for s in shards if s.stream == STREAM)
    return W1Shard(lakehouse, f"{lakehouse.catalog_name}.{group.source}", shard, root)


def time_arms(
    writers: dict[str, Callable[[str], None]], arms: tuple[str, ...], rounds: int, namespace: str
) -> dict[str, list[float]]:
    """Each arm's seconds over ``rounds`` rounds after a warm-up round, in a rotating order, each to a fresh table."""
    seconds: dict[str, list[float]] = {arm: [] for arm in arms}
    for index in range(rounds + 1):
        for arm in arms[index % len(arms) :] + arms[: index % len(arms)]:
            started = time.perf_counter()
            writers[arm](f"{namespace}.{arm}_{index}")
            elapsed = time.perf_counter() - started
            if index > 0:  # round 0 warms the JVM up
                seconds[arm].append(round(elapsed, 2))
            print(f"round {index}: {arm} {elapsed:.2f}s", flush=True)
    return seconds


def main() -> None:
    """Fill W1's source, cut its shards with a real Leader tick, then time the arms and record them."""
    measured = provenance()  # before the rounds: the commit whose code they run
    with tempfile.TemporaryDirectory(prefix="icegroup-bench-lineage-") as tmp:
        bench = w1_shard(Path(tmp) / "lake")
        shard, spark = bench.shard, get_session(bench.lakehouse)
        writers, name = bench.writers(spark), bench.lakehouse.catalog_name
        print(f"shard {shard.shard_id}: {shard.rows} rows, {len(shard.files)} files", flush=True)
        seconds = time_arms(writers, ARMS, ROUNDS, f"{name}.bench")
        spark.stop()
    about = {**measured, "rounds": ROUNDS, "shard": {"rows": shard.rows, "files": len(shard.files), "stream": STREAM}}
    record_costs(seconds, about, RESULTS)


def record_costs(seconds: dict[str, list[float]], about: dict[str, object], path: Path) -> None:
    """Write ``about`` and each arm's seconds, median and cost over ``plain`` to ``path``; print the costs."""
    medians = {arm: statistics.median(values) for arm, values in seconds.items()}
    ratios = {arm: round(median / medians["plain"], 2) for arm, median in medians.items()}
    result = {**about, "seconds": seconds, "median_s": medians, "cost_over_plain": ratios}
    record_beside_the_run_before(path, result)
    print("cost / plain: " + "  ".join(f"{arm} {ratio}x" for arm, ratio in ratios.items()))


if __name__ == "__main__":
    main()
