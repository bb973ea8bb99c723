"""Assets: each group's source as an external spec, and its sink, partitioned by replay window."""

from typing import Any

import dagster as dg

from dagster_project.resources import IcegroupResource
from iceberg.groups import GroupConfig
from iceberg.lag import Lag
from iceberg.protocol.shards import window_label
from spark_jobs.borrower import LeaseReport
from spark_jobs.replay import ReplayReport, replay_window


def table_key(catalog_name: str, identifier: str) -> dg.AssetKey:
    """Asset key of an Iceberg table: catalog, namespace, table."""
    return dg.AssetKey([catalog_name, *identifier.split(".")])


def window_partitions(group: GroupConfig) -> dg.TimeWindowPartitionsDefinition:
    """The sink's partitions: replay windows of source commit time, UTC, including the current one."""
    start = group.window_start.isoformat()
    if group.replay_window == "hour":
        return dg.HourlyPartitionsDefinition(start_date=f"{start}-00:00", end_offset=1, timezone="UTC")
    return dg.DailyPartitionsDefinition(start_date=start, end_offset=1, timezone="UTC")


def source_spec(group: GroupConfig, catalog_name: str) -> dg.AssetSpec:
    """The source table: written by producers outside Dagster, so it is an external asset."""
    return dg.AssetSpec(
        table_key(catalog_name, group.source),
        description=f"Iceberg table {group.source}, appended to by producers; consumed by group {group.name}.",
        kinds={"iceberg"},
        group_name="sources",
    )


def lease_metadata(group: GroupConfig, report: LeaseReport, lag: Lag) -> dict[str, Any]:
    """What every observation of the sink by a lease records; numbers, so the UI plots them over time."""
    return {
        "rows_in": dg.MetadataValue.int(report.rows_in),
        "rows_out": dg.MetadataValue.int(report.rows_out),
        "bytes_in": dg.MetadataValue.int(report.bytes_in),
        "duration_s": dg.MetadataValue.float(round(report.duration_s, 3)),
        "source_from_snapshot": str(report.source_from),
        "source_to_snapshot": str(report.source_to),
        "lease": report.lease_id,
        "attempt": dg.MetadataValue.int(report.attempt),
        "epoch": dg.MetadataValue.int(report.epoch),
        "shards_committed": dg.MetadataValue.int(len(report.committed)),
        "shards_resumed": dg.MetadataValue.int(len(report.resumed)),
        "shards_fenced": dg.MetadataValue.int(len(report.fenced)),
        "commit_conflicts_retried": dg.MetadataValue.int(report.commit_conflicts),
        "redeliveries": dg.MetadataValue.int(report.redeliveries),
        "sink_snapshots": dg.MetadataValue.json([str(s) for s in report.sink_snapshots]),
        "lag_rows": dg.MetadataValue.int(lag.rows),
        "lag_snapshots": dg.MetadataValue.int(lag.snapshots),
        "lag_age_s": dg.MetadataValue.float(round(lag.age_s or 0.0, 1)),
        "window": window_label(report.window_start_ms, group.replay_window),
    }


def replay_metadata(reports: list[ReplayReport]) -> dict[str, Any]:
    """What a replay's materialization of its windows records."""
    return {
        "replayed_windows": dg.MetadataValue.json([r.window for r in reports]),
        "generations": dg.MetadataValue.json([r.generation for r in reports]),
        "shards": dg.MetadataValue.int(sum(r.shards for r in reports)),
        "rows_in": dg.MetadataValue.int(sum(r.rows_in for r in reports)),
        "rows_out": dg.MetadataValue.int(sum(r.rows_out for r in reports)),
        "rows_replaced": dg.MetadataValue.int(sum(r.rows_replaced for r in reports)),
        "sink_snapshots": dg.MetadataValue.json([str(r.sink_snapshot) for r in reports if r.sink_snapshot]),
    }


def complete_events(group: GroupConfig, sink_key: dg.AssetKey, windows: list[int]) -> list[dg.AssetMaterialization]:
    """A materialization of each window the Leader found complete: its partition reads finished from now on."""
    return [
        dg.AssetMaterialization(
            asset_key=sink_key,
            partition=window_label(start, group.replay_window),
            description="The window is complete: every source commit in it is in the sink.",
            metadata={"window": window_label(start, group.replay_window), "complete": True, "group": group.name},
        )
        for start in windows
    ]


def sink_asset(group: GroupConfig, catalog_name: str) -> dg.AssetsDefinition:
    """The sink: a partition per replay window, materialized when the window is complete or replayed.

    Borrower runs (``dagster_project/jobs.py``) commit shards and record an observation of the
    partition: the window may still be open, so it must not look finished. The Leader materializes
    a partition once its window is complete (``iceberg/protocol/completion.py``). A run of the asset
    itself, such as a backfill launched from the UI, replays its partitions.
    """

    @dg.asset(
        key=table_key(catalog_name, group.sink),
        deps=[table_key(catalog_name, group.source)],
        partitions_def=window_partitions(group),
        kinds={"spark", "iceberg"},
        group_name=group.name,
        tags={"icegroup/group": group.name},
        description=f"Rows of {group.source} through {group.transform}, exactly once, by group {group.name}.",
    )
    def sink(context: dg.AssetExecutionContext, icegroup: IcegroupResource) -> dg.MaterializeResult[None]:
        """Replay the run's partitions: each window's output is replaced by a fresh consumption of it."""
        lakehouse = icegroup.lakehouse()
        reports = [
            replay_window(icegroup.spark(), lakehouse, group, key, run_id=context.run.run_id, progress=context.log.info)
            for key in context.partition_keys
        ]
        return dg.MaterializeResult(metadata=replay_metadata(reports))

    return sink
