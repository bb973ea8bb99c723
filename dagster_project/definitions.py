"""The code location: for each group, source and sink assets, a Borrower job, and a Leader; and expiry.

Groups come from ``dagster_project/groups.yaml``, or the file named by ``ICEGROUP_GROUPS``
(``group_files.py``). They are
read when Dagster loads the location, never at import, and every group's transform is imported
then, so a typo in one fails the location with an error naming the file, the group and the field.
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from dagster_project.assets import sink_asset, source_spec, table_key
from dagster_project.cli.group_files import groups_path, load_checked_groups
from dagster_project.jobs import UnresolvedAssetJobDefinition, borrower_job, consume_job, expire_job, replay_job
from dagster_project.resources import IcegroupResource
from dagster_project.schedules import consume_schedule, expire_schedule
from dagster_project.sensors import leader_sensor
from iceberg.config.lakehouse import load_lakehouse
from iceberg.protocol.group import GroupConfig


def build_definitions(
    groups: dict[str, GroupConfig], catalog_name: str, lakehouse_config: Path | None = None
) -> dg.Definitions:
    """Definitions for the given groups; separate from loading so the CLI and tests pass their own.

    A group whose source is another group's sink (chained groups) gets no source spec of its own:
    the upstream group's sink asset is its source, so the asset graph runs from the first source
    through every group to the last sink.
    """
    sinks = {table_key(catalog_name, group.sink) for group in groups.values()}
    specs: dict[dg.AssetKey, dg.AssetSpec] = {}
    assets: list[dg.AssetsDefinition] = []
    jobs: list[dg.JobDefinition | UnresolvedAssetJobDefinition] = []
    sensors: list[dg.SensorDefinition] = []
    schedules: list[dg.ScheduleDefinition] = []
    for group in groups.values():
        spec = source_spec(group, catalog_name)
        if spec.key not in sinks:
            specs[spec.key] = spec
        sink = sink_asset(group, catalog_name)
        assets.append(sink)
        borrower = borrower_job(group, catalog_name)
        consume = consume_job(group, catalog_name)
        jobs += [borrower, consume, replay_job(group, sink)]
        if group.schedule:
            schedules.append(consume_schedule(group, consume, group.schedule))
        else:
            sensors.append(leader_sensor(group, borrower, sink.key, spec.key))
    if groups:
        expire = expire_job(groups)
        jobs.append(expire)
        schedules.append(expire_schedule(expire))
    return dg.Definitions(
        assets=[*specs.values(), *assets],
        jobs=jobs,
        sensors=sensors,
        schedules=schedules,
        resources={"icegroup": IcegroupResource(lakehouse_config=str(lakehouse_config) if lakehouse_config else None)},
    )


@dg.definitions
def defs() -> dg.Definitions:
    """Load the groups file and build the location."""
    return build_definitions(load_checked_groups(groups_path()), load_lakehouse().catalog_name)
