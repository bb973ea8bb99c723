"""Replaying a window: its committed source data, through today's transform, replacing its output at once.

A replay holds the window's ticket (``iceberg/replay.py``) and beats for it like a Borrower for its
lease. It plans from the sink's history, reads each covered shard's files, stages the new output,
and publishes it with ``WindowReplace``: the window's old files out and the new ones in, in one
``overwrite`` snapshot. If output of the window was committed meanwhile (a lease granted before the
ticket finished), the publish fails, and the replay plans again and includes it.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date
from functools import reduce

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from icegroup.iceberg.config.lakehouse import LakehouseConfig
from icegroup.iceberg.errors import LostRace, WindowMoved
from icegroup.iceberg.openlineage import output_dataset, run_events
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.shards import window_value
from icegroup.iceberg.protocol.sink_commit import replay_properties, shard_number
from icegroup.iceberg.protocol.state import ReplayTicket
from icegroup.iceberg.replay import ReplayPlan, ReplayShard, plan_replay
from icegroup.iceberg.replay_ticket import replay_ticket
from icegroup.iceberg.retry import again_while_losing
from icegroup.iceberg.store.heartbeats import heartbeat
from icegroup.spark_jobs.code_shipping import ship_transform
from icegroup.spark_jobs.column_lineage import sink_columns
from icegroup.spark_jobs.row_files import (
    FILE_COLUMN,
    FILE_REF_SQL,
    ROW_ID_COLUMN,
    ROW_REF_SQL,
    by_file_number,
    mark_rows,
    streams_rows,
)
from icegroup.spark_jobs.session import activate, reads_row_ids
from icegroup.spark_jobs.shards import UPSTREAM_SHARD_COLUMN, read_files
from icegroup.spark_jobs.sink.fenced_commit import publish_replay, stage_aligned
from icegroup.spark_jobs.sink.shape import (
    ensure_staged_writes,
    ensure_window_partition,
    window_type,
    with_lineage,
)
from icegroup.spark_jobs.transforms import Transform, load_transform

log = logging.getLogger(__name__)

# A replay plans again when a lease granted before its ticket commits output of the window; the
# Leader grants no new shards of the window meanwhile, so this settles within a few leases.
MAX_PLANS = 10


@dataclass
class ReplayReport:
    """What one replay of a window did, for run metadata and the CLI."""

    window: str
    generation: int
    shards: int = 0
    rows_in: int = 0
    rows_out: int = 0
    rows_replaced: int = 0
    sink_snapshot: int | None = None
    plans: int = 0
    elapsed_s: float = 0.0

    def line(self) -> str:
        """One line for a person."""
        if self.sink_snapshot is None:
            return f"window {self.window}: nothing committed in it yet; nothing replaced"
        return (
            f"window {self.window}: generation {self.generation}, {self.shards} shards, {self.rows_in} source rows "
            f"-> {self.rows_out} rows out, {self.rows_replaced} replaced, in sink snapshot {self.sink_snapshot} "
            f"({self.elapsed_s:.1f}s)"
        )


def replay_window(
    spark: SparkSession,
    lakehouse: LakehouseConfig,
    group: GroupConfig,
    window: str,
    run_id: str | None = None,
    progress: Callable[[str], None] = log.info,
) -> ReplayReport:
    """Replay ``window`` of ``group``: its committed source data, through today's transform, replacing its output.

    Each generation is an OpenLineage run when the lakehouse config turns that on.
    """
    started = time.perf_counter()
    activate(spark)
    catalog = lakehouse.catalog()
    holder = f"replay-{run_id or uuid.uuid4().hex}"
    transform = load_transform(group.transform)
    ship_transform(spark, group.transform)
    with (
        replay_ticket(catalog, group, window, holder) as ticket,
        heartbeat(catalog, group.name, holder, interval_s=group.session_timeout_s / 3),
    ):
        key = f"replay/{window}/{ticket.generation}"
        head = catalog.load_table(group.source).current_snapshot()
        read_at = head.snapshot_id if head else None
        events = run_events(lakehouse, catalog, group.name, f"{group.name}.replay", key, group.source, read_at)
        with events.observe():
            report = replay_generation(spark, lakehouse, group, ticket, transform, run_id, progress)
            outputs = output_dataset(lakehouse, catalog, group.sink, report.sink_snapshot, report.rows_out)
            events.complete(outputs, sink_columns(spark, lakehouse, group))
    report.elapsed_s = time.perf_counter() - started
    progress(report.line())
    return report


def replay_generation(
    spark: SparkSession,
    lakehouse: LakehouseConfig,
    group: GroupConfig,
    ticket: ReplayTicket,
    transform: Transform,
    run_id: str | None,
    progress: Callable[[str], None],
) -> ReplayReport:
    """Plan the window and publish its new output, planning again while other commits move it."""
    catalog = lakehouse.catalog()
    window = ticket.window
    report = ReplayReport(window=window, generation=ticket.generation)
    progress(f"window {window}: replay generation {ticket.generation} began")

    def attempt() -> None:
        plan = plan_replay(catalog, group, window)
        plan.check_complete()
        report.plans += 1
        if not plan.shards:
            return
        progress(f"window {window}: {len(plan.shards)} shards, {plan.rows} source rows to replay")
        try:
            publish(spark, lakehouse, group, ticket, plan, transform, report, run_id)
        except WindowMoved as exc:
            progress(f"window {window}: {exc}; planning again ({report.plans}/{MAX_PLANS})")
            raise LostRace(str(exc)) from exc

    def gave_up() -> WindowMoved:
        return WindowMoved(f"window {window} kept moving under {MAX_PLANS} plans; replay it again")

    again_while_losing(f"window {window}: replay", attempt, MAX_PLANS, gave_up=gave_up)
    return report


def publish(
    spark: SparkSession,
    lakehouse: LakehouseConfig,
    group: GroupConfig,
    ticket: ReplayTicket,
    plan: ReplayPlan,
    transform: Transform,
    report: ReplayReport,
    run_id: str | None,
) -> None:
    """Stage the window's new output and replace the old in one fenced commit."""
    token = stage_window(spark, lakehouse, group, plan, transform)
    publish_staged(spark, lakehouse, group, ticket, plan, token, report, run_id)


