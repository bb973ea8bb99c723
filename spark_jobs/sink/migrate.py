"""Migrating a sink written before the window column: its rows get their window, in one ``replace``.

Sinks created now are partitioned by ``_ig_window`` from the start. A sink written by an older
icegroup gains the column and the partition field by evolution when a Borrower or a replay first
touches it, but its old rows have no window, so a replay could not replace them. This rewrites the
files that hold such rows: each row's window is its shard's, as the sink's commits recorded it; the
new files are partitioned by window. The commit is a ``replace`` (the same rows), which a
downstream group ignores as it ignores compaction.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from icegroup.iceberg.config.lakehouse import LakehouseConfig
from icegroup.iceberg.errors import SinkError
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.sink_commit import COL_WINDOW, KEY_GROUP, KEY_MIGRATE
from icegroup.iceberg.store.sink_windows import lost_windows, shard_windows
from icegroup.iceberg.store.tables import load_optional
from icegroup.spark_jobs.identifiers import quoted
from icegroup.spark_jobs.row_files import FILE_COLUMN
from icegroup.spark_jobs.session import activate
from icegroup.spark_jobs.sink.fenced_commit import stage_shard
from icegroup.spark_jobs.sink.shape import ensure_staged_writes, ensure_window_partition, shard_ids, window_type

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Migrated:
    """What a migration rewrote."""

    files: int
    rows: int
    sink_snapshot: int | None

    def line(self) -> str:
        """One line for a person."""
        if not self.files:
            return "every sink row has its window; nothing to migrate"
        return f"rewrote {self.files} files ({self.rows} rows) with their windows in sink snapshot {self.sink_snapshot}"


def migrate_sink(
    spark: SparkSession, lakehouse: LakehouseConfig, group: GroupConfig, progress: Callable[[str], None] = log.info
) -> Migrated:
    """Give every sink row written before the window column its window; an error names rows that cannot."""
    activate(spark)
    table = f"{lakehouse.catalog_name}.{group.sink}"
    sink = load_optional(lakehouse.catalog(), group.sink)
    if sink is None:
        return Migrated(0, 0, None)
    ensure_staged_writes(spark, table)
    ensure_window_partition(spark, table, window_type(group.replay_window))
    windows = shard_windows(sink, group.name, group.replay_window)
    rows = spark.read.format("iceberg").load(table).select("*", FILE_COLUMN)
    files = [r[0] for r in rows.where(F.col(COL_WINDOW).isNull()).select(FILE_COLUMN).distinct().collect()]
    if not files:
        return Migrated(0, 0, None)
    old = rows.where(F.col(FILE_COLUMN).isin(files))
    shard = shard_ids(rows)
    shards = {r[0] for r in old.select(shard).distinct().collect()}
    unknown = sorted(str(s) for s in shards if s not in windows)
    if unknown:
        raise SinkError(f"sink: {lost_windows(group.sink, unknown)}")
    progress(f"migrating {len(files)} files of {group.sink}: rows get their window")
    mapping = spark.createDataFrame(list(windows.items()), ["_ig_shard_of", "_ig_window_of"])
    filled = (
        old.join(F.broadcast(mapping), shard == mapping["_ig_shard_of"], "left")
        .withColumn(COL_WINDOW, F.col("_ig_window_of").cast(dict(rows.dtypes)[COL_WINDOW]))
        .select(*[F.col(quoted(c)) for c in spark.table(table).columns])
    )
    count = old.count()
    token = stage_shard(filled, table)
    jvm: Any = spark._jvm
    iceberg_table = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, table)
    props = jvm.java.util.HashMap()
    props.put(KEY_GROUP, group.name)
    props.put(KEY_MIGRATE, COL_WINDOW)
    paths = jvm.java.util.ArrayList()
    for path in files:
        paths.add(path)
    snapshot_id, replaced = jvm.icegroup.commit.WindowReplace.rewrite(iceberg_table, token, paths, props)
    return Migrated(int(replaced), count, int(snapshot_id))
