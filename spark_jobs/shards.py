"""Reading shards exactly: their pinned snapshot range, their own files, the group's filter; several in one scan."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import reduce
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from icegroup.iceberg.errors import SourceError
from icegroup.iceberg.protocol.shard_reads import OPEN_COST_BYTES, AsOf, Span, file_sizes, shard_span, split_bytes
from icegroup.iceberg.protocol.shards import PartitionValue, Shard
from icegroup.iceberg.protocol.sink_commit import COL_SHARD, LINEAGE_COLUMNS
from icegroup.spark_jobs.identifiers import quoted
from icegroup.spark_jobs.row_files import FILE_COLUMN, POS_COLUMN, ROW_ID_COLUMN, mark_rows, sql_string
from icegroup.spark_jobs.sink.shape import shard_ids

UPSTREAM_SHARD_COLUMN = "_ig_upstream_shard"


def read_shard(
    spark: SparkSession,
    table: str,
    shard: Shard,
    root_snapshot: int | None,
    row_filter: str | None,
    columns: list[tuple[str, str]] | None = None,
    rows: Column | None = None,
    row_ids: bool = False,
) -> DataFrame:
    """Rows the shard's files hold, restricted by the group's filter, in the shard's own schema.

    Both ends of the range are pinned, so a re-run reads the same rows. The read is a task set of
    exactly the shard's own files (``read_appended``), though the range holds other streams' files too.
    ``columns`` (see ``icegroup.iceberg.store.tables.shard_columns``) maps the current schema back to the one the
    shard was written with. A chained group reads another group's sink: the upstream lineage
    columns are dropped, because this group writes its own. ``rows`` restricts the read further by
    ``_file`` and ``_pos`` (``spark_jobs/borrower/isolation.py``: rows isolated, or tried, on their own).
    ``row_ids``: each row's ``_row_id`` is noted as it is read (``row_files.mark_rows``), for its output's lineage.
    """
    return read_shards(spark, table, [shard], shard_span(shard), root_snapshot, row_filter, columns, rows, row_ids)


def read_shards(
    spark: SparkSession,
    table: str,
    shards: Sequence[Shard],
    span: Span,
    root_snapshot: int | None,
    row_filter: str | None,
    columns: list[tuple[str, str]] | None = None,
    rows: Column | None = None,
    row_ids: bool = False,
) -> DataFrame:
    """Rows of every file of ``shards``, read in one scan of ``span`` (``shard_reads.spanning_range`` in the protocol).

    As ``read_shard``, for shards of one schema. A span of snapshots reads exactly the shards' files,
    planned from the newest snapshot's manifest list (``read_appended``); one that starts at the
    table's first snapshot looks through all of that list. A span ``AsOf`` a snapshot reads the
    files as of it (a file diff found them after the snapshots that added them expired,
    ``iceberg/history_gap.py``): that read holds every live file, so the streams' identity values
    prune the other streams' files and ``_file`` keeps exactly the shards' own.
    """
    if len({shard.schema_id for shard in shards}) != 1:
        raise ValueError(
            f"read_shards: shards of one source schema only, got {sorted({str(s.schema_id) for s in shards})}"
        )
    options = read_options(spark, shards)
    files = [f for shard in shards for f in shard.files]
    as_of = isinstance(span, AsOf)
    # Each metadata column only when used: Iceberg computes each once asked, even unread.
    metadata = (
        *([FILE_COLUMN] if as_of or rows is not None else []),
        *([POS_COLUMN] if rows is not None else []),
        *([ROW_ID_COLUMN] if row_ids else []),
    )
    if isinstance(span, AsOf):
        reader = spark.read.format("iceberg").options(**options).option("snapshot-id", str(span.snapshot_id))
        df = reader.load(table)
        if span.min_row_id is not None:  # only a format-v3 table has the column
            df = df.where(F.col(ROW_ID_COLUMN) >= F.lit(span.min_row_id))
        df = df.select("*", *metadata)
        streams = [
            identity_filter(identity) for identity in {tuple(s.identity.items()): s.identity for s in shards}.values()
        ]
        if all(stream is not None for stream in streams):
            df = df.where(reduce(lambda a, b: a | b, [stream for stream in streams if stream is not None]))
        df = df.where(of_files([files]))
    else:
        if span[0] is None and root_snapshot is None:
            raise SourceError(f"shard {shards[0].shard_id} starts at the table's first snapshot, and it has none left")
        df = read_appended(spark, table, span[0], span[1], files, options, metadata)
    if row_filter:
        df = df.where(row_filter)
    if rows is not None:
        df = df.where(rows)
    if row_ids:  # the last filter: only rows that reach the transform are noted
        df = mark_rows(df)
    df = df.drop(*metadata)
    if columns is not None:
        df = df.select(*[F.col(quoted(now)).alias(then) for now, then in columns])
    return df.drop(*[c for c in df.columns if c in LINEAGE_COLUMNS])


def of_files(files: Iterable[Iterable[str]]) -> Column:
    """``_file IN (...)`` as one SQL expression: a literal per file through py4j took seconds for a few hundred."""
    return F.expr(f"{FILE_COLUMN} IN ({', '.join(sql_string(f) for group in files for f in group)})")


def identity_filter(identity: dict[str, PartitionValue]) -> Column | None:
    """The condition a stream's identity partition values set, for Iceberg to prune by; None if it has none."""
    conditions = [F.col(c).isNull() if v is None else F.col(c) == F.lit(v) for c, v in identity.items()]
    return reduce(lambda a, b: a & b, conditions) if conditions else None


