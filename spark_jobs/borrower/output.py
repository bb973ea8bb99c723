"""A lease's output for one sink commit: its shards read, transformed and given their lineage columns.

A lone shard is read, transformed and labelled with its shard id and window. Several shards
that commit together are read in one scan and transformed once, when the transform hands rows on
one by one (``icegroup.spark_jobs.row_files.streams_rows``): each row then names its shard and window by its
source file, and the batch costs one scan planning and a few tasks instead of one per shard. A
transform that holds rows back (an aggregation, a sort, a join) sees each shard on its own, as
before, so that its output stays per shard.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import date
from functools import reduce

from pyiceberg.table import Table
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.shard_reads import AsOf, batch_span
from icegroup.iceberg.protocol.shards import Shard, sink_window
from icegroup.iceberg.protocol.sink_commit import shard_number
from icegroup.iceberg.protocol.state import Lease
from icegroup.iceberg.store.tables import shard_columns
from icegroup.spark_jobs.row_files import FILE_REF_SQL, RowFiles, by_file, by_file_number
from icegroup.spark_jobs.shards import read_shard, read_shards
from icegroup.spark_jobs.sink.shape import with_lineage
from icegroup.spark_jobs.transforms import Transform


def sequence_number(source: Table, snapshot_id: int) -> int | None:
    """A source snapshot's sequence number; None if it has expired since (its shards are then read one by one)."""
    snapshot = source.snapshot_by_id(snapshot_id)
    return None if snapshot is None else snapshot.sequence_number


def shard_output(
    spark: SparkSession,
    source_table: str,
    group: GroupConfig,
    lease: Lease,
    transform: Transform,
    shards: Sequence[Shard],
    root: int | None,
    source: Table,
    row_files: RowFiles,
    rows: Column | None = None,
) -> Callable[[], DataFrame]:
    """The shards' output as a fresh DataFrame per delivery, each row with its own shard's lineage columns.

    ``row_files`` holds the lease's verdict on its transform; the first output built finds it. On a
    format-v3 source (``row_files.row_ids``) the reads note each row's ``_row_id`` and streamed output keeps it.
    ``rows`` restricts a lone shard's read by ``_file`` and ``_pos``: every row but the isolated ones.
    """
    columns = shard_columns(source, shards[0].schema_id)

    def window(shard: Shard) -> date | str:
        return sink_window(shard.window_start_ms, group.replay_window)

    def row_ids(schema: int | None) -> bool:
        # Rows are noted while the verdict is unknown or streams; a transform that holds rows back skips the cost.
        return row_files.row_ids and row_files.known(schema) is not False

    def read(shard: Shard) -> DataFrame:
        marked = row_ids(shard.schema_id)
        return transform(read_shard(spark, source_table, shard, root, group.filter, columns, rows, marked))

    def together() -> DataFrame | None:
        schema = shards[0].schema_id
        span = batch_span(shards, lambda snapshot: sequence_number(source, snapshot))
        if span is None or row_files.known(schema) is False:
            return None
        if row_files.known(schema) is None and isinstance(span, AsOf):
            # A read as of a snapshot holds a literal per file of every shard, which the verdict's walk
            # of the plan would fetch one by one: one shard's output tells as well.
            row_files.ref(read(shards[0]), schema)
            if not row_files.known(schema):
                return None
        out = transform(
            read_shards(spark, source_table, shards, span, root, group.filter, columns, row_ids=row_ids(schema))
        )
        # The verdict from the batch's own output, found once per lease: a read of one shard beside it
        # was a second table load, file planning and analysis before a lease's first job. A transform
        # that holds rows back then has the batch's read built for nothing, once, before each shard's.
        if row_files.ref(out, schema) is None:
            return None
        ref = F.expr(FILE_REF_SQL)
        by_shard = by_file_number(spark, {p: shard_number(shard.shard_id) for shard in shards for p in shard.files})
        windows = {window(shard) for shard in shards}
        by_window: date | str | Column = (
            windows.pop() if len(windows) == 1 else by_file({path: window(s) for s in shards for path in s.files})
        )
        return with_lineage(out, by_shard, by_window, ref, row_files.row_ref(schema))

    def one(shard: Shard) -> DataFrame:
        out = read(shard)
        ref = row_files.ref(out, shard.schema_id)
        # Where each row's file is known, its shard is chosen by it (``by_file_number``): a literal shard
        # number would make each lease's job a class of its own for the JVM to compile.
        numbers = {path: shard_number(shard.shard_id) for path in shard.files}
        number = shard.shard_id if ref is None else by_file_number(spark, numbers)
        return with_lineage(out, number, window(shard), ref, row_files.row_ref(shard.schema_id))

    def each() -> DataFrame:
        return reduce(DataFrame.unionByName, [one(shard) for shard in shards])

    def batch() -> DataFrame:
        out = together()
        return each() if out is None else out

    return each if len(shards) == 1 else batch
