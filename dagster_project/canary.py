"""The canary job: a new transform tried on one window beside main, its difference shown as run metadata.

What ``icegroup canary`` does, as a Dagster job launched from the UI's Launchpad: with
``promote: false`` it stages the new transform's output for the window and records the difference
as an observation of the sink's partition (counts, each column on both sides, a sample of the
changes), so it shows in the asset's history; with ``promote: true`` it publishes the staged
output as the window's in one fenced commit and materializes the partition.
"""

from collections.abc import Mapping
from typing import Any

import dagster as dg
from pydantic import Field

from icegroup.dagster_project.assets import DATA_VERSION_TAG, replay_metadata
from icegroup.dagster_project.resources import lakehouse_of
from icegroup.dagster_project.runs.executor import ONE_PROCESS
from icegroup.dagster_project.runs.tags import TAG_GROUP
from icegroup.iceberg.protocol.canary import CanaryDiff
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.spark_jobs.canary import promote_canary, run_canary


class CanaryConfig(dg.Config):
    """Which transform to try, on which window, and whether to promote the canary already staged."""

    transform: str | None = Field(
        default=None,
        description="The new transform to try, as module:function; it must import where Spark runs. Not with promote.",
    )
    window: str | None = Field(default=None, description="The window to try it on; default: the newest with output.")
    key: str | None = Field(
        default=None, description="A column that identifies a row, so that changed rows are told from added ones."
    )
    promote: bool = Field(
        default=False,
        description="Publish the canary already staged as its window's output, in one commit, once the groups file "
        "names its transform.",
    )


def diff_metadata(diff: CanaryDiff) -> dict[str, dg.MetadataValue]:
    """The difference as metadata the UI shows: counts, a column table and a sample of the changes."""
    header = (
        "| column | main nulls | canary nulls | main min | canary min | main max | canary max |\n"
        "|---|---|---|---|---|---|---|"
    )
    rows = [
        f"| {s.column} | {s.main_nulls} | {s.canary_nulls} | {s.main_min} | {s.canary_min} | {s.main_max} | "
        f"{s.canary_max} |"
        for s in diff.columns
    ]
    return {
        "canary_transform": dg.MetadataValue.text(diff.transform),
        "main_rows": dg.MetadataValue.int(diff.main_rows),
        "canary_rows": dg.MetadataValue.int(diff.canary_rows),
        "rows_added": dg.MetadataValue.int(diff.added),
        "rows_removed": dg.MetadataValue.int(diff.removed),
        **({"rows_changed": dg.MetadataValue.int(diff.changed)} if diff.changed is not None else {}),
        "columns": dg.MetadataValue.md("\n".join([header, *rows])),
        "sample": dg.MetadataValue.json([{k: str(v) for k, v in row.items()} for row in diff.sample]),
    }


def canary_job(group: GroupConfig, sink_key: dg.AssetKey, resources: Mapping[str, Any]) -> dg.JobDefinition:
    """Try a transform on one window of the group's sink, or promote the canary staged before."""
    (key,) = resources

    @dg.op(name=f"{group.name}_canary_op", tags={"kind": "spark"}, required_resource_keys={key})
    def canary_op(context: dg.OpExecutionContext, config: CanaryConfig) -> None:
        """Stage and compare the new transform's output for the window, or publish the staged canary."""
        icegroup = lakehouse_of(context.resources, key)
        lakehouse = icegroup.lakehouse()
        if config.promote == bool(config.transform):
            raise dg.Failure("canary: give transform to try one, or promote (alone) to publish the one tried")
        if config.promote:
            report = promote_canary(icegroup.spark(), lakehouse, group, context.run_id, context.log.info)
            tags = {DATA_VERSION_TAG: str(report.sink_snapshot)} if report.sink_snapshot else None
            context.log_event(
                dg.AssetMaterialization(
                    asset_key=sink_key,
                    partition=report.window,
                    description=f"The canary of {group.transform}, promoted.",
                    metadata=replay_metadata(group, [report]),
                    tags=tags,
                )
            )
            return
        tried = config.transform or group.transform
        diff = run_canary(icegroup.spark(), lakehouse, group, tried, config.window, config.key, context.log.info)
        context.log_event(
            dg.AssetObservation(
                asset_key=sink_key,
                partition=diff.window,
                description=f"Canary of {tried}: {diff.line()}. Main's rows are untouched.",
                metadata=diff_metadata(diff),
            )
        )

    @dg.job(
        name=f"{group.name}_canary",
        executor_def=ONE_PROCESS,
        resource_defs=dict(resources),
        tags={TAG_GROUP: group.name},
        description=f"Try a new transform on one window of {group.name}'s sink beside main; then promote it.",
    )
    def job() -> Any:
        canary_op()

    return job
