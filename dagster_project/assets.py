"""Assets: each group's source as an external spec, and its sink as the asset Borrowers materialize."""

from typing import Any

import dagster as dg

from dagster_project.resources import IcegroupResource
from dagster_project.tags import TAG_ATTEMPT, TAG_LEASE
from iceberg.describe import describe_group
from iceberg.groups import GroupConfig
from iceberg.heartbeats import heartbeat
from iceberg.protocol.liveness import holder_of
from iceberg.protocol.shards import window_label
from spark_jobs.borrower import LeaseReport, fetch_lease, run_lease


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


def lease_metadata(group: GroupConfig, report: LeaseReport, lag_rows: int, lag_snapshots: int) -> dict[str, Any]:
    """What every materialization of the sink records."""
    return {
        "rows_in": dg.MetadataValue.int(report.rows_in),
        "rows_out": dg.MetadataValue.int(report.rows_out),
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
        "lag_rows": dg.MetadataValue.int(lag_rows),
        "lag_snapshots": dg.MetadataValue.int(lag_snapshots),
        "window": window_label(report.window_start_ms, group.replay_window),
    }


def sink_asset(group: GroupConfig, catalog_name: str) -> dg.AssetsDefinition:
    """The sink, materialized one lease at a time by the group's Borrower runs."""

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
        """Execute the lease named in the run's tags and commit its shards to the sink."""
        tags = context.run.tags
        if TAG_LEASE not in tags:
            raise dg.Failure(
                f"This run of {group.sink} carries no {TAG_LEASE} tag. Borrower runs are launched by the "
                f"{group.name}_leader sensor or by `icegroup consume {group.name}`; replaying a window "
                "from a UI backfill is not implemented yet (see README, 'Not done yet')."
            )
        lakehouse = icegroup.lakehouse()
        lease, shards = fetch_lease(lakehouse.catalog(), group.name, tags[TAG_LEASE], int(tags[TAG_ATTEMPT]))
        catalog = lakehouse.catalog()
        with heartbeat(catalog, group.name, holder_of(lease), interval_s=group.session_timeout_s / 3):
            report = run_lease(
                icegroup.spark(), lakehouse, group, lease, shards, progress=context.log.info, run_id=context.run.run_id
            )
        view = describe_group(lakehouse.catalog(), group)
        return dg.MaterializeResult(metadata=lease_metadata(group, report, view.lag_rows, view.lag_snapshots))

    return sink
