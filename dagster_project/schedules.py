"""Schedules: consuming a scheduled group at each cron tick, and the daily expiry (off until turned on)."""

import dagster as dg

from icegroup.iceberg.protocol.group import GroupConfig

EXPIRE_CRON = "0 3 * * *"


def consume_schedule(group: GroupConfig, job: dg.JobDefinition, cron: str) -> dg.ScheduleDefinition:
    """For a scheduled group: consume until caught up at each cron tick, instead of a Leader sensor."""
    return utc_schedule(
        f"{group.name}_schedule", job, cron, dg.DefaultScheduleStatus.RUNNING,
        f"Consume group {group.name} until caught up on '{cron}' (UTC).",
    )  # fmt: skip


def expire_schedule(job: dg.JobDefinition) -> dg.ScheduleDefinition:
    """Daily expiry, off until turned on in the UI: retention is a choice the deployment makes."""
    return utc_schedule(
        f"{job.name}_schedule", job, EXPIRE_CRON, dg.DefaultScheduleStatus.STOPPED,
        f"Run icegroup expire at '{EXPIRE_CRON}' (UTC); turn it on to keep history bounded.",
    )  # fmt: skip


def utc_schedule(
    name: str, job: dg.JobDefinition, cron: str, status: dg.DefaultScheduleStatus, description: str
) -> dg.ScheduleDefinition:
    """A schedule of ``job`` on ``cron`` read in UTC, so it means the same on every machine."""
    return dg.ScheduleDefinition(
        name=name,
        job=job,
        cron_schedule=cron,
        execution_timezone="UTC",
        default_status=status,
        description=description,
    )
