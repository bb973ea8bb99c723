"""Upkeep as a Dagster job and an optional schedule: consumer-aware expiry of every table the groups touch."""

from typing import Any

import dagster as dg
from pydantic import Field

from dagster_project.resources import IcegroupResource
from iceberg.groups import GroupConfig
from iceberg.protocol.durations import parse_duration
from iceberg.retention import StateRetention, expire

EXPIRE_CRON = "0 3 * * *"


class ExpireConfig(dg.Config):
    """How much of their own history the groups' state tables keep (sources and sinks keep what groups need)."""

    keep_state: int = Field(
        default=StateRetention.keep_last,
        ge=1,
        description="Snapshots each registry, lineage and dead-letter table keeps at least.",
    )
    keep_state_for: str = Field(default="7d", description="And the ones younger than this: 12h, 7d, P1D.")


def expire_job(groups: dict[str, GroupConfig]) -> dg.JobDefinition:
    """The job ``icegroup expire`` is, for the schedule and for launching from the UI."""

    @dg.op(name="icegroup_expire_op")
    def expire_op(context: dg.OpExecutionContext, config: ExpireConfig, icegroup: IcegroupResource) -> None:
        """Expire the snapshots no group needs; log each table's verdict and what holds what it keeps."""
        keep = StateRetention(config.keep_state, parse_duration(config.keep_state_for))
        plans = expire(icegroup.catalog(), groups, keep, execute=True)
        for plan in plans:
            row = plan.row()
            context.log.info(
                f"{row['table']} ({row['roles']}): expired {row['expire']} + {row['staged_expire']} staged, "
                f"kept {row['keep']}, held by {row['held_by']}: {row['status']}"
            )
        failed = [p.table for p in plans if p.error]
        if failed:
            raise dg.Failure(f"expiry of {', '.join(failed)} lost a race with another commit; it runs again next time")

    @dg.job(
        name="icegroup_expire",
        description="Expire snapshots of the groups' sources, sinks and state tables that no group needs.",
    )
    def job() -> Any:
        expire_op()

    return job


def expire_schedule(job: dg.JobDefinition) -> dg.ScheduleDefinition:
    """Daily expiry, off until turned on in the UI: retention is a choice the deployment makes."""
    return dg.ScheduleDefinition(
        name="icegroup_expire_schedule",
        job=job,
        cron_schedule=EXPIRE_CRON,
        execution_timezone="UTC",
        default_status=dg.DefaultScheduleStatus.STOPPED,
        description=f"Run icegroup expire at '{EXPIRE_CRON}' (UTC); turn it on to keep history bounded.",
    )