def publish_staged(
    spark: SparkSession,
    lakehouse: LakehouseConfig,
    group: GroupConfig,
    ticket: ReplayTicket,
    plan: ReplayPlan,
    token: str,
    report: ReplayReport,
    run_id: str | None,
) -> None:
    """Replace the window's output with the staged output ``token`` names, in one fenced commit.

    The commit is refused (``WindowMoved``) if output of the window was committed after the plan's
    sink head: a canary promoted later (``spark_jobs/canary.py``) is published only if nothing moved.
    """
    sink = f"{lakehouse.catalog_name}.{group.sink}"
    covers = [item.shard for item in plan.shards]
    props = replay_properties(group.name, group.source, ticket.window, ticket.generation, ticket.epoch, covers, run_id)
    replaced = publish_replay(spark, sink, token, group.name, ticket, plan.sink_head, props)
    report.shards = len(plan.shards)
    report.rows_in = plan.rows
    report.rows_out = replaced.added_records
    report.rows_replaced = replaced.deleted_records
    report.sink_snapshot = replaced.snapshot_id


def stage_window(
    spark: SparkSession, lakehouse: LakehouseConfig, group: GroupConfig, plan: ReplayPlan, transform: Transform
) -> str:
    """Stage the window's output through ``transform`` on the sink, invisible on main; returns the stage token."""
    sink = f"{lakehouse.catalog_name}.{group.sink}"
    source = f"{lakehouse.catalog_name}.{group.source}"
    window = window_value(plan.window, group.replay_window)
    row_ids = group.source_row_ids and reads_row_ids(
        spark, lakehouse.catalog().load_table(group.source).metadata.format_version
    )
    output = streamed(spark, source, group, plan, transform, window, row_ids)
    cached: list[DataFrame] = []
    try:
        if output is None:
            output, cached = by_shard(spark, source, group, plan, transform, window)
        ensure_staged_writes(spark, sink)
        ensure_window_partition(spark, sink, window_type(group.replay_window))
        return stage_aligned(spark, sink, output, one_window=False)
    finally:
        for base in cached:
            base.unpersist()


