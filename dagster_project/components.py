"""icegroup inside a user's Dagster project: the ``ConsumerGroupsComponent`` and ``icegroup_definitions``.

Both give a set of groups their sink assets, Borrower, consume and replay jobs, Leader sensors or
schedules, and an expiry job, through the same builder as icegroup's own code location
(``definitions.py``). They compose with the user's definitions: a source can be an asset the
project already has, asset keys, the asset group, owners and tags are the user's choice, and each
component names its own resource and expiry job, so two of them (two lakes) fit in one project.

This module is the ``dagster_dg_cli.registry_modules`` entry point, so ``dg list components``
shows the component and ``dg scaffold defs icegroup.dagster_project.components.ConsumerGroupsComponent NAME``
writes a starter ``defs.yaml``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import dagster as dg
from dagster.components.component_scaffolding import scaffold_component
from dagster.components.scaffold.scaffold import NoParams
from pydantic import Field, ValidationError

from icegroup.dagster_project.assets import Labels
from icegroup.dagster_project.definitions import AssetNaming, build_definitions
from icegroup.dagster_project.group_files import load_checked_groups
from icegroup.dagster_project.resources import DEFAULT_KEY
from icegroup.iceberg.config.files import format_validation_error
from icegroup.iceberg.config.groups import parse_groups
from icegroup.iceberg.config.lakehouse import LakehouseConfig, load_lakehouse, relative_to_file
from icegroup.iceberg.errors import ConfigError
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.spark_jobs.transform_paths import check_transforms

NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class GroupAssets(dg.Model):
    """Asset keys of one group, when the defaults (prefix, namespace, table) are not what the project uses."""

    source_asset_key: list[str] | None = Field(
        default=None,
        description="Key of an asset the project already has for the source table, e.g. [raw, orders]: icegroup "
        "makes no source asset, and the sink depends on this one.",
    )
    sink_asset_key: list[str] | None = Field(
        default=None, description="Key of the sink asset, e.g. [clean, orders]; a downstream group's source follows it."
    )


def icegroup_definitions(
    groups: Sequence[Mapping[str, Any] | GroupConfig] | str | Path,
    lakehouse: LakehouseConfig | Mapping[str, Any] | str | Path | None = None,
    *,
    name: str = DEFAULT_KEY,
    key_prefix: Sequence[str] | None = None,
    assets: Mapping[str, GroupAssets | Mapping[str, Any]] | None = None,
    asset_group_name: str | None = None,
    owners: Sequence[str] = (),
    tags: Mapping[str, str] | None = None,
    base_dir: Path | None = None,
) -> dg.Definitions:
    """The Dagster definitions of a set of consumer groups, to merge with a project's own.

    ``groups``: group entries (the schema of a groups.yaml entry) or ``GroupConfig`` objects, or the
    path of a groups file. ``lakehouse``: a ``LakehouseConfig``, its values, or the path of a
    lakehouse file; None reads it as the ``icegroup`` command does ($ICEGROUP_LAKEHOUSE,
    ``ICEGROUP_*`` variables, the local default). ``name`` is the resource key and the expiry job's
    prefix (``<name>_expire``): give each call in one project its own. ``key_prefix`` replaces the
    catalog name in front of the assets' keys; ``assets`` sets a group's source or sink key outright
    (a source key the project already has gets no icegroup asset). Relative paths, in the arguments
    and in an inline lakehouse, are read from ``base_dir`` (default: the current folder).

    Example::

        import dagster as dg
        from icegroup.dagster_project.components import icegroup_definitions

        @dg.definitions
        def defs() -> dg.Definitions:
            return dg.Definitions.merge(
                dg.Definitions(assets=[raw_orders]),
                icegroup_definitions(
                    [{"name": "orders_clean", "source": "raw.orders", "sink": "clean.orders"}],
                    lakehouse="lakehouse.yaml",
                    assets={"orders_clean": {"source_asset_key": ["raw", "orders"]}},
                ),
            )
    """
    base = (base_dir or Path.cwd()).resolve()
    if not NAME_RE.match(name):
        raise ConfigError(f"name: {name!r} is not a Dagster resource key; use letters, digits and _")
    loaded = load_group_entries(groups, base)
    config = lakehouse_config(lakehouse, base)
    per_group = {
        group: GroupAssets.model_validate(dict(spec)) if isinstance(spec, Mapping) else spec
        for group, spec in (assets or {}).items()
    }
    unknown = sorted(set(per_group) - set(loaded))
    if unknown:
        raise ConfigError(
            f"assets: {', '.join(unknown)} is not a group here (groups: {', '.join(loaded) or 'none'}); key assets "
            "by group name"
        )
    naming = AssetNaming(
        key_prefix=tuple(key_prefix) if key_prefix is not None else None,
        source_keys={g: dg.AssetKey(a.source_asset_key) for g, a in per_group.items() if a.source_asset_key},
        sink_keys={g: dg.AssetKey(a.sink_asset_key) for g, a in per_group.items() if a.sink_asset_key},
        labels=Labels(group_name=asset_group_name, owners=tuple(owners), tags=dict(tags or {})),
    )
    catalog_name = (config if isinstance(config, LakehouseConfig) else load_lakehouse(config)).catalog_name
    return build_definitions(loaded, catalog_name, config, name=name, naming=naming)


def load_group_entries(
    groups: Sequence[Mapping[str, Any] | GroupConfig] | str | Path, base: Path
) -> dict[str, GroupConfig]:
    """Validated groups, each transform imported: from a groups file, or from entries given in place."""
    if isinstance(groups, str | Path):
        return load_checked_groups(base / groups)
    entries = [g.model_dump(exclude_unset=True) if isinstance(g, GroupConfig) else dict(g) for g in groups]
    loaded = parse_groups({"groups": entries}, source="groups")
    check_transforms(loaded.values(), source="groups")
    return loaded


def lakehouse_config(
    lakehouse: LakehouseConfig | Mapping[str, Any] | str | Path | None, base: Path
) -> LakehouseConfig | Path | None:
    """The lakehouse as the resource takes it: values validated now, or a file's path (checked now, read per run)."""
    if lakehouse is None or isinstance(lakehouse, LakehouseConfig):
        return lakehouse
    if isinstance(lakehouse, str | Path):
        path = base / lakehouse
        if not path.is_file():
            raise ConfigError(f"lakehouse: {path} does not exist; create it, or give the path of your lakehouse file")
        return path
    try:
        return LakehouseConfig(**relative_to_file(dict(lakehouse), base))
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, source="lakehouse")) from exc


