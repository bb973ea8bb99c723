"""What a Borrower's one Spark job over a whole W1 backlog costs beyond the plain job, step by step.

Since the Leader grants a backlog's streams to one lease, a Borrower reads W1's three shards (5.04
million rows) in one scan, transforms them once, names each row's shard by its source file and
stages the whole in one job (``spark_jobs/borrower/output.py``). What is left between that job and
the plain one is the per-row price. This times it in steps, on one warm SparkSession, on the shards
a real Leader tick cut:

- ``plain``: the plain job (``baselines.py batch``): the whole source read, transformed, appended;
- ``batch_read``: the three shards read in one scan (``read_shards``), transformed, to a plain table;
- ``batch_lineage``: that, with the lineage columns as a batch gets them (the shard chosen by each
  row's file, ``by_file_number``; the window; the file reference), to a plain table;
- ``batch_staged``: what the Borrower writes: that, staged in a sink made by ``ensure_sink``
  (window-partitioned, write-audit-publish) with the Borrower's write options (``stage_shard``),
  through the sink's unpartitioned staging spec (``staging_spec``: the batch has one window);
- ``batch_staged_routed``: the same, staged through the sink's window spec, each row routed to its
  partition by Spark's writer, as a Borrower staged before the staging spec;
- ``batch_staged_new_shards``: ``batch_staged`` with other shard numbers each round, as each lease
  has its own: the job's generated code must stay the same class (``by_file_number``'s map is data);
- ``batch_staged_buckets``: that, with each row's shard chosen in SQL by ``by_file``'s array of maps,
  as a Borrower did from f1d81a7 until ``FileValues.java``;
- ``batch_staged_case``: that, with each row's shard chosen by a ``CASE`` of the files, as a Borrower
  did before f1d81a7, which wrote the shard numbers into the job's generated code: a new class per
  lease, compiled while the job runs.

Each arm writes a fresh table, in a rotating order, ``--rounds`` rounds after one warm-up round.
The figures are medians, and each arm's cost as a multiple of ``plain``; the publish (a catalog
commit, about 0.1 s) is not included. Run: ``python -m tests.benchmarks.bench_batch_cost`` (writes
tests/benchmarks/results/batch_cost.json).
"""

from __future__ import annotations

import argparse
import itertools
import tempfile
from collections.abc import Callable
from datetime import date
from pathlib import Path

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from icegroup.iceberg.config.lakehouse import load_lakehouse
from icegroup.iceberg.leader import tick
from icegroup.iceberg.protocol.file_ref import file_ref
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.liveness import RunState
from icegroup.iceberg.protocol.locations import file_forms
from icegroup.iceberg.protocol.shard_reads import Span, batch_span
from icegroup.iceberg.protocol.shards import Shard
from icegroup.iceberg.protocol.sink_commit import shard_number
from icegroup.iceberg.store.tables import oldest_snapshot_id, shard_columns
from icegroup.spark_jobs.borrower.output import sequence_number
from icegroup.spark_jobs.row_files import FILE_REF_SQL, by_file, by_file_number
from icegroup.spark_jobs.session import get_session
from icegroup.spark_jobs.shards import read_shards
from icegroup.spark_jobs.sink.fenced_commit import stage_shard
from icegroup.spark_jobs.sink.shape import ensure_sink, staging_spec, with_lineage
from icegroup.spark_jobs.transforms import enrich_events
from tests.benchmarks.baselines import batch
from tests.benchmarks.bench_lineage_cost import record_costs, time_arms
from tests.benchmarks.measure import provenance
from tests.benchmarks.workloads import W1, fill
from tests.factories import create_source

ROUNDS = 5
ARMS = (
    "plain",
    "batch_read",
    "batch_lineage",
    "batch_staged",
    "batch_staged_routed",
    "batch_staged_new_shards",
    "batch_staged_buckets",
    "batch_staged_case",
)
WINDOW = date(2026, 11, 25)
RESULTS = Path(__file__).parent / "results" / "batch_cost.json"


