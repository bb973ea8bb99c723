"""The sink's shape: its lineage columns, its table properties, its window partition, and output aligned to it.

A sink is created by the first output written to it (``ensure_sink``), staged writes on, partitioned
by the replay window; later outputs are checked and ordered against it (``align_to_sink``) before
the fenced commit (``spark_jobs/sink/fenced_commit.py``) publishes them.
"""

from __future__ import annotations

import logging
from datetime import date
from typing import Any

from py4j.protocol import Py4JJavaError
from pyspark.errors.exceptions.captured import AnalysisException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from icegroup.iceberg.errors import SinkError
from icegroup.iceberg.protocol.promotion import fits_in, widens_to
from icegroup.iceberg.protocol.shards import Window
from icegroup.iceberg.protocol.sink_commit import (
    COL_FILE,
    COL_ROW,
    COL_SHARD,
    COL_WINDOW,
    LINEAGE_COLUMNS,
    SHARD_ID_DIGITS,
    shard_number,
)
from icegroup.spark_jobs.identifiers import ddl_type, quoted

log = logging.getLogger(__name__)

WINDOW_METRICS = f"write.metadata.metrics.column.{COL_WINDOW}"
SINK_PROPERTIES = {
    "format-version": "2",
    # Exact bounds on the shard column keep lineage queries and replays by shard exact.
    "write.metadata.metrics.column._ig_shard": "full",
    # Exact bounds on the window column let the fenced commit place a file staged without partitions (``staging_spec``).
    WINDOW_METRICS: "full",
    # Shard output is staged, then published by the fenced commit.
    "write.wap.enabled": "true",
    # Outputs may lack columns (older shards) or add them (the source gained one); see stage_shard.
    "write.spark.accept-any-schema": "true",
    # Borrowers at max_borrowers commit at once; a lost swap is retried with backoff, not failed.
    "commit.retry.num-retries": "20",
    "commit.retry.min-wait-ms": "50",
    "commit.retry.max-wait-ms": "5000",
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": "100",
}

# The SQL state of Spark's error for a table that is not there, or whose namespace is not
# (TABLE_OR_VIEW_NOT_FOUND): the same on Spark 3.5 and 4.0, where the error class's getter is deprecated.
MISSING_TABLE = "42P01"
# Iceberg's error for a namespace that is not there, as a REST catalog's client may raise it on a table's load.
MISSING_NAMESPACE = "org.apache.iceberg.exceptions.NoSuchNamespaceException"


def with_lineage(
    df: DataFrame,
    shard_id: str | Column,
    window: date | str | Column,
    file_ref: Column | None = None,
    row_ref: Column | None = None,
) -> DataFrame:
    """Add the row lineage: the shard (as its number), the window (``window_value``) and the source-file reference.

    The group, lease and epoch of a commit are in its summary, not in its rows: three string columns
    that hold one value per commit cost each row their encoding. ``file_ref`` is each row's
    source-file reference (``icegroup.spark_jobs.row_files.RowFiles``); without it, rows carry null there
    and lineage names their whole shard. Rows of several shards read in one scan name their shard by
    their file (``row_files.by_file_number``), and their window too where the shards' differ
    (``row_files.by_file``). ``row_ref`` is each row's source ``_row_id`` (a format-v3 source's,
    ``RowFiles.row_ref``): only output that has it gets the column, so a sink of any other source
    stays one column narrower. A transform must not produce columns with the reserved names
    (``LINEAGE_COLUMNS``).
    """
    clash = [c for c in df.columns if c in LINEAGE_COLUMNS]
    if clash:
        raise SinkError(f"transform: output has reserved lineage column(s) {clash}; rename them")
    row = [] if row_ref is None else [row_ref.alias(COL_ROW)]
    return df.select(
        "*",
        (F.lit(shard_number(shard_id)).cast("long") if isinstance(shard_id, str) else shard_id).alias(COL_SHARD),
        (window if isinstance(window, Column) else F.lit(window)).alias(COL_WINDOW),
        (F.lit(None).cast("long") if file_ref is None else file_ref).alias(COL_FILE),
        *row,
    )


def ensure_sink(spark: SparkSession, catalog: str, sink: str, df: DataFrame) -> None:
    """Create the sink from the first output's schema if it does not exist yet, with staged writes on.

    An existing sink is checked from one load of its table (its properties and partition spec),
    where ``CREATE NAMESPACE``, ``CREATE TABLE IF NOT EXISTS``, ``SHOW TBLPROPERTIES`` and a load
    of its spec took 0.08 to 0.14 s a lease on a warm JVM (0.01 s now, in scratch runs; a new sink's
    first check on a new JVM 0.85 s against 0.40 to 0.64 s). The first Borrowers of a group race to create it.
    ``IF NOT EXISTS`` does not settle that race: both see no table (or namespace), and the loser's
    catalog insert fails (on PostgreSQL as an "Unknown failure" from a duplicate key). Whoever
    created it, existing afterwards is success.
    """
    table = f"{catalog}.{sink}"
    iceberg = load_sink(spark, table)
    if iceberg is None:
        create_sink(spark, catalog, sink, df)
        iceberg = iceberg_table(spark, table)
    if ensure_window_partition(spark, table, dict(df.dtypes)[COL_WINDOW], iceberg):
        iceberg = iceberg_table(spark, table)  # with the window column, whose metrics are set next
    ensure_staged_writes(spark, table, iceberg)


