"""Canary transforms: a new transform's output for one window, staged beside main, compared, then promoted.

``run_canary`` plans the window as a replay would (``iceberg/replay.py``), runs the new transform
over exactly the source rows the window consumed, and stages the output on the sink with Iceberg's
write-audit-publish: a staged snapshot on no branch, which no reader of main sees. It then compares
the staged rows with the window's rows on main (``CanaryDiff``: rows added, removed and changed, by
a key when one is given; each column's nulls, minimum and maximum on both sides; a sample of the
changes) and records the canary on the sink (``iceberg/store/canaries.py``). The records and the
rules a promotion must pass are in ``iceberg/protocol/canary.py``.

``promote_canary`` publishes exactly that staged output as the window's, in one fenced replay
commit (``WindowReplace``): it takes the window's replay ticket, under the new transform, and
refuses if output of the window was committed after the canary planned it. Taking the ticket
records the transform change in the registry, as a replay under ``on_change: continue`` does; the
group's Leader then follows the new transform once the groups file names it.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from pyiceberg.manifest import ManifestEntryStatus
from pyiceberg.table import Table
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from icegroup.iceberg.config.lakehouse import LakehouseConfig
from icegroup.iceberg.errors import UsageError, WindowMoved
from icegroup.iceberg.protocol.canary import Canary, CanaryDiff, ColumnStats
from icegroup.iceberg.protocol.fences import replay_fence_key
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.shards import window_value
from icegroup.iceberg.protocol.sink_commit import COL_WINDOW, KEY_STAGE, LINEAGE_COLUMNS
from icegroup.iceberg.replay import ReplayPlan, plan_replay
from icegroup.iceberg.replay_ticket import replay_ticket
from icegroup.iceberg.store.canaries import drop_canary, promotable, save_canary
from icegroup.iceberg.store.heartbeats import heartbeat
from icegroup.spark_jobs.code_shipping import ship_transform
from icegroup.spark_jobs.replay import ReplayReport, publish_staged, stage_window
from icegroup.spark_jobs.row_files import FILE_COLUMN
from icegroup.spark_jobs.session import activate
from icegroup.spark_jobs.transforms import load_transform

SAMPLE_ROWS = 5


def run_canary(
    spark: SparkSession,
    lakehouse: LakehouseConfig,
    group: GroupConfig,
    transform: str,
    window: str | None,
    key: str | None,
    progress: Callable[[str], None],
) -> CanaryDiff:
    """Stage ``transform``'s output for ``window`` (default: the newest window with output) and compare it."""
    activate(spark)
    catalog = lakehouse.catalog()
    sink = catalog.load_table(group.sink) if catalog.table_exists(group.sink) else None
    if sink is None or sink.current_snapshot() is None:
        raise UsageError(f"canary: group {group.name!r} has no output yet to compare a transform against")
    candidate = group.model_copy(update={"transform": transform})
    new = load_transform(transform)
    chosen = window or newest_window(spark, lakehouse, group)
    plan = plan_replay(catalog, candidate, chosen)
    fence = replay_generation(sink, group.name, chosen)
    plan.check_complete()
    if not plan.shards:
        raise UsageError(f"canary: window {chosen} of group {group.name!r} holds no output; name another --window")
    progress(f"{group.name}: canary of {transform} over window {chosen}: {len(plan.shards)} shards, {plan.rows} rows")
    ship_transform(spark, transform)
    token = stage_window(spark, lakehouse, candidate, plan, new)
    staged = staged_snapshot(sink.refresh(), token)
    sink_table = f"{lakehouse.catalog_name}.{group.sink}"
    value = window_value(chosen, group.replay_window)
    main = (
        spark.read.format("iceberg")
        .option("snapshot-id", str(plan.sink_head))
        .load(sink_table)
        .where(F.col(COL_WINDOW) == F.lit(value))
        .persist()
    )
    canary = (
        spark.read.format("iceberg")
        .option("snapshot-id", str(staged))
        .load(sink_table)
        .select("*", FILE_COLUMN)
        .where((F.col(COL_WINDOW) == F.lit(value)) & F.col(FILE_COLUMN).isin(staged_files(sink, staged)))
        .drop(FILE_COLUMN)
        .persist()
    )
    try:
        diff = compare(main, canary, key, chosen, transform)
    finally:
        main.unpersist()
        canary.unpersist()
    record = Canary(
        window=chosen, transform=transform, token=token, staged_snapshot=staged, sink_head=plan.sink_head,
        covers=covered(plan), replay_fence=fence, at_ms=int(time.time() * 1000),
    )  # fmt: skip
    save_canary(sink.refresh(), group.name, record)
    progress(f"{group.name}: {diff.line()}; staged as snapshot {staged}, not on main")
    return diff


