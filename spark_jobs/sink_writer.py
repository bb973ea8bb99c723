"""The fenced sink commit: one shard's output and its progress in one Iceberg commit.

The write is ``overwrite(_ig_shard = <shard>)`` with serializable isolation, validated from the sink
snapshot seen when the lease was granted. A second commit of the same shard (a retry, a zombie, a
duplicate run) therefore finds the first commit's files and fails with a ``ValidationException``;
the caller checks the sink history and treats that as "already done". Different shards do not
conflict, as long as every sink file holds rows of one shard: a compaction that merges shards into
one file makes the whole-file delete of the overwrite impossible (see ``MixedShardFiles``).
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from iceberg.errors import SinkError
from iceberg.lineage import COL_EPOCH, COL_GROUP, COL_LEASE, COL_SHARD, LINEAGE_COLUMNS

VALIDATION = "org.apache.iceberg.exceptions.ValidationException"
SINK_PROPERTIES = {
    "format-version": "2",
    # Exact bounds on the lineage columns keep the fencing check exact: with truncated or missing
    # bounds, files of other shards would look like this shard's and fail its commit.
    "write.metadata.metrics.column._ig_shard": "full",
    "write.metadata.metrics.column._ig_lease": "full",
    "commit.retry.num-retries": "10",
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": "100",
}


class AlreadyCommitted(Exception):
    """Validation found files of this shard added since the base: another attempt committed it."""


class MixedShardFiles(SinkError):
    """A sink file holds rows of several shards (the sink was compacted), so a shard cannot be replaced."""


def with_lineage(df: DataFrame, group: str, lease_id: str, shard_id: str, epoch: int) -> DataFrame:
    """Add the lineage columns; a transform must not produce columns with these names."""
    clash = [c for c in df.columns if c in LINEAGE_COLUMNS]
    if clash:
        raise SinkError(f"transform: output has reserved lineage column(s) {clash}; rename them")
    return (
        df.withColumn(COL_GROUP, F.lit(group))
        .withColumn(COL_LEASE, F.lit(lease_id))
        .withColumn(COL_SHARD, F.lit(shard_id))
        .withColumn(COL_EPOCH, F.lit(epoch).cast("int"))
    )


def ensure_sink(spark: SparkSession, catalog: str, sink: str, df: DataFrame) -> None:
    """Create the sink from the first output's schema if it does not exist yet.

    The first Borrowers of a group race to create it. ``IF NOT EXISTS`` does not settle that race:
    both see no table (or namespace), and the loser's catalog insert fails (on PostgreSQL as an
    "Unknown failure" from a duplicate key). Whoever created it, existing afterwards is success.
    """
    namespace = sink.rsplit(".", 1)[0]
    columns = ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in df.schema.fields)
    properties = ", ".join(f"'{k}'='{v}'" for k, v in SINK_PROPERTIES.items())
    try:
        spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {catalog}.{namespace}")
    except Exception:
        if not spark.catalog.databaseExists(f"{catalog}.{namespace}"):
            raise
    try:
        spark.sql(f"CREATE TABLE IF NOT EXISTS {catalog}.{sink} ({columns}) USING iceberg TBLPROPERTIES ({properties})")
    except Exception:
        if not spark.catalog.tableExists(f"{catalog}.{sink}"):
            raise


def check_sink_schema(spark: SparkSession, table: str, df: DataFrame) -> None:
    """Fail before writing if the output has columns the sink lacks or types it cannot take."""
    sink_fields = {f.name: f.dataType.simpleString() for f in spark.table(table).schema.fields}
    problems = [
        f"{f.name} ({f.dataType.simpleString()}): "
        + ("not in the sink" if f.name not in sink_fields else f"sink has {sink_fields[f.name]}")
        for f in df.schema.fields
        if sink_fields.get(f.name) != f.dataType.simpleString()
    ]
    if problems:
        raise SinkError(
            f"sink: {table} cannot take the transform's output: {'; '.join(problems)}. "
            "Change the transform, or evolve the sink's schema to match"
        )


def commit_shard(
    df: DataFrame,
    table: str,
    shard_id: str,
    validate_from: int | None,
    properties: dict[str, str],
) -> None:
    """Replace the shard's rows in the sink in one fenced commit, or raise ``AlreadyCommitted``."""
    writer = df.writeTo(table).option("isolation-level", "serializable")
    if validate_from is not None:
        writer = writer.option("validate-from-snapshot-id", str(validate_from))
    for key, value in properties.items():
        writer = writer.option(f"snapshot-property.{key}", value)
    try:
        writer.overwrite(F.col(COL_SHARD) == F.lit(shard_id))
    except Exception as exc:
        java = getattr(exc, "java_exception", None)
        text = str(java.getMessage()) if java is not None else str(exc)
        if VALIDATION not in str(exc) and (java is None or java.getClass().getName() != VALIDATION):
            raise
        if "Found conflicting files" in text:
            raise AlreadyCommitted(shard_id) from exc
        if "some, but not all, rows match" in text:
            raise MixedShardFiles(
                f"sink: {table} has files mixing rows of several shards (was it compacted?), so shard "
                f"{shard_id} cannot be committed by a whole-file overwrite. Compacting a group's sink is "
                "not supported yet; restore the sink to a snapshot before the compaction"
            ) from exc
        raise
