"""Reading exactly one shard: its pinned snapshot range, its stream's files, the group's filter."""

from __future__ import annotations

from collections.abc import Iterable

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from iceberg.errors import SourceError
from iceberg.protocol.shards import Shard
from iceberg.protocol.sink_commit import COL_SHARD, LINEAGE_COLUMNS

FILE_COLUMN = "_file"
UPSTREAM_SHARD_COLUMN = "_ig_upstream_shard"
# Iceberg weighs each file at least 4 MiB when it packs files into read tasks, and splits the scan
# so every core has tasks: a shard of hundreds of kilobyte-sized files became about one task per
# four files, each a task start and an output file. Weighing a file at 1 MiB packs them far denser;
# files larger than that are packed by their size, as before.
READ_OPTIONS = {"file-open-cost": str(1024 * 1024)}


def read_shard(
    spark: SparkSession,
    table: str,
    shard: Shard,
    root_snapshot: int | None,
    row_filter: str | None,
    columns: list[tuple[str, str]] | None = None,
) -> DataFrame:
    """Rows the shard's files hold, restricted by the group's filter, in the shard's own schema.

    Both ends of the range are pinned, so a re-run reads the same rows. The range also holds other
    streams' files: the stream's identity partition values let Iceberg prune most of them at
    planning, and the ``_file`` metadata column restricts rows to exactly the shard's own files.
    ``columns`` (see ``iceberg.store.tables.shard_columns``) maps the current schema back to the one the
    shard was written with. A chained group reads another group's sink: the upstream lineage
    columns are dropped, because this group writes its own.
    Iceberg's incremental read needs an exclusive start; a shard that starts at the table's first
    snapshot reads that snapshot on its own and the rest of the range incrementally.
    """
    reader = spark.read.format("iceberg").options(**READ_OPTIONS)
    if shard.from_snapshot is None:
        if root_snapshot is None:
            raise SourceError(f"shard {shard.shard_id} starts at the table's first snapshot, and it has none left")
        parts = [reader.option("snapshot-id", str(root_snapshot)).load(table).select("*", FILE_COLUMN)]
        if shard.to_snapshot != root_snapshot:
            parts.append(_incremental(spark, table, root_snapshot, shard.to_snapshot))
        df = parts[0] if len(parts) == 1 else parts[0].unionByName(parts[1])
    else:
        df = _incremental(spark, table, shard.from_snapshot, shard.to_snapshot)
    for column, value in shard.identity.items():
        df = df.where(F.col(column).isNull() if value is None else F.col(column) == F.lit(value))
    df = df.where(F.col(FILE_COLUMN).isin(shard.files))
    if row_filter:
        df = df.where(row_filter)
    df = df.drop(FILE_COLUMN)
    if columns is not None:
        df = df.select(*[F.col(f"`{now}`").alias(then) for now, then in columns])
    return df.drop(*[c for c in df.columns if c in LINEAGE_COLUMNS])


def read_files(spark: SparkSession, table: str, snapshot_id: int, files: Iterable[str]) -> DataFrame:
    """Rows of the given data files as of ``snapshot_id``, with their ``_file``: what a replay reads.

    A replay reads a window's shards by their files, not by their snapshot ranges, because those
    snapshots may have expired while the files are still live in the table. It reads the files of
    many shards at once and splits the rows by ``_file``. A source that is another group's sink keeps
    its rows' shard ids as ``UPSTREAM_SHARD_COLUMN``: rows an upstream replay rewrote are split by them.
    """
    df = spark.read.format("iceberg").option("snapshot-id", str(snapshot_id)).load(table).select("*", FILE_COLUMN)
    df = df.where(F.col(FILE_COLUMN).isin(list(files)))
    if COL_SHARD in df.columns:
        df = df.withColumn(UPSTREAM_SHARD_COLUMN, F.col(COL_SHARD))
    return df.drop(*[c for c in df.columns if c in LINEAGE_COLUMNS])


def _incremental(spark: SparkSession, table: str, start_exclusive: int, end_inclusive: int) -> DataFrame:
    return (
        spark.read.format("iceberg")
        .options(**READ_OPTIONS)
        .option("start-snapshot-id", str(start_exclusive))
        .option("end-snapshot-id", str(end_inclusive))
        .load(table)
        .select("*", FILE_COLUMN)
    )