def covered(plan: ReplayPlan) -> list[str]:
    """The shards whose output a window holds, as a plan found them."""
    return sorted(item.shard.shard_id for item in plan.shards)


def replay_generation(sink: Table, group: str, window: str) -> int:
    """The window's replay generation on the sink (0: never replayed)."""
    return int(sink.properties.get(replay_fence_key(group, window), "0"))


def newest_window(spark: SparkSession, lakehouse: LakehouseConfig, group: GroupConfig) -> str:
    """The newest window the sink holds output of, as its label."""
    newest = spark.read.format("iceberg").load(f"{lakehouse.catalog_name}.{group.sink}").agg(F.max(COL_WINDOW))
    value = newest.collect()[0][0]
    if value is None:
        raise UsageError(f"canary: the sink {group.sink} holds no window yet; name one with --window")
    return value.isoformat() if hasattr(value, "isoformat") else str(value)


def staged_snapshot(sink: Table, token: str) -> int:
    """The staged snapshot that ``token`` names."""
    for snapshot in sink.snapshots():
        summary = snapshot.summary.additional_properties if snapshot.summary is not None else {}
        if summary.get(KEY_STAGE) == token:
            return snapshot.snapshot_id
    raise UsageError(f"canary: staged output {token} is not on {'.'.join(sink.name())} (expired?); run it again")


def staged_files(sink: Table, snapshot_id: int) -> list[str]:
    """The data files the staged snapshot added: the canary's output, without main's rows under it."""
    snapshot = sink.snapshot_by_id(snapshot_id)
    if snapshot is None:
        raise UsageError(f"canary: staged snapshot {snapshot_id} is gone (expired?); run the canary again")
    return [
        entry.data_file.file_path
        for manifest in snapshot.manifests(sink.io)
        if manifest.added_snapshot_id == snapshot_id
        for entry in manifest.fetch_manifest_entry(sink.io)
        if entry.status == ManifestEntryStatus.ADDED and entry.snapshot_id == snapshot_id
    ]


def compare(main: DataFrame, canary: DataFrame, key: str | None, window: str, transform: str) -> CanaryDiff:
    """Rows added, removed and changed (by ``key``), per-column statistics and a sample of the changes."""
    columns = [c for c in canary.columns if c not in LINEAGE_COLUMNS and c in main.columns]
    if key is not None and key not in columns:
        raise UsageError(f"canary: --key {key!r} is not a column of both outputs; choose one of {columns}")
    old, new = main.select(*columns), canary.select(*columns)
    diff = CanaryDiff(window, transform, old.count(), new.count(), 0, 0, None, key)
    if key is None:
        diff.added = new.exceptAll(old).count()
        diff.removed = old.exceptAll(new).count()
        diff.sample = [row.asDict() for row in new.exceptAll(old).limit(SAMPLE_ROWS).collect()]
    else:
        for side, rows in (("main", old), ("canary", new)):
            distinct = rows.select(key).distinct().count()
            if distinct != rows.count():
                raise UsageError(
                    f"canary: --key {key!r} is not unique in the {side} rows of window {window} ({distinct} distinct "
                    "values); choose a column that identifies a row, or leave --key out"
                )
        joined = old.select(F.lit(True).alias("m_here"), *[F.col(c).alias(f"m_{c}") for c in columns]).join(
            new.select(F.lit(True).alias("c_here"), *[F.col(c).alias(f"c_{c}") for c in columns]),
            F.col(f"m_{key}").eqNullSafe(F.col(f"c_{key}")),
            "full_outer",
        )
        differs: Column = F.lit(False)
        for c in columns:
            differs = differs | ~F.col(f"m_{c}").eqNullSafe(F.col(f"c_{c}"))
        diff.added = joined.where(F.col("m_here").isNull()).count()
        diff.removed = joined.where(F.col("c_here").isNull()).count()
        both = joined.where(F.col("m_here").isNotNull() & F.col("c_here").isNotNull() & differs)
        diff.changed = both.count()
        for row in both.limit(SAMPLE_ROWS).collect():
            changes = {c: [row[f"m_{c}"], row[f"c_{c}"]] for c in columns if row[f"m_{c}"] != row[f"c_{c}"]}
            diff.sample.append({key: row[f"m_{key}"], **changes})
    diff.columns = column_stats(old, new, columns)
    return diff