def read_options(spark: SparkSession, shards: Sequence[Shard]) -> dict[str, str]:
    """The reader's packing of the shards' files into tasks: dense for tiny files, spread over every core."""
    split = split_bytes(file_sizes(shards), spark.sparkContext.defaultParallelism)
    return {"file-open-cost": str(OPEN_COST_BYTES), "split-size": str(split)}


def read_files(
    spark: SparkSession, table: str, snapshot_id: int, files: Iterable[str], row_ids: bool = False
) -> DataFrame:
    """Rows of the given data files as of ``snapshot_id``, with their ``_file``: what a replay reads.

    A replay reads a window's shards by their files, not by their snapshot ranges, because those
    snapshots may have expired while the files are still live in the table. It reads the files of
    many shards at once and splits the rows by ``_file``. A source that is another group's sink keeps
    its rows' shard ids (as text, whichever way that sink stores them) as ``UPSTREAM_SHARD_COLUMN``:
    rows an upstream replay rewrote are split by them. ``row_ids``: the rows keep their ``_row_id``,
    for the caller to note after its own filters (``row_files.mark_rows``).
    """
    metadata = (FILE_COLUMN, ROW_ID_COLUMN) if row_ids else (FILE_COLUMN,)
    df = spark.read.format("iceberg").option("snapshot-id", str(snapshot_id)).load(table).select("*", *metadata)
    df = df.where(F.col(FILE_COLUMN).isin(list(files)))
    if COL_SHARD in df.columns:
        df = df.withColumn(UPSTREAM_SHARD_COLUMN, shard_ids(df))
    return df.drop(*[c for c in df.columns if c in LINEAGE_COLUMNS])


def read_appended(
    spark: SparkSession,
    table: str,
    start_exclusive: int | None,
    end_inclusive: int,
    files: Iterable[str],
    options: dict[str, str],
    metadata: tuple[str, ...],
) -> DataFrame:
    """Rows of ``files``, added after ``start_exclusive`` (None: from the first snapshot) up to ``end_inclusive``.

    Iceberg's own incremental read opens the manifest list of every snapshot in the range, and holds
    them all while it plans: on a source of thousands of snapshots that alone outgrew a 1g driver.
    ``icegroup.read.AppendedFiles`` (icegroup-spark.jar) plans the files from the newest snapshot's
    list and stages them as Iceberg's task set, which the reader takes by ``scan-task-set-id``.
    """
    jvm: Any = spark._jvm
    source = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, table)
    task_set = jvm.icegroup.read.AppendedFiles.stage(source, start_exclusive, end_inclusive, "\n".join(files))
    reader = spark.read.format("iceberg").options(**options).option("scan-task-set-id", task_set)
    return reader.load(table).select("*", *metadata)
