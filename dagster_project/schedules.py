"""Schedules: consuming a scheduled group at each cron tick, and the daily expiry (off until turned on)."""

import dagster as dg

from icegroup.iceberg.protocol.group import GroupConfig

EXPIRE_CRON = "0 3 * * *"


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


def expire_schedule(job: dg.JobDefinition) -> dg.ScheduleDefinition:
    """Daily expiry, off until turned on in the UI: retention is a choice the deployment makes."""
    return dg.ScheduleDefinition(
        name=f"{job.name}_schedule",
        job=job,
        cron_schedule=EXPIRE_CRON,
        execution_timezone="UTC",
        default_status=dg.DefaultScheduleStatus.STOPPED,
        description=f"Run icegroup expire at '{EXPIRE_CRON}' (UTC); turn it on to keep history bounded.",
    )