def staging_spec(spark: SparkSession, table: str) -> int | None:
    """The id of the sink's unpartitioned spec, added if missing; None unless the window alone partitions the sink.

    Output whose rows all hold one window is staged through it (``stage_shard``'s ``spec_id``): Spark's
    partitioned writer routes each row to its window's file, 0.12x to 0.16x of a plain write on W1's
    rows (``docs/concepts/performance.md``), and every row would go to the same one. The fenced
    commit gives each staged file its window partition from the file's exact bounds on the window
    column (``StagingSpec.java`` in ``spark_jobs/sink/jvm``), so main holds what the partitioned writer would have made.
    Asked before each write, from a fresh load: an expiry that cleans unused metadata (Iceberg's
    ``clean_expired_metadata``) removes the spec while no staged snapshot uses it, and this adds it again.
    """
    jvm: Any = spark._jvm
    spec_id = int(jvm.icegroup.commit.StagingSpec.ensure(iceberg_table(spark, table), COL_WINDOW))
    return None if spec_id < 0 else spec_id


def create_sink(spark: SparkSession, catalog: str, sink: str, df: DataFrame) -> None:
    """Create the sink (and its namespace) with ``df``'s columns, partitioned by the window, staged writes on."""
    namespace = sink.rsplit(".", 1)[0]
    columns = ", ".join(f"{quoted(f.name)} {ddl_type(f.dataType)}" for f in df.schema.fields)
    properties = ", ".join(f"'{k}'='{v}'" for k, v in SINK_PROPERTIES.items())
    try:
        spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {catalog}.{namespace}")
    except Exception:
        if not spark.catalog.databaseExists(f"{catalog}.{namespace}"):
            raise
    try:
        spark.sql(
            f"CREATE TABLE IF NOT EXISTS {catalog}.{sink} ({columns}) USING iceberg "
            f"PARTITIONED BY ({COL_WINDOW}) TBLPROPERTIES ({properties})"
        )
    except Exception:
        if not spark.catalog.tableExists(f"{catalog}.{sink}"):
            raise


def iceberg_table(spark: SparkSession, table: str) -> Any:
    """The table as Iceberg's Java API has it, loaded from the catalog now."""
    jvm: Any = spark._jvm
    return jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, table)


def load_sink(spark: SparkSession, table: str) -> Any | None:
    """The sink's Iceberg table (``iceberg_table``), or None if it, or its namespace, does not exist.

    Spark answers a missing table with its own error; a REST server may answer a missing namespace
    with Iceberg's ``NoSuchNamespaceException``, which Spark's catalog passes on as it is.
    """
    try:
        return iceberg_table(spark, table)
    except AnalysisException as exc:
        if exc.getSqlState() == MISSING_TABLE:
            return None
        raise
    except Py4JJavaError as exc:
        if exc.java_exception.getClass().getName() == MISSING_NAMESPACE:
            return None
        raise


def ensure_staged_writes(spark: SparkSession, table: str, iceberg: Any | None = None) -> None:
    """The session stages writes to the sink, and the sink takes them staged (and any output schema).

    ``iceberg`` is the sink's table as just loaded, if the caller has it (``iceberg_table``).
    """
    if spark.conf.get("spark.wap.id", None) != "icegroup":
        raise SinkError(
            "spark.wap.id: must be 'icegroup' so that shard output is staged; use icegroup.spark_jobs.session"
        )
    loaded = iceberg if iceberg is not None else iceberg_table(spark, table)
    properties = loaded.properties()
    # A metrics setting must name a column the table has: an older sink gains the window's with the column.
    keys = ("write.wap.enabled", "write.spark.accept-any-schema", WINDOW_METRICS)
    windowed = loaded.schema().findField(COL_WINDOW) is not None
    needed = {key: SINK_PROPERTIES[key] for key in keys if windowed or key != WINDOW_METRICS}
    missing = ", ".join(f"'{key}'='{value}'" for key, value in needed.items() if properties.get(key) != value)
    if missing:
        spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ({missing})")


def window_partitioned(spark: SparkSession, table: str, iceberg: Any | None = None) -> bool:
    """Whether the sink's current partition spec has the replay window as a field."""
    spec = (iceberg if iceberg is not None else iceberg_table(spark, table)).spec()
    return any(str(field.name()) == COL_WINDOW for field in spec.fields())