def arm_writers(
    spark: SparkSession,
    catalog: str,
    source: str,
    shards: list[Shard],
    span: Span,
    root: int | None,
    columns: list[tuple[str, str]] | None,
) -> dict[str, Callable[[str], None]]:
    """Each arm as a function that writes its output to the table it is given."""

    def plain_table(table: str, rows: DataFrame) -> None:
        rows.limit(0).writeTo(table).using("iceberg").create()
        rows.writeTo(table).append()

    def read() -> DataFrame:
        return enrich_events(read_shards(spark, source, shards, span, root, None, columns))

    rounds = itertools.count(1)

    def numbers(offset: int) -> dict[str, int]:
        return {path: shard_number(shard.shard_id) + offset for shard in shards for path in shard.files}

    def lineage(rows: DataFrame, shard: Column | None = None) -> DataFrame:
        chosen = by_file_number(spark, numbers(0)) if shard is None else shard
        return with_lineage(rows, chosen, WINDOW, F.expr(FILE_REF_SQL))

    def staged(table: str, routed: bool = False, shard: Column | None = None) -> None:
        rows = lineage(read(), shard)
        ensure_sink(spark, catalog, table.split(".", 1)[1], rows)
        stage_shard(rows, table, spec_id=None if routed else staging_spec(spark, table))

    return {
        "plain": lambda table: batch(spark, source, table),
        "batch_read": lambda table: plain_table(table, read()),
        "batch_lineage": lambda table: plain_table(table, lineage(read())),
        "batch_staged": staged,
        "batch_staged_routed": lambda table: staged(table, routed=True),
        "batch_staged_new_shards": lambda table: staged(table, shard=by_file_number(spark, numbers(next(rounds)))),
        "batch_staged_buckets": lambda table: staged(table, shard=by_file(numbers(next(rounds)))),
        "batch_staged_case": lambda table: staged(table, shard=case_of_files(numbers(next(rounds)))),
    }


def case_of_files(values: dict[str, int]) -> Column:
    """Each row's shard number by a ``CASE`` of its file's reference, as ``by_file`` chose it before f1d81a7."""
    branches = []
    for value in sorted(set(values.values())):
        refs = sorted({file_ref(form) for path, v in values.items() if v == value for form in file_forms(path)})
        branches.append(f"WHEN {FILE_REF_SQL} IN ({', '.join(map(str, refs))}) THEN CAST({value} AS BIGINT)")
    return F.expr(f"CASE {' '.join(branches)} ELSE raise_error('a row of another file') END")


def main() -> None:
    """Fill W1's source, cut its shards with a real Leader tick, then time the arms and record them."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="rounds per arm (default %(default)s)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="icegroup-bench-batch-") as tmp:
        lakehouse = load_lakehouse(env={"ICEGROUP_HOME": str(Path(tmp) / "lake")})
        catalog = lakehouse.catalog()
        group = GroupConfig(name="bench", source="bench.events", sink="bench.events_out")
        table = create_source(catalog, group.source)
        fill(table, W1)
        table = catalog.load_table(group.source)
        shards = sorted(tick(catalog, group, lambda _: RunState.MISSING).state.shards.values(), key=lambda s: s.stream)
        span = batch_span(shards, lambda snapshot: sequence_number(table, snapshot))
        if span is None:
            raise RuntimeError("W1's shards should be read in one scan")
        spark = get_session(lakehouse)
        name = lakehouse.catalog_name
        columns = shard_columns(table, shards[0].schema_id)
        writers = arm_writers(spark, name, f"{name}.{group.source}", shards, span, oldest_snapshot_id(table), columns)
        seconds = time_arms(writers, ARMS, args.rounds, f"{name}.bench")
        spark.stop()
    about = {
        **provenance(),
        "rounds": args.rounds,
        "shards": [{"stream": s.stream, "rows": s.rows, "files": len(s.files)} for s in shards],
    }
    record_costs(seconds, about, RESULTS)


if __name__ == "__main__":
    main()
