"""The fenced sink commit: one shard's output and its progress in one Iceberg append.

Everything a Borrower does to the sink goes through this module:

- **claim**: raise the lease's fence (a sink property, ``icegroup.fence.<group>.<lease>``) to this
  attempt, so that every older attempt of the lease can no longer commit;
- **history**: the one read of the sink's history a lease needs, to resume after the shards an
  earlier attempt committed;
- **stage**: Spark writes the shard's output as a staged snapshot (Iceberg's write-audit-publish;
  the sink sets ``write.wap.enabled``), which no reader of main sees;
- **publish**: ``icegroup.commit.FencedCommit`` (``spark_jobs/sink/jvm``) appends the staged files to
  main. Its checks run inside the catalog's compare-and-swap, on exactly the metadata the commit
  is built on: the lease's fence is not above this attempt and the group epoch is the lease's (a
  zombie fails here and adds nothing to main), and no sink snapshot since the grant carries the
  shard id (a shard is committed once).

A conflicting commit makes the swap fail; Iceberg refreshes, backs off and retries, and the checks
run again. The published snapshot is an ``append``, so another group can consume the sink, and it
deletes nothing, so compacting the sink does not get in its way. The Leader's side of the fence,
raising it before a re-grant, is ``iceberg/store/fences.py``.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from typing import Any

from py4j.protocol import Py4JJavaError
from pyiceberg.catalog import Catalog
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from iceberg.errors import AlreadyCommitted, Fenced, SinkError, StaleLease, WindowMoved
from iceberg.protocol.fences import epoch_key, fence_key, replay_fence_key
from iceberg.protocol.group import GroupConfig
from iceberg.protocol.sink_commit import (
    COL_EPOCH,
    COL_GROUP,
    COL_LEASE,
    COL_SHARD,
    COL_WINDOW,
    KEY_STAGE,
    LINEAGE_COLUMNS,
)
from iceberg.protocol.state import Lease, ReplayTicket
from iceberg.store.fences import raise_fences
from iceberg.store.sink_history import SinkHistory, read_sink_history
from iceberg.store.tables import load_optional

log = logging.getLogger(__name__)

FENCED = "icegroup.commit.FencedCommit$Fenced"
WINDOW_MOVED = "icegroup.commit.WindowReplace$WindowMoved"
ALREADY_COMMITTED = "icegroup.commit.FencedCommit$AlreadyCommitted"
# The commit's other refusals: its own checks (staged output or sink history expired, a sink without
# write-audit-publish) and a swap that kept losing. Each says what is wrong; none is the shard's fault.
REFUSED = (
    "org.apache.iceberg.exceptions.ValidationException",
    "org.apache.iceberg.exceptions.CommitFailedException",
    "java.lang.IllegalStateException",
)
# Each task writes its own rows (no shuffle by window: one window would make one writer task), and
# keeps a file open per window it meets, since a batch of shards can span windows.
WRITE_OPTIONS = {"distribution-mode": "none", "fanout-enabled": "true"}
SINK_PROPERTIES = {
    "format-version": "2",
    # Exact bounds on the lineage columns keep lineage queries and replays by shard exact.
    "write.metadata.metrics.column._ig_shard": "full",
    "write.metadata.metrics.column._ig_lease": "full",
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


@dataclass(frozen=True)
class Published:
    """A shard's commit on the sink's main branch."""

    snapshot_id: int
    conflicts: int
    added_records: int


def claim(catalog: Catalog, group: GroupConfig, lease: Lease) -> bool:
    """Raise the lease's fence on the sink to this attempt; ``StaleLease`` if a later attempt holds it.

    Returns False when there is no sink yet to claim it on; the claim is then made once it exists.
    """
    sink = load_optional(catalog, group.sink)
    if sink is None:
        return False
    key = fence_key(group.name, lease.lease_id)
    raise_fences(sink, {key: lease.attempt})
    granted = int(sink.metadata.properties.get(key, "0"))
    if granted > lease.attempt:
        raise StaleLease(f"lease {lease.lease_id} of group {group.name!r} is fenced at attempt {granted}")
    return True


def lease_history(catalog: Catalog, group: GroupConfig, lease: Lease) -> SinkHistory:
    """The group's sink commits since the lease's grant: what an earlier attempt already committed."""
    return read_sink_history(catalog, group.sink, group.name, lease.sink_snapshot_at_grant)


def with_lineage(df: DataFrame, group: str, lease_id: str, shard_id: str, epoch: int, window: str) -> DataFrame:
    """Add the lineage columns and the replay window; a transform must not produce columns with these names."""
    clash = [c for c in df.columns if c in LINEAGE_COLUMNS]
    if clash:
        raise SinkError(f"transform: output has reserved lineage column(s) {clash}; rename them")
    return (
        df.withColumn(COL_GROUP, F.lit(group))
        .withColumn(COL_LEASE, F.lit(lease_id))
        .withColumn(COL_SHARD, F.lit(shard_id))
        .withColumn(COL_EPOCH, F.lit(epoch).cast("int"))
        .withColumn(COL_WINDOW, F.lit(window))
    )


def ensure_sink(spark: SparkSession, catalog: str, sink: str, df: DataFrame) -> None:
    """Create the sink from the first output's schema if it does not exist yet, with staged writes on.

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
        spark.sql(
            f"CREATE TABLE IF NOT EXISTS {catalog}.{sink} ({columns}) USING iceberg "
            f"PARTITIONED BY ({COL_WINDOW}) TBLPROPERTIES ({properties})"
        )
    except Exception:
        if not spark.catalog.tableExists(f"{catalog}.{sink}"):
            raise
    ensure_staged_writes(spark, f"{catalog}.{sink}")
    ensure_window_partition(spark, f"{catalog}.{sink}")