def ensure_window_partition(spark: SparkSession, table: str, column_type: str, iceberg: Any | None = None) -> bool:
    """Partition the sink by the replay window, in addition to any partitioning it already has.

    A sink created before the window column (or by the user, with partitioning of its own) gains
    the column (of ``column_type``: ``window_type``) and the partition field by schema and
    partition-spec evolution; its existing files keep their spec, and new output is written per
    window. Borrowers may do this at once: whoever loses the race finds the field there.
    ``iceberg`` is the sink's table as just loaded, if the caller has it (``iceberg_table``). Returns
    whether the sink changed.
    """
    if window_partitioned(spark, table, iceberg):
        return False
    columns = {f.name for f in spark.table(table).schema.fields}
    try:
        if COL_WINDOW not in columns:
            spark.sql(f"ALTER TABLE {table} ADD COLUMN {COL_WINDOW} {column_type}")
        spark.sql(f"ALTER TABLE {table} ADD PARTITION FIELD {COL_WINDOW}")
    except Exception:
        if not window_partitioned(spark, table):
            raise
    log.info("sink %s: now partitioned by %s as well", table, COL_WINDOW)
    return True


def align_to_sink(spark: SparkSession, table: str, df: DataFrame) -> tuple[DataFrame, bool]:
    """Order the output's columns as the sink has them; widen the sink's where the source widened its own.

    A column of another type than the sink's fails, unless one is Iceberg's promotion of the other
    (``widens_to``): a wider output widens the sink's column (``widen_columns``), a narrower one (a
    sink made wider than its source, or a byte or short column that Iceberg keeps as an int:
    ``fits_in``) is cast to the sink's type.

    Returns the aligned output and whether it has columns the sink lacks: the write then adds them
    (the source gained a column, say). Columns the output lacks are written as null: an older sink's
    group, lease and epoch columns among them. An older sink holds shard ids and days as text; they
    are written so there (a ``date`` as text is its label).
    """
    sink_fields = {f.name: f.dataType.simpleString() for f in spark.table(table).schema.fields}
    types = dict(df.dtypes)
    if sink_fields.get(COL_SHARD) == "string" and types.get(COL_SHARD) == "bigint":
        df = df.withColumn(COL_SHARD, shard_ids(df))
    if sink_fields.get(COL_WINDOW) == "string" and types.get(COL_WINDOW) == "date":
        df = df.withColumn(COL_WINDOW, F.col(COL_WINDOW).cast("string"))
    if sink_fields.get(COL_WINDOW) == "date" and types.get(COL_WINDOW) == "string":
        raise SinkError(
            f"replay_window: {table} holds day windows ({COL_WINDOW} is a date), so it cannot take hour windows; "
            "restore replay_window: day, or consume into a new sink under a new group name"
        )
    widen: dict[str, str] = {}
    problems: list[str] = []
    for field in df.schema.fields:
        sink_type, out_type = sink_fields.get(field.name), field.dataType.simpleString()
        if sink_type is None or sink_type == out_type:
            continue
        if fits_in(out_type, sink_type):  # a sink wider than the output: written as the sink has it
            df = df.withColumn(field.name, F.col(quoted(field.name)).cast(sink_type))
        elif widens_to(sink_type, out_type):
            widen[field.name] = out_type
        else:
            problems.append(f"{field.name} ({out_type}): sink has {sink_type}")
    if problems:
        raise SinkError(
            f"sink: {table} cannot take the transform's output: {'; '.join(problems)}. "
            "Change the transform, or evolve the sink's column types to match"
        )
    for column, now in widen_columns(spark, table, widen).items():
        if now != widen[column]:  # another Borrower widened it further: written as the sink has it
            df = df.withColumn(column, F.col(quoted(column)).cast(now))
    ordered = [c for c in sink_fields if c in df.columns] + [c for c in df.columns if c not in sink_fields]
    return df.select(*[F.col(quoted(c)) for c in ordered]), any(c not in sink_fields for c in df.columns)


def widen_columns(spark: SparkSession, table: str, types: dict[str, str]) -> dict[str, str]:
    """Promote the sink's columns to ``types``, as the source widened them (``iceberg/protocol/promotion.py``).

    A schema change of its own, before the output is staged, so the staged files have the sink's
    types. Borrowers may do this at once: whoever loses the race finds the column widened as far,
    or further. Returns each column's type on the sink now, for the output to be cast to.
    """
    now: dict[str, str] = {}
    for column, wide in types.items():
        try:
            spark.sql(f"ALTER TABLE {table} ALTER COLUMN {quoted(column)} TYPE {wide}")
        except Exception:
            found = {f.name: f.dataType.simpleString() for f in spark.table(table).schema.fields}.get(column)
            if found != wide and (found is None or not fits_in(wide, found)):
                raise
            now[column] = found
            continue
        now[column] = wide
        log.info("sink %s: column %s is %s now, as its source's is", table, column, wide)
    return now


def shard_ids(df: DataFrame) -> Column:
    """The rows' ``_ig_shard`` as shard ids (text), whether ``df`` holds numbers or (an older sink's) text.

    Spark's ``hex`` of a negative long is unsigned: padded to 16 digits, it is the id.
    """
    shard = F.col(COL_SHARD)
    return shard if dict(df.dtypes)[COL_SHARD] == "string" else F.lpad(F.lower(F.hex(shard)), SHARD_ID_DIGITS, "0")


def window_type(window: Window) -> str:
    """The Spark type of a sink's window column for a group's windows: what ``window_value`` gives."""
    return "date" if window == "day" else "string"
