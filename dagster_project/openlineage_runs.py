"""Resets and expiries as OpenLineage runs, for the CLI and the Dagster jobs that carry them out.

A reset writes the sink (it deletes the output it will consume again) and an expiry rewrites the
metadata of every table it expires, so each is a run of its own in a lineage tool, beside the
lease and replay runs that ``spark_jobs`` reports. A preview changes nothing and is not a run.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping

from icegroup.iceberg.config.lakehouse import LakehouseConfig
from icegroup.iceberg.openlineage import output_dataset, run_events
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.reset import ResetTarget
from icegroup.iceberg.protocol.retention import StateRetention
from icegroup.iceberg.reset import ResetPlan, execute_reset
from icegroup.iceberg.retention import TableExpiry, expire
from icegroup.iceberg.store.tables import load_optional

EXPIRE_JOB = "expire"


def reset_run(lakehouse: LakehouseConfig, group: GroupConfig, target: ResetTarget, keep_output: bool) -> ResetPlan:
    """Execute a reset of ``group``; its run reads the source's positions and writes the sink at its new head."""
    catalog = lakehouse.catalog()
    key = f"reset/{uuid.uuid4().hex}"
    events = run_events(lakehouse, catalog, group.name, f"{group.name}.reset", key, group.source, None)
    with events.observe():
        plan = execute_reset(catalog, group, target, keep_output=keep_output)
        events.complete(output_dataset(lakehouse, catalog, group.sink, plan.state.sink_cursor, None))
    return plan


def expire_run(
    lakehouse: LakehouseConfig, groups: Mapping[str, GroupConfig], keep: StateRetention, execute: bool
) -> list[TableExpiry]:
    """``expire`` over the groups' tables; when it executes, every table it expired is an output at its head."""
    catalog = lakehouse.catalog()
    if not execute:
        return expire(catalog, groups, keep, execute=False)
    events = run_events(lakehouse, catalog, EXPIRE_JOB, EXPIRE_JOB, uuid.uuid4().hex, None, None)
    with events.observe():
        plans = expire(catalog, groups, keep, execute=True)
        outputs = []
        for plan in plans:
            table = load_optional(catalog, plan.table) if plan.done else None
            head = None if table is None else table.current_snapshot()
            if head is not None:
                outputs += output_dataset(lakehouse, catalog, plan.table, head.snapshot_id, None)
        events.complete(outputs)
    return plans