def ensure_staged_writes(spark: SparkSession, table: str) -> None:
    """The session stages writes to the sink, and the sink takes them staged (and any output schema)."""
    if spark.conf.get("spark.wap.id", None) != "icegroup":
        raise SinkError("spark.wap.id: must be 'icegroup' so that shard output is staged; use spark_jobs.session")
    needed = ("write.wap.enabled", "write.spark.accept-any-schema")
    have = {row["key"]: row["value"] for row in spark.sql(f"SHOW TBLPROPERTIES {table}").collect()}
    missing = ", ".join(f"'{key}'='true'" for key in needed if have.get(key) != "true")
    if missing:
        spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ({missing})")


def window_partitioned(spark: SparkSession, table: str) -> bool:
    """Whether the sink's current partition spec has the replay window as a field."""
    jvm: Any = spark._jvm
    spec = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, table).spec()
    return any(str(field.name()) == COL_WINDOW for field in spec.fields())


def ensure_window_partition(spark: SparkSession, table: str) -> None:
    """Partition the sink by the replay window, in addition to any partitioning it already has.

    A sink created before the window column (or by the user, with partitioning of its own) gains
    the column and the partition field by schema and partition-spec evolution; its existing files
    keep their spec, and new output is written per window. Borrowers may do this at once: whoever
    loses the race finds the field there.
    """
    if window_partitioned(spark, table):
        return
    columns = {f.name for f in spark.table(table).schema.fields}
    try:
        if COL_WINDOW not in columns:
            spark.sql(f"ALTER TABLE {table} ADD COLUMN {COL_WINDOW} string")
        spark.sql(f"ALTER TABLE {table} ADD PARTITION FIELD {COL_WINDOW}")
    except Exception:
        if not window_partitioned(spark, table):
            raise
    log.info("sink %s: now partitioned by %s as well", table, COL_WINDOW)


def align_to_sink(spark: SparkSession, table: str, df: DataFrame) -> tuple[DataFrame, bool]:
    """Order the output's columns as the sink has them; fail if a column has another type than the sink's.

    Returns the aligned output and whether it has columns the sink lacks: the write then adds them
    (the source gained a column, say). Columns the output lacks are written as null.
    """
    sink_fields = {f.name: f.dataType.simpleString() for f in spark.table(table).schema.fields}
    problems = [
        f"{f.name} ({f.dataType.simpleString()}): sink has {sink_fields[f.name]}"
        for f in df.schema.fields
        if f.name in sink_fields and sink_fields[f.name] != f.dataType.simpleString()
    ]
    if problems:
        raise SinkError(
            f"sink: {table} cannot take the transform's output: {'; '.join(problems)}. "
            "Change the transform, or evolve the sink's column types to match"
        )
    ordered = [c for c in sink_fields if c in df.columns] + [c for c in df.columns if c not in sink_fields]
    return df.select(*[F.col(f"`{c}`") for c in ordered]), any(c not in sink_fields for c in df.columns)


def stage_shard(df: DataFrame, table: str, evolve: bool = False) -> str:
    """Write the shard's output as a staged snapshot of the sink; returns the token that finds it.

    With ``evolve``, columns the sink lacks are added to it first (only then: a schema merge is a
    commit of its own, and Borrowers writing at once would contend for it).
    """
    token = uuid.uuid4().hex
    writer = df.writeTo(table).option(f"snapshot-property.{KEY_STAGE}", token).options(**WRITE_OPTIONS)
    if evolve:
        writer = writer.option("mergeSchema", "true")
    writer.append()
    return token