def column_stats(old: DataFrame, new: DataFrame, columns: list[str]) -> list[ColumnStats]:
    """Each column's nulls, minimum and maximum on main and in the canary: one aggregation a side."""

    def stats(df: DataFrame) -> dict[str, Any]:
        aggregates = [
            agg
            for c in columns
            for agg in (
                F.sum(F.col(c).isNull().cast("long")).alias(f"n_{c}"),
                F.min(c).alias(f"lo_{c}"),
                F.max(c).alias(f"hi_{c}"),
            )
        ]
        found: dict[str, Any] = df.agg(*aggregates).collect()[0].asDict()
        return found

    a, b = stats(old), stats(new)
    return [
        ColumnStats(
            c, int(a[f"n_{c}"] or 0), int(b[f"n_{c}"] or 0), a[f"lo_{c}"], b[f"lo_{c}"], a[f"hi_{c}"], b[f"hi_{c}"]
        )
        for c in columns
    ]


def promote_canary(
    spark: SparkSession,
    lakehouse: LakehouseConfig,
    group: GroupConfig,
    run_id: str | None,
    progress: Callable[[str], None],
) -> ReplayReport:
    """Publish the group's canary as its window's output in one fenced commit, if the window did not move since.

    Nothing is run again: the commit publishes the canary's staged output. The group as configured
    must already name the canary's transform (its groups file was changed to it), so that shards
    committed after the promotion are made by the same transform, and the change is pinned in the
    registry as a replay pins it (refused under ``on_change: fail``). A window whose shards are not
    all committed, or that changed since the canary (new output, a replay), is refused.
    """
    activate(spark)
    catalog = lakehouse.catalog()
    sink = catalog.load_table(group.sink)
    record = promotable(catalog, sink, group)
    holder = run_id or f"canary-{uuid.uuid4().hex}"
    with (
        replay_ticket(catalog, group, record.window, holder) as ticket,
        heartbeat(catalog, group.name, holder, interval_s=group.session_timeout_s / 3),
    ):
        plan = replace(plan_replay(catalog, group, record.window), sink_head=record.sink_head)
        fence = replay_generation(sink.refresh(), group.name, record.window)
        if covered(plan) != record.covers or fence != ticket.generation or ticket.generation != record.replay_fence + 1:
            raise WindowMoved(
                f"canary: window {record.window} changed after the canary planned it (new output, or a replay), so "
                "its staged output is not the window's any more; run `icegroup canary` again, then promote"
            )
        report = ReplayReport(window=record.window, generation=ticket.generation)
        try:
            publish_staged(spark, lakehouse, group, ticket, plan, record.token, report, run_id)
        except WindowMoved as exc:
            raise WindowMoved(
                f"canary: output of window {record.window} was committed after the canary planned it, so its staged "
                f"output is not the window's any more ({exc}); run `icegroup canary` again, then promote"
            ) from exc
    drop_canary(sink.refresh(), group.name, record.token)
    progress(f"{group.name}: canary of {record.transform} promoted: {report.line()}")
    return report
