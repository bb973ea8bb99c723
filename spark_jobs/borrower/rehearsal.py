"""A warm Borrower's rehearsal: its lease path run once on synthetic rows, so the JVM compiles it before a backlog.

A warm Borrower keeps its SparkSession up so a new lease does not pay a JVM start. A new JVM still
runs the lease's code interpreted until its JIT compiler has seen it often enough: measured on W1 in
one session warmed only by a 300-row lease, the first 5 M-row lease took 7.5 s (median of three
new JVMs) and spent twice the plain job's CPU time compiling; after a 1 M-row lease first, 6.0 s
(``docs/concepts/performance.md``). A Borrower that has only run small leases is in that state
until its first large one, which is when a backlog arrives.

So once a warm Borrower is idle, before any lease of it has read ``borrower_rehearsal_rows`` source
rows, it rehearses: in a scratch Iceberg catalog on a temporary local folder it makes a table with
the source's schema and partition spec, appends that many synthetic rows, and runs the lease path on
it, through the functions a lease runs: shards cut by the Leader's planning, read as a lease reads
them, the group's transform, the lineage columns, a sink of the same shape (a new one, in the
scratch catalog) and its staged write. A format-v3 source's ``_row_id`` path is not rehearsed.
Nothing of the lake is written; the folder is deleted after, and folders a killed Borrower left
are swept by a later rehearsal. A lease taken meanwhile cuts it short (``Rehearsal.cancel`` cancels
its Spark jobs until it ends). The rehearsal is an optimization only: one that fails (a transform
that rejects synthetic values, say) says why and changes nothing else.

It runs only on a ``local`` master, where every task runs in the driver's JVM and the folder is on
its disk; a cluster's executors would write to their own hosts' folders, which nothing cleans.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pyiceberg.table import StaticTable
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from icegroup.iceberg.errors import RehearsalCut
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.shards import commit_batches, cut_shards, one_window
from icegroup.iceberg.protocol.state import Lease
from icegroup.iceberg.shards import plan_increment
from icegroup.iceberg.store.tables import oldest_snapshot_id
from icegroup.spark_jobs.borrower.output import shard_output
from icegroup.spark_jobs.borrower.user_errors import describe_error
from icegroup.spark_jobs.code_shipping import ship_transform
from icegroup.spark_jobs.row_files import RowFiles
from icegroup.spark_jobs.session import activate, use_pool
from icegroup.spark_jobs.sink.fenced_commit import WRITE_OPTIONS, stage_aligned
from icegroup.spark_jobs.sink.shape import ensure_sink, iceberg_table
from icegroup.spark_jobs.transforms import load_transform

JOB_GROUP = "icegroup-rehearsal"
NAMESPACE = "rehearsal"
# Distinct values of a column the source is partitioned by (identity): as many streams as W1's regions, about.
IDENTITY_VALUES = 4
# Distinct values of any other column: enough that strings are dictionary-encoded as real columns are.
VALUES = 100_003
# Seconds a Borrower that ends waits for its rehearsal's thread to end (and delete its folder).
JOIN_S = 30.0
# Seconds between cancellations of the rehearsal's Spark jobs once a lease was taken, until it ends.
CANCEL_EVERY_S = 0.2
# A rehearsal's folder older than this was left by a Borrower that was killed: a later rehearsal deletes it.
SWEEP_AFTER_S = 3600.0
FOLDER_PREFIX = "icegroup-rehearsal-"
# Seconds a rehearsal waits, before it deletes its folder, for the tasks of a job that failed or was cancelled.
SETTLE_S = 30.0


@dataclass(frozen=True)
class Rehearsed:
    """What a rehearsal ran: its synthetic rows, the shards planning cut of them, the rows it staged, its seconds."""

    rows: int
    shards: int
    staged_rows: int
    seconds: float


def synthetic_column(name: str, data_type: T.DataType, identity: bool) -> Column:
    """Column ``name`` of ``data_type`` for the row numbered ``id``: few values if the source is partitioned by it.

    Types without a value here (structs, arrays, maps) are null, which a required column refuses:
    the rehearsal then says so and the Borrower goes on without it.
    """
    n = F.col("id") % (IDENTITY_VALUES if identity else VALUES)
    base = int(datetime.now(UTC).timestamp())
    value: Column
    if isinstance(data_type, T.StringType):
        value = F.concat(F.lit("r"), n.cast("string"))
    elif isinstance(data_type, T.BooleanType):
        value = n % 2 == 0
    elif isinstance(data_type, T.ByteType | T.ShortType):
        value = (n % (100 if isinstance(data_type, T.ByteType) else 30_000)).cast(data_type)
    elif isinstance(data_type, T.IntegerType | T.LongType):
        value = n.cast(data_type)
    elif isinstance(data_type, T.DecimalType):  # within its precision: ANSI mode (Spark 4's default) refuses overflow
        value = ((n % 10 ** min(data_type.precision - data_type.scale + 2, 6)) / 100).cast(data_type)
    elif isinstance(data_type, T.FloatType | T.DoubleType):
        value = (n / 100).cast(data_type)
    elif isinstance(data_type, T.DateType):
        value = F.date_sub(F.current_date(), n.cast("int") % 365)
    elif isinstance(data_type, T.TimestampType | T.TimestampNTZType):
        value = F.timestamp_seconds(F.lit(base) - n).cast(data_type)
    elif isinstance(data_type, T.BinaryType):
        value = F.concat(F.lit("r"), n.cast("string")).cast("binary")
    else:
        value = F.lit(None).cast(data_type)
    return value.alias(name)


def synthetic_rows(spark: SparkSession, schema: T.StructType, rows: int, identity: frozenset[str]) -> DataFrame:
    """``rows`` rows of ``schema``; the columns in ``identity`` (the source's identity partitions) take few values."""
    return spark.range(rows).select(*[synthetic_column(f.name, f.dataType, f.name in identity) for f in schema])


def rehearse(spark: SparkSession, group: GroupConfig, source_table: str, rows: int, cut: threading.Event) -> Rehearsed:
    """Run ``group``'s lease path once on ``rows`` synthetic rows shaped like ``source_table``; commits nothing.

    Raises ``RehearsalCut`` when ``cut`` is set (a lease was taken) between its steps; its Spark jobs
    are cancelled by the caller (job group ``JOB_GROUP``).
    """
    started = time.perf_counter()
    catalog = f"icegroup_rehearsal_{uuid.uuid4().hex[:12]}"

    def step() -> None:
        if cut.is_set():
            raise RehearsalCut("a lease was taken")

    activate(spark)
    ship_transform(spark, group.transform)
    transform = load_transform(group.transform)
    sweep(Path(tempfile.gettempdir()), time.time() - SWEEP_AFTER_S)
    folder = Path(tempfile.mkdtemp(prefix=FOLDER_PREFIX))
    keys = {"": "org.apache.iceberg.spark.SparkCatalog", ".type": "hadoop", ".warehouse": folder.as_uri()}
    use_pool(spark, JOB_GROUP, JOB_GROUP)
    try:
        for key, value in keys.items():
            spark.conf.set(f"spark.sql.catalog.{catalog}{key}", value)
        source, sink = f"{catalog}.{NAMESPACE}.source", f"{catalog}.{NAMESPACE}.sink"
        identity = scratch_source(spark, source_table, catalog)
        step()
        synthetic_rows(spark, spark.table(source).schema, rows, identity).writeTo(source).options(
            **WRITE_OPTIONS
        ).append()
        step()
        table = StaticTable.from_metadata(metadata_location(spark, source))
        plan = plan_increment(table, None, group)
        shards = cut_shards(
            group=group.name, epoch=0, snapshots=plan.appends, files=plan.files, stream_cursors={},
            plan_from=None, caps=group.shard_caps, window=group.replay_window,
        )  # fmt: skip
        for batch in commit_batches(shards, group.commit_batch_rows):
            step()
            lease = Lease(
                lease_id="rehearsal", epoch=0, window_start_ms=batch[0].window_start_ms,
                shard_ids=[s.shard_id for s in batch], streams=sorted({s.stream for s in batch}),
                granted_at_ms=0, deadline_ms=0, sink_snapshot_at_grant=None,
            )  # fmt: skip
            build = shard_output(
                spark, source, group, lease, transform, batch, oldest_snapshot_id(table), table, RowFiles(source)
            )
            out = build()
            ensure_sink(spark, catalog, f"{NAMESPACE}.sink", out)
            stage_aligned(spark, sink, out, one_window(batch, group.replay_window))
        step()
        staged = staged_rows(spark, sink) if shards else 0
    finally:
        for key in keys:
            spark.conf.unset(f"spark.sql.catalog.{catalog}{key}")
        for key in ("spark.scheduler.pool", "spark.jobGroup.id", "spark.job.description"):
            spark.sparkContext.setLocalProperty(key, None)  # type: ignore[arg-type]
        settle(spark, SETTLE_S)
        shutil.rmtree(folder, ignore_errors=True)
    return Rehearsed(rows, len(shards), staged, time.perf_counter() - started)


def settle(spark: SparkSession, timeout_s: float) -> None:
    """Wait up to ``timeout_s`` until no task of a rehearsal's job runs.

    A job that failed (a transform that rejects a row) or was cancelled ends before its other tasks
    do: one still writing would make the folder again after it was deleted.
    """
    tracker = spark.sparkContext.statusTracker()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        jobs = [tracker.getJobInfo(job) for job in tracker.getJobIdsForGroup(JOB_GROUP)]
        stages = [tracker.getStageInfo(stage) for job in jobs if job is not None for stage in job.stageIds]
        if not any(stage is not None and stage.numActiveTasks for stage in stages):
            return
        time.sleep(0.1)


def sweep(folder: Path, before: float) -> None:
    """Delete the rehearsal folders in ``folder`` last changed before ``before``: a killed Borrower's, long unused."""
    for path in folder.glob(f"{FOLDER_PREFIX}*"):
        try:
            stale = path.stat().st_mtime < before
        except FileNotFoundError:
            continue
        if stale:
            shutil.rmtree(path, ignore_errors=True)


def scratch_source(spark: SparkSession, source_table: str, catalog: str) -> frozenset[str]:
    """Create ``catalog``'s source table with the source's schema and partition spec; its identity-partition columns."""
    jvm: Any = spark._jvm
    real = iceberg_table(spark, source_table)
    scratch = spark._jsparkSession.sessionState().catalogManager().catalog(catalog).icebergCatalog()
    identifier = jvm.org.apache.iceberg.catalog.TableIdentifier.parse(f"{NAMESPACE}.source")
    scratch.createTable(identifier, real.schema(), real.spec())
    schema = real.schema()
    return frozenset(
        str(schema.findColumnName(f.sourceId())) for f in real.spec().fields() if f.transform().isIdentity()
    )


def staged_rows(spark: SparkSession, table: str) -> int:
    """Rows the snapshots of ``table`` added: what the rehearsal staged, none of it published."""
    return sum(int(s.summary().get("added-records") or 0) for s in iceberg_table(spark, table).snapshots())


def metadata_location(spark: SparkSession, table: str) -> str:
    """The current metadata file of a table of a Spark catalog, which pyiceberg reads without that catalog."""
    return str(iceberg_table(spark, table).operations().current().metadataFileLocation())


class Rehearsal:
    """A warm Borrower's rehearsal on a thread of its own: a lease cuts it short, and so does the Borrower's end."""

    def __init__(
        self,
        spark: Callable[[], SparkSession],
        group: GroupConfig,
        source_table: str,
        progress: Callable[[str], None],
    ) -> None:
        """A rehearsal of ``group``'s lease path on ``group.borrower_rehearsal_rows`` rows; nothing runs yet."""
        self.spark = spark
        self.group = group
        self.source_table = source_table
        self.progress = progress
        self.cut = threading.Event()
        self.thread: threading.Thread | None = None
        self.session: SparkSession | None = None

    @property
    def started(self) -> bool:
        """Whether it was started (it runs once)."""
        return self.thread is not None

    def start(self) -> None:
        """Rehearse on a daemon thread."""
        self.thread = threading.Thread(target=self.run, name="icegroup-rehearsal", daemon=True)
        self.thread.start()

    def run(self) -> None:
        """Rehearse and say how it went; never raises: a Borrower without a rehearsal runs its leases as before."""
        name = self.group.name
        try:
            self.session = self.spark()
            if not (self.session.sparkContext.master or "").startswith("local"):
                self.progress(f"{name}: no rehearsal: the Spark master is not local (executors' disks are not ours)")
                return
            done = rehearse(self.session, self.group, self.source_table, self.group.borrower_rehearsal_rows, self.cut)
        except Exception as exc:
            if self.cut.is_set():
                self.progress(f"{name}: rehearsal cut short: a lease was taken")
            else:
                self.progress(f"{name}: rehearsal skipped ({describe_error(exc)}); leases run as before")
            return
        if not done.shards:
            self.progress(
                f"{name}: rehearsal ran no lease: the group's filter matches none of its {done.rows:,} synthetic rows' "
                "partitions; leases run as before"
            )
            return
        self.progress(
            f"{name}: rehearsed the lease path on {done.rows:,} synthetic rows ({done.shards} shards, "
            f"{done.staged_rows:,} rows staged) in {done.seconds:.1f}s, nothing of the lake written: the JVM has "
            "compiled it before a backlog comes"
        )

    def cancel(self) -> None:
        """Cut the rehearsal short, if it runs: it stops before its next step, and its Spark jobs are cancelled.

        Spark cancels only the jobs of a group that run at that moment; one the rehearsal started just
        after would run whole, beside the lease. So a thread cancels them again until the rehearsal ends.
        """
        if self.thread is None or not self.thread.is_alive() or self.cut.is_set():
            return
        self.cut.set()
        threading.Thread(target=self.keep_cancelling, name="icegroup-rehearsal-cancel", daemon=True).start()

    def keep_cancelling(self) -> None:
        """Cancel the rehearsal's Spark jobs every ``CANCEL_EVERY_S`` until its thread ends."""
        thread = self.thread
        while thread is not None and thread.is_alive():
            if self.session is not None:
                self.session.sparkContext.cancelJobGroup(JOB_GROUP)
            thread.join(CANCEL_EVERY_S)

    def __enter__(self) -> Rehearsal:
        """The rehearsal itself; leaving the block cuts it short and waits for its thread."""
        return self

    def __exit__(self, *_: object) -> None:
        """Cut it short and wait for its thread, which deletes its folder as it ends."""
        self.cancel()
        if self.thread is not None:
            self.thread.join(JOIN_S)