def streamed(
    spark: SparkSession,
    source: str,
    group: GroupConfig,
    plan: ReplayPlan,
    transform: Transform,
    window: date | str,
    row_ids: bool = False,
) -> DataFrame | None:
    """The window's output from one scan per source snapshot, each row naming its shard and its source file.

    As a consume's batch does (``borrower/output.py``): where the transform hands rows on one by one,
    each row's file tells its shard, so the replayed rows keep the file reference that forward and
    backward lineage name rows by. None where that cannot hold: a transform that aggregates, sorts or
    joins, a file of two shards, or a shard whose rows an upstream replay rewrote (its files hold rows
    of other shards too); the whole window is then read shard by shard (``by_shard``), and none of its
    rows carry a file reference. A shard that found no files has no rows to read. ``row_ids``: the
    source gives its rows' ``_row_id`` (format v3), and each streamed row keeps its source row's.
    """
    paths = [path for item in plan.shards for path in item.files]
    if not paths or any(item.replaced_files for item in plan.shards) or len(set(paths)) != len(paths):
        return None

    def output(at: int, files: set[str]) -> DataFrame:
        rows = read_files(spark, source, at, files, row_ids).drop(FILE_COLUMN, UPSTREAM_SHARD_COLUMN)
        rows = rows.where(group.filter) if group.filter else rows
        return transform(mark_rows(rows).drop(ROW_ID_COLUMN) if row_ids else rows)

    # The verdict from one file's output: the window's read holds a literal per file.
    first = next(item for item in plan.shards if item.files)
    if not streams_rows(output(first.read_snapshot, {first.files[0]}), source):
        return None
    frames: list[DataFrame] = []
    for at in sorted({item.read_snapshot for item in plan.shards if item.files}):
        items = [item for item in plan.shards if item.read_snapshot == at and item.files]
        shards = by_file_number(spark, {p: shard_number(item.shard.shard_id) for item in items for p in item.files})
        out = output(at, {path for item in items for path in item.files})
        frames.append(with_lineage(out, shards, window, F.expr(FILE_REF_SQL), F.expr(ROW_REF_SQL) if row_ids else None))
    return reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), frames)


def by_shard(
    spark: SparkSession, source: str, group: GroupConfig, plan: ReplayPlan, transform: Transform, window: date | str
) -> tuple[DataFrame, list[DataFrame]]:
    """The window's output shard by shard, without file references, and the cached rows to release once it is staged.

    Every shard's branch scans its base, so the base is cached in as many partitions as there are
    cores, not one per small file: a window of many shards over many files stays a few tasks a
    shard. Cached rows name no file, so these rows name their shard only.
    """
    parallelism = spark.sparkContext.defaultParallelism
    cached = {
        at: read_files(
            spark, source, at, {f for i in plan.shards if i.read_snapshot == at for f in (*i.files, *i.replaced_files)}
        )
        .coalesce(parallelism)
        .persist()
        for at in sorted({item.read_snapshot for item in plan.shards})
    }
    frames: list[DataFrame] = []
    for item in plan.shards:
        rows = cached[item.read_snapshot].where(shard_rows(item)).drop(FILE_COLUMN, UPSTREAM_SHARD_COLUMN)
        if group.filter:
            rows = rows.where(group.filter)
        frames.append(with_lineage(transform(rows), item.shard.shard_id, window))
    return reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), frames), list(cached.values())


def shard_rows(item: ReplayShard) -> Column:
    """The rows of one covered shard in the cached base: its own files, and its replaced upstream shards' new rows."""
    own = F.col(FILE_COLUMN).isin(list(item.files))
    if not item.replaced_files:
        return own
    replaced = F.col(FILE_COLUMN).isin(list(item.replaced_files)) & F.col(UPSTREAM_SHARD_COLUMN).isin(
        list(item.replaced_shards)
    )
    return own | replaced
