"""Isolating a poison shard's failing rows with Spark, and committing the rest: ``on_poison: isolate``.

The search itself is pure (``iceberg/protocol/isolation.py``); this module gives it its probe:
read the shard's rows in the spans tried (by Iceberg's ``_file`` and ``_pos`` metadata columns),
apply the group's filter and transform, and run them to Spark's ``noop`` sink. A failure of the
platform during a try is raised (``PlatformUnavailable``): it says nothing about the rows, and the
lease goes on later as for any outage. Isolation needs a transform that turns rows into output one
by one (``rowwise``): leaving a row out of an aggregation would change other rows' output.

When every delivery of a shard failed, the lease (``spark_jobs/borrower/publishing.py``) hands it here:
``commit_without_poison`` isolates the rows, records them as dead rows, and stages the rest, whose
commit then names the rows it left out (``isolated_property``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from pyiceberg.table import Table
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from icegroup.iceberg.errors import PlatformUnavailable
from icegroup.iceberg.protocol.isolation import (
    FILES_GONE,
    NOT_ROWWISE,
    REST_FAILS,
    Bisection,
    PoisonRow,
    Probe,
    Span,
    bisect,
    not_isolated,
    positions_by_file,
)
from icegroup.iceberg.protocol.shards import Shard
from icegroup.iceberg.protocol.sink_commit import KEY_ISOLATED
from icegroup.iceberg.store.dead_rows import ISOLATED, DeadRow, record_rows
from icegroup.iceberg.store.tables import shard_columns
from icegroup.spark_jobs.borrower.attempt import LeaseRun, deliver, output
from icegroup.spark_jobs.borrower.redelivery import Staged, Undelivered, catalog_reachable, stage_with_redelivery
from icegroup.spark_jobs.borrower.user_errors import describe_error, is_platform_failure
from icegroup.spark_jobs.row_files import FILE_COLUMN, HOLDING_EXPRESSIONS, POS_COLUMN, sql_string, streams_rows
from icegroup.spark_jobs.shards import identity_filter, of_files, read_shard

# A Python UDF holds rows back in batches, which is why ``streams_rows`` refuses it, but it still
# turns each row into its own output: for isolation it is row by row.
ROW_BY_ROW_EXPRESSIONS = HOLDING_EXPRESSIONS - {"PythonUDF"}


@dataclass(frozen=True)
class Isolation:
    """The rows isolated from one shard, each with its error and the row itself as JSON."""

    rows: list[PoisonRow]
    row_json: dict[tuple[str, int], str]
    probes: int


def rowwise(df: DataFrame, source: str) -> bool:
    """Whether each output row of ``df`` is made from one row of ``source`` alone: projections, filters, UDFs."""
    return streams_rows(df, source, ROW_BY_ROW_EXPRESSIONS)


def in_spans(spans: Sequence[Span]) -> Column:
    """The rows of ``spans``, by ``_file`` and ``_pos``, as one SQL expression."""
    return F.expr(
        " OR ".join(
            f"({FILE_COLUMN} = {sql_string(path)} AND {POS_COLUMN} >= {first} AND {POS_COLUMN} < {end})"
            for path, first, end in spans
        )
    )


def except_rows(positions: Mapping[str, Sequence[int]]) -> Column:
    """Every row but the isolated ones (file -> positions), as one SQL expression."""
    isolated = " OR ".join(
        f"({FILE_COLUMN} = {sql_string(path)} AND {POS_COLUMN} IN ({', '.join(map(str, sorted(found)))}))"
        for path, found in sorted(positions.items())
    )
    return F.expr(f"NOT ({isolated})")


def shard_files(spark: SparkSession, table: str, shard: Shard) -> DataFrame:
    """The rows of the shard's files as of ``Shard.read_at``, with ``_file`` and ``_pos``; its stream prunes it."""
    rows = spark.read.format("iceberg").option("snapshot-id", str(shard.read_at())).load(table)
    stream = identity_filter(shard.identity)
    if stream is not None:
        rows = rows.where(stream)
    return rows.select("*", FILE_COLUMN, POS_COLUMN).where(of_files([shard.files]))


def file_spans(spark: SparkSession, table: str, shard: Shard) -> list[Span]:
    """Each of the shard's files as one span of all its row positions (one small Spark job)."""
    counts = shard_files(spark, table, shard).groupBy(FILE_COLUMN).agg(F.max(POS_COLUMN).alias("last")).collect()
    return sorted((row[FILE_COLUMN], 0, int(row["last"]) + 1) for row in counts)


def probe_with(rows_out: Callable[[Column], DataFrame], platform_up: Callable[[], bool]) -> Probe:
    """A probe that runs the transform on the spans' rows to Spark's ``noop`` sink; the error text if it fails."""

    def probe(spans: Sequence[Span]) -> str | None:
        try:
            rows_out(in_spans(spans)).write.format("noop").mode("overwrite").save()
        except Exception as exc:
            if is_platform_failure(exc) or not platform_up():
                raise PlatformUnavailable(f"isolating poison rows: {describe_error(exc)}") from exc
            return describe_error(exc)
        return None

    return probe


