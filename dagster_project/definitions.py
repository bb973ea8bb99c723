"""The code location, and the one builder it shares with ``icegroup_definitions`` and the component.

For each group: source and sink assets, a Borrower job, and a Leader (or a schedule); and expiry.
The packaged location reads its groups from ``dagster_project/groups.yaml``, or the file named by
``ICEGROUP_GROUPS`` (``dagster_project/group_files.py``). They are read when Dagster loads the location, never at
import, and every group's transform is imported then, so a typo in one fails the location with an
error naming the file, the group and the field.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dagster as dg

from icegroup.dagster_project.assets import Labels, sink_asset, source_spec, table_key
from icegroup.dagster_project.canary import canary_job
from icegroup.dagster_project.checks import sink_checks
from icegroup.dagster_project.group_files import groups_path, load_checked_groups
from icegroup.dagster_project.jobs import (
    borrower_job,
    consume_job,
    expire_job,
    follow_job,
)
from icegroup.dagster_project.resources import DEFAULT_KEY, lakehouse_config_of, lakehouse_resource
from icegroup.dagster_project.runs.executor import ONE_PROCESS
from icegroup.dagster_project.runs.tags import TAG_GROUP
from icegroup.dagster_project.runs.warm import code_stamp
from icegroup.dagster_project.schedules import consume_schedule, expire_schedule
from icegroup.dagster_project.sensors import leader_sensor
from icegroup.dagster_project.window_start import resolve_window_starts
from icegroup.iceberg.config.lakehouse import LakehouseConfig, load_lakehouse
from icegroup.iceberg.protocol.group import GroupConfig


@dataclass(frozen=True)
class AssetNaming:
    """Where the groups' assets sit in the user's asset graph, and how they are labelled.

    ``key_prefix`` replaces the catalog name in front of a table's key; ``source_keys`` and
    ``sink_keys`` (by group name) name an asset outright, such as a source the user's project
    already defines, for which icegroup then makes no spec of its own.
    """

    key_prefix: tuple[str, ...] | None = None
    source_keys: Mapping[str, dg.AssetKey] = field(default_factory=dict)
    sink_keys: Mapping[str, dg.AssetKey] = field(default_factory=dict)
    labels: Labels = field(default_factory=Labels)

    def table(self, catalog_name: str, identifier: str) -> dg.AssetKey:
        """The key of a table icegroup names itself: the prefix (default: the catalog name), namespace, table."""
        if self.key_prefix is None:
            return table_key(catalog_name, identifier)
        return dg.AssetKey([*self.key_prefix, *identifier.split(".")])


def asset_keys(
    groups: Mapping[str, GroupConfig], catalog_name: str, naming: AssetNaming
) -> dict[str, tuple[dg.AssetKey, dg.AssetKey]]:
    """Each group's (source, sink) asset keys; a source that is another group's sink gets that sink's key."""
    sinks = {
        g.sink.lower(): naming.sink_keys.get(g.name) or naming.table(catalog_name, g.sink) for g in groups.values()
    }
    return {
        g.name: (
            naming.source_keys.get(g.name) or sinks.get(g.source.lower()) or naming.table(catalog_name, g.source),
            sinks[g.sink.lower()],
        )
        for g in groups.values()
    }


def build_definitions(
    groups: dict[str, GroupConfig],
    catalog_name: str,
    lakehouse_config: Path | LakehouseConfig | None = None,
    *,
    name: str = DEFAULT_KEY,
    naming: AssetNaming | None = None,
) -> dg.Definitions:
    """Definitions for the given groups; separate from loading so the CLI, tests and components pass their own.

    ``name`` is the resource key and the name of the expiry job (``<name>_expire``), so two sets
    of groups on two lakes can live in one project. A group whose source is another group's sink
    (chained groups) gets no source spec of its own: the upstream group's sink asset is its source,
    so the asset graph runs from the first source through every group to the last sink. A group
    without ``window_start`` gets the day of its source's first commit, read from the catalog now.
    """
    naming = naming or AssetNaming()
    resource = lakehouse_resource(lakehouse_config)
    resources = {name: resource}
    groups = resolve_window_starts(groups, lambda: lakehouse_config_of(lakehouse_config))
    keys = asset_keys(groups, catalog_name, naming)
    sinks = {sink for _, sink in keys.values()}
    specs: dict[dg.AssetKey, dg.AssetSpec] = {}
    assets: list[dg.AssetsDefinition] = []
    checks: list[dg.AssetChecksDefinition] = []
    jobs: list[dg.JobDefinition] = []
    sensors: list[dg.SensorDefinition] = []
    schedules: list[dg.ScheduleDefinition] = []
    for group in groups.values():
        source_key, sink_key = keys[group.name]
        if source_key not in sinks and group.name not in naming.source_keys:
            specs[source_key] = source_spec(group, source_key, naming.labels)
        sink = sink_asset(group, sink_key, source_key, naming.labels, name)
        assets.append(sink)
        checks += sink_checks(group, sink_key, name)
        borrower = borrower_job(group, sink_key, source_key, resources)
        consume = consume_job(group, sink_key, source_key, resources)
        jobs += [borrower, consume, canary_job(group, sink_key, resources)]
        follow = follow_job(group, sink_key, resources) if group.follow_upstream else None
        jobs += [follow] if follow is not None else []
        if group.schedule:
            schedules.append(consume_schedule(group, consume, group.schedule))
        else:
            sensors.append(leader_sensor(group, borrower, sink_key, source_key, name, follow, code_stamp(group)))
    if groups:
        expire = expire_job(groups, resources)
        jobs.append(expire)
        schedules.append(expire_schedule(expire))
    return dg.Definitions(
        assets=[*specs.values(), *assets],
        asset_checks=checks,
        jobs=[*jobs, *replay_jobs(groups.values(), assets)],
        sensors=sensors,
        schedules=schedules,
        resources=resources,
    )


def replay_jobs(groups: Iterable[GroupConfig], sinks: Iterable[dg.AssetsDefinition]) -> Iterator[Any]:
    """Each group's replay job, which replays the sink partitions it is launched for: what a UI backfill runs.

    An asset job is resolved when the definitions are; Dagster exports no type for it before
    that, so these are built here, where ``Definitions`` takes them.
    """
    for group, sink in zip(groups, sinks, strict=True):
        yield dg.define_asset_job(
            name=f"{group.name}_replay",
            selection=[sink],
            executor_def=ONE_PROCESS,
            tags={TAG_GROUP: group.name},
            description=f"Replay windows of group {group.name}: each one's output is replaced by a fresh consumption.",
        )


@dg.definitions
def defs() -> dg.Definitions:
    """Load the groups file and build the location."""
    return build_definitions(load_checked_groups(groups_path()), load_lakehouse().catalog_name)
