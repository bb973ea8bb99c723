"""Jobs: the per-lease Borrower job, and the consume-until-caught-up job for CLI and schedules."""

from typing import Any

import dagster as dg

# The return type of the public dg.define_asset_job; Dagster does not export the name itself.
from dagster._core.definitions.unresolved_asset_job_definition import UnresolvedAssetJobDefinition
from pydantic import Field

from dagster_project.assets import complete_events, lease_metadata, table_key
from dagster_project.resources import IcegroupResource
from dagster_project.run_observer import observe_runs, terminate_runs
from dagster_project.tags import TAG_GROUP
from iceberg.describe import describe_group
from iceberg.groups import GroupConfig
from iceberg.protocol.shards import window_label
from iceberg.protocol.state import Lease
from spark_jobs.borrower import LeaseReport
from spark_jobs.consume import consume


class ConsumeConfig(dg.Config):
    """How long a consume run goes on."""

    until_caught_up: bool = Field(
        default=True, description="Keep ticking until every source snapshot is committed; else one round."
    )
    max_wait_s: float = Field(
        default=600.0, description="Give up after this long without progress while other runs hold leases."
    )


def borrower_job(group: GroupConfig, sink: dg.AssetsDefinition) -> UnresolvedAssetJobDefinition:
    """Runs one lease; in-process, since the one step is a Spark job and a subprocess adds nothing."""
    return dg.define_asset_job(
        name=f"{group.name}_borrower",
        selection=[sink],
        executor_def=dg.in_process_executor,
        tags={TAG_GROUP: group.name},
        description=f"Borrower of group {group.name}: executes one lease granted by {group.name}_leader.",
    )


def consume_job(group: GroupConfig, catalog_name: str) -> dg.JobDefinition:
    """Leader and Borrower in one run, with one warm SparkSession: what `icegroup consume` runs.

    The session starts at the first lease this run executes, so a run with nothing to do starts no JVM.
    """
    sink_key = table_key(catalog_name, group.sink)

    @dg.op(name=f"{group.name}_consume_op", tags={"kind": "spark"})
    def consume_op(context: dg.OpExecutionContext, config: ConsumeConfig, icegroup: IcegroupResource) -> None:
        """Tick and run the granted leases here until caught up; observe leases, materialize complete windows."""
        lakehouse = icegroup.lakehouse()

        def record(lease: Lease, report: LeaseReport) -> None:
            view = describe_group(lakehouse.catalog(), group)
            context.log_event(
                dg.AssetObservation(
                    asset_key=sink_key,
                    partition=window_label(lease.window_start_ms, group.replay_window),
                    metadata=lease_metadata(group, report, view),
                )
            )

        def complete(windows: list[int]) -> None:
            for event in complete_events(group, sink_key, windows):
                context.log_event(event)

        summary = consume(
            icegroup.spark,
            lakehouse,
            group,
            owner_run_id=context.run_id,
            observe_others=observe_runs(context.instance, group.name),
            on_lease=record,
            on_complete=complete,
            progress=context.log.info,
            max_wait_s=config.max_wait_s,
            until_caught_up=config.until_caught_up,
            terminate=lambda leases: terminate_runs(context.instance, group.name, leases),
        )
        context.log.info(
            f"{group.name}: {summary.leases} leases, {summary.shards} shards, {summary.rows_in} rows in, "
            f"{summary.rows_out} rows out; caught up: {summary.caught_up}"
        )

    @dg.job(
        name=f"{group.name}_consume",
        tags={TAG_GROUP: group.name},
        description=f"Consume group {group.name} until caught up, in one run.",
    )
    def job() -> Any:
        consume_op()

    return job


def consume_schedule(group: GroupConfig, job: dg.JobDefinition, cron: str) -> dg.ScheduleDefinition:
    """For a scheduled group: consume until caught up at each cron tick, instead of a Leader sensor."""
    return dg.ScheduleDefinition(
        name=f"{group.name}_schedule",
        job=job,
        cron_schedule=cron,
        execution_timezone="UTC",
        default_status=dg.DefaultScheduleStatus.RUNNING,
        description=f"Consume group {group.name} until caught up on '{cron}' (UTC).",
    )