class ConsumerGroupsScaffolder(dg.Scaffolder[NoParams]):
    """Writes a starter ``defs.yaml``: one group over a table, the lakehouse from a file next to it."""

    def scaffold(self, request: dg.ScaffoldRequest[NoParams]) -> None:
        """Write ``defs.yaml`` in the new folder (a ``component.py`` for the Python format)."""
        if request.scaffold_format != "yaml":
            scaffold_component(request)
            return
        request.target_path.mkdir(parents=True, exist_ok=True)
        (request.target_path / "defs.yaml").write_text(STARTER.format(type_name=request.type_name))


STARTER = """\
# icegroup consumer groups; every attribute: `dg utils inspect-component {type_name}`.
type: {type_name}
attributes:
  # The lakehouse: a file (relative to this folder) or its values inline. Unset: $ICEGROUP_LAKEHOUSE,
  # ICEGROUP_* variables, or ./.lake, as the icegroup command reads it.
  # lakehouse: lakehouse.yaml
  groups:
    - name: my_group              # lower case; names the group's jobs and sensor, unique in the project
      source: db.events           # namespace.table in the lakehouse catalog
      sink: db.events_out         # created by the first Borrower
      transform: icegroup.spark_jobs.transforms:identity
  # assets:
  #   my_group:
  #     source_asset_key: [raw, events]   # an asset your project already has for the source
  # owners: [team:data]
  # tags: {{domain: events}}
"""


def default_name(folder: Path) -> str:
    """A component's resource key when its YAML names none: ``icegroup_`` and its folder's name."""
    return "icegroup_" + re.sub(r"[^a-z0-9_]", "_", folder.name.lower())


@dg.scaffold_with(ConsumerGroupsScaffolder)
class ConsumerGroupsComponent(dg.Component, dg.Model, dg.Resolvable):
    """icegroup consumer groups over Iceberg tables: sink assets, Borrower and consume jobs, Leader sensors, expiry.

    Each group reads its source table exactly once into its sink, through a transform, on Spark;
    the sink is partitioned by replay window. Relative paths are read from this defs.yaml's folder.
    """

    groups: list[dict[str, Any]] | str = Field(
        description="The groups: a list of entries with the fields of a groups.yaml entry (name, source, sink, "
        "transform, filter, ...), or the path of a groups file."
    )
    lakehouse: dict[str, Any] | str | None = Field(
        default=None,
        description="The lakehouse: its fields inline (catalog_uri, warehouse, rest, ...; use {{ env.X }} for "
        "secrets) or the path of a lakehouse file. Unset: $ICEGROUP_LAKEHOUSE, ICEGROUP_* variables, or ./.lake.",
    )
    name: str | None = Field(
        default=None,
        description="Resource key of this component's lakehouse and prefix of its expiry job (<name>_expire); "
        "default icegroup_<folder>. Two components in one project need two names.",
    )
    key_prefix: list[str] | None = Field(
        default=None,
        description="Replaces the catalog name in front of the assets' keys: [prefix..., namespace, table].",
    )
    assets: dict[str, GroupAssets] = Field(
        default_factory=dict, description="Per group name: source_asset_key and sink_asset_key, set outright."
    )
    asset_group_name: str | None = Field(
        default=None, description="Dagster asset group of every asset; default: the group's name (sources: 'sources')."
    )
    owners: list[str] = Field(
        default_factory=list, description="Owners of every asset: emails or team:name, e.g. [team:data]."
    )
    tags: dict[str, str] = Field(default_factory=dict, description="Tags on every asset, e.g. {domain: orders}.")

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        """Build the groups' definitions with ``icegroup_definitions``, paths read from this component's folder."""
        folder = context.path if context.path.is_dir() else context.path.parent
        return icegroup_definitions(
            self.groups,
            self.lakehouse,
            name=self.name or default_name(folder),
            key_prefix=self.key_prefix,
            assets=self.assets,
            asset_group_name=self.asset_group_name,
            owners=self.owners,
            tags=self.tags,
            base_dir=folder,
        )