def isolate(
    spark: SparkSession,
    table: str,
    shard: Shard,
    rows_out: Callable[[Column], DataFrame],
    error: Exception,
    cap: int,
    platform_up: Callable[[], bool],
) -> Isolation | str:
    """The shard's rows that fail on their own, or why they could not be isolated.

    ``rows_out`` builds the shard's transformed rows restricted to a condition on ``_file`` and
    ``_pos``. ``error`` is the shard's last delivery's error: the failure of the whole.
    """
    if not rowwise(rows_out(F.lit(True)), table):
        return NOT_ROWWISE
    spans = file_spans(spark, table, shard)
    if not spans:
        return FILES_GONE
    found: Bisection = bisect(spans, describe_error(error), probe_with(rows_out, platform_up), cap)
    if found.stopped is not None:
        return found.stopped
    return Isolation(found.rows, row_json(spark, table, shard, found.rows), found.probes)


def row_json(spark: SparkSession, table: str, shard: Shard, rows: Sequence[PoisonRow]) -> dict[tuple[str, int], str]:
    """The isolated rows as the source holds them, as JSON, for the dead-row table."""
    source = shard_files(spark, table, shard)
    columns = [c for c in source.columns if c not in (FILE_COLUMN, POS_COLUMN)]
    picked = source.select(F.to_json(F.struct(*columns)).alias("row"), FILE_COLUMN, POS_COLUMN).where(
        in_spans([(row.file, row.pos, row.pos + 1) for row in rows])
    )
    return {(r[FILE_COLUMN], int(r[POS_COLUMN])): r["row"] for r in picked.collect()}


def commit_without_poison(
    run: LeaseRun, shard: Shard, root: int | None, source: Table, error: Exception
) -> tuple[Staged | Undelivered, dict[str, list[int]], str | None]:
    """Isolate the rows the shard fails on, record them as dead rows, and stage the rest of the shard.

    Returns the staged rest and the isolated rows (file -> positions), or the error to stop the
    shard with when its rows cannot be isolated (``isolate``), and then why not, with the setting
    that would change it (``not_isolated``), for the stop's own message.
    """
    columns = shard_columns(source, shard.schema_id)

    def rows_out(rows: Column) -> DataFrame:
        read = read_shard(run.spark, run.source_table, shard, root, run.group.filter, columns, rows)
        return run.transform(read)

    run.progress(f"shard {shard.shard_id}: every delivery failed; isolating the rows it fails on (on_poison: isolate)")
    started = time.perf_counter()
    found = isolate(
        run.spark, run.source_table, shard, rows_out, error, run.group.max_isolated_rows,
        lambda: catalog_reachable(run.catalog, run.group.source),
    )  # fmt: skip
    if isinstance(found, str):
        run.progress(f"shard {shard.shard_id}: its rows could not be isolated: {found}; the shard stops as a whole")
        return Undelivered(error), {}, not_isolated(found)
    positions = positions_by_file(found.rows)
    run.progress(
        f"shard {shard.shard_id}: {len(found.rows)} rows isolated in {found.probes} tries "
        f"({time.perf_counter() - started:.1f}s); staging the other rows"
    )
    build = output(run, [shard], root, source, except_rows(positions))
    staged = stage_with_redelivery(
        run.group, shard, build, lambda out: deliver(run, out), run.report, run.progress,
        lambda: catalog_reachable(run.catalog, run.group.source),
    )  # fmt: skip
    if isinstance(staged, Undelivered):  # the rest fails too: the shard stops as a whole, and no row is a dead row
        return staged, {}, not_isolated(REST_FAILS)
    record_rows(run.catalog, run.group.name, dead_rows(run, shard, found))  # before the commit that leaves them out
    return staged, positions, None


def dead_rows(run: LeaseRun, shard: Shard, found: Isolation) -> list[DeadRow]:
    """The dead-row records of the rows isolated from ``shard``."""
    now = int(time.time() * 1000)
    lease = run.lease
    return [
        DeadRow(
            shard_id=shard.shard_id,
            stream=shard.stream,
            lease_id=lease.lease_id,
            attempt=lease.attempt,
            file=row.file,
            pos=row.pos,
            action=ISOLATED,
            error=row.error,
            row=found.row_json.get((row.file, row.pos), "{}"),
            sink_snapshot=None,
            at_ms=now,
        )
        for row in found.rows
    ]


def isolated_property(shard: Shard, positions: dict[str, list[int]]) -> dict[str, str]:
    """The commit property that lists the rows a shard's commit left out; none when it left none out."""
    return {KEY_ISOLATED: json.dumps({shard.shard_id: positions}, separators=(",", ":"))} if positions else {}