def publish_shard(
    spark: SparkSession,
    table: str,
    token: str,
    group: str,
    lease: Lease,
    shard_ids: list[str],
    properties: dict[str, str],
) -> Published:
    """Append the staged files of ``shard_ids`` to main in one fenced commit.

    Raises ``Fenced`` or ``AlreadyCommitted`` (if any of the shards is in the sink already) when not allowed.

    A refused publish expires its staged snapshot and files. A Borrower killed between stage and
    publish leaves its staged snapshot behind, invisible on main, until the sink's snapshots expire.
    """
    jvm: Any = spark._jvm
    iceberg_table = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, table)
    props = jvm.java.util.HashMap()
    for key, value in properties.items():
        props.put(key, value)
    validate_from = lease.sink_snapshot_at_grant
    base = None if validate_from is None else jvm.java.lang.Long(validate_from)
    shards = ", ".join(shard_ids)
    try:
        snapshot_id, conflicts, added = jvm.icegroup.commit.FencedCommit.commit(
            iceberg_table,
            token,
            group,
            fence_key(group, lease.lease_id),
            lease.attempt,
            epoch_key(group),
            lease.epoch,
            ",".join(shard_ids),
            base,
            props,
        )
    except Py4JJavaError as exc:
        name = str(exc.java_exception.getClass().getName())
        message = str(exc.java_exception.getMessage())
        if name in REFUSED:
            raise SinkError(f"sink: commit of shards {shards} to {table} failed: {message}") from None
        if name not in (FENCED, ALREADY_COMMITTED):
            raise
        jvm.icegroup.commit.FencedCommit.discardStaged(iceberg_table, token)
        if name == FENCED:
            raise Fenced(f"sink: commit of shards {shards} to {table} refused: {message}") from None
        raise AlreadyCommitted(f"sink: commit of shards {shards} to {table} refused: {message}") from None
    if conflicts:
        log.warning(
            "group %s lease %s#%d shards %s: sink commit retried after %d conflicting commits",
            group, lease.lease_id, lease.attempt, shards, conflicts,
        )  # fmt: skip
    return Published(snapshot_id=int(snapshot_id), conflicts=int(conflicts), added_records=int(added))


@dataclass(frozen=True)
class Replaced:
    """A replay's commit: the window's old rows out, the new rows in, in one snapshot."""

    snapshot_id: int
    conflicts: int
    added_records: int
    deleted_records: int


def publish_replay(
    spark: SparkSession, table: str, token: str, group: str, ticket: ReplayTicket, validate_from: int | None,
    properties: dict[str, str],
) -> Replaced:  # fmt: skip
    """Replace the window's rows with the staged output in one fenced overwrite (``WindowReplace.java``).

    ``Fenced`` if a later replay of the window, or a new epoch, began; ``WindowMoved`` if output of the
    window was committed after ``validate_from`` (the sink head the replay planned at). Either way
    the staged output is dropped and the window keeps its old rows.
    """
    jvm: Any = spark._jvm
    iceberg_table = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, table)
    props = jvm.java.util.HashMap()
    for key, value in properties.items():
        props.put(key, value)
    base = None if validate_from is None else jvm.java.lang.Long(validate_from)
    try:
        snapshot_id, conflicts, added, deleted = jvm.icegroup.commit.WindowReplace.replace(
            iceberg_table, token, group, epoch_key(group), ticket.epoch, replay_fence_key(group, ticket.window),
            ticket.generation, COL_WINDOW, ticket.window, ticket.window_start_ms, base, props,
        )  # fmt: skip
    except Py4JJavaError as exc:
        name = str(exc.java_exception.getClass().getName())
        message = str(exc.java_exception.getMessage())
        if name not in (FENCED, WINDOW_MOVED, *REFUSED):
            raise
        jvm.icegroup.commit.FencedCommit.discardStaged(iceberg_table, token)
        if name == FENCED:
            raise Fenced(f"sink: the replay of window {ticket.window} in {table} was refused: {message}") from None
        if name == WINDOW_MOVED:
            raise WindowMoved(f"sink: window {ticket.window} of {table} moved: {message}") from None
        raise SinkError(f"sink: the replay of window {ticket.window} in {table} failed: {message}") from None
    return Replaced(int(snapshot_id), int(conflicts), int(added), int(deleted))
