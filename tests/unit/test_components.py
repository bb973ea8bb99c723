"""icegroup_definitions in a user's project: it merges with their definitions, names what they choose, warns nothing."""

from __future__ import annotations

import warnings
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from icegroup.dagster_project.components import default_name, icegroup_definitions
from icegroup.dagster_project.definitions import defs
from icegroup.iceberg.errors import ConfigError
from icegroup.iceberg.protocol.group import GroupConfig

GROUPS: list[dict[str, Any]] = [
    {"name": "orders_clean", "source": "raw.orders", "sink": "clean.orders"},
    {"name": "orders_daily", "source": "clean.orders", "sink": "clean.orders_daily", "schedule": "0 2 * * *"},
]


def lake(tmp_path: Path, name: str = "lake") -> dict[str, str]:
    """An inline lakehouse whose SQLite catalog does not exist yet (nothing here may create it)."""
    return {"catalog_name": name, "catalog_uri": f"sqlite:///{name}/catalog.db", "warehouse": f"{name}/warehouse"}


def test_the_groups_merge_with_a_projects_own_definitions_around_its_source_asset(tmp_path: Path) -> None:
    raw_orders = dg.AssetSpec(["raw", "orders"], description="Orders, written by the shop.")

    merged = dg.Definitions.merge(
        dg.Definitions(assets=[raw_orders]),
        icegroup_definitions(
            GROUPS,
            lake(tmp_path),
            name="shop",
            assets={"orders_clean": {"source_asset_key": ["raw", "orders"]}},
            owners=["team:data"],
            tags={"domain": "orders"},
            base_dir=tmp_path,
        ),
    )
    merged.get_repository_def().load_all_definitions()

    graph = merged.resolve_asset_graph()
    clean, daily = dg.AssetKey(["lake", "clean", "orders"]), dg.AssetKey(["lake", "clean", "orders_daily"])
    assert graph.get(clean).parent_keys == {dg.AssetKey(["raw", "orders"])}, "the sink reads the user's asset"
    assert graph.get(daily).parent_keys == {clean}, "a chained group reads the first group's sink"
    assert dg.AssetKey(["lake", "raw", "orders"]) not in graph.get_all_asset_keys(), "no second source asset"
    sink = merged.resolve_assets_def(clean)
    assert list(sink.owners_by_key[clean]) == ["team:data"]
    assert {"domain": "orders", "icegroup/group": "orders_clean"}.items() <= sink.tags_by_key[clean].items()
    assert set(merged.resources or {}) == {"shop"}
    assert merged.resolve_job_def("shop_expire") is not None
    assert merged.resolve_schedule_def("shop_expire_schedule").job_name == "shop_expire"
    assert merged.resolve_sensor_def("orders_clean_leader").job_name == "orders_clean_borrower"
    assert merged.resolve_schedule_def("orders_daily_schedule").job_name == "orders_daily_consume"
    assert not (tmp_path / "lake").exists(), "loading the definitions creates no lake"


def test_two_sets_of_groups_on_two_lakes_live_in_one_project(tmp_path: Path) -> None:
    first = icegroup_definitions(GROUPS[:1], lake(tmp_path, "one"), name="lake_one", base_dir=tmp_path)
    second = icegroup_definitions(
        [{"name": "events_clean", "source": "raw.events", "sink": "clean.events"}],
        lake(tmp_path, "two"),
        name="lake_two",
        key_prefix=["two"],
        assets={"events_clean": {"sink_asset_key": ["events", "clean"]}},
        asset_group_name="events",
        base_dir=tmp_path,
    )

    merged = dg.Definitions.merge(first, second)
    merged.get_repository_def().load_all_definitions()

    assert set(merged.resources or {}) == {"lake_one", "lake_two"}
    assert {j.name for j in merged.get_repository_def().get_all_jobs() if j.name.endswith("_expire")} == {
        "lake_one_expire",
        "lake_two_expire",
    }
    graph = merged.resolve_asset_graph()
    events = dg.AssetKey(["events", "clean"])
    assert graph.get(events).parent_keys == {dg.AssetKey(["two", "raw", "events"])}
    assert merged.resolve_assets_def(events).group_names_by_key[events] == "events"


def test_every_job_runs_its_op_in_the_runs_own_process(tmp_path: Path) -> None:
    following = [GROUPS[0], {**GROUPS[1], "follow_upstream": True}]
    built = icegroup_definitions(following, lake(tmp_path), name="shop", base_dir=tmp_path)

    executors = {job.name: job.executor_def for job in built.get_repository_def().get_all_jobs()}

    ours = {name: executor for name, executor in executors.items() if not name.startswith("__")}
    roles = ("borrower", "consume", "follow", "canary", "replay")
    assert {f"orders_clean_{role}" for role in roles if role != "follow"} | {
        "orders_daily_follow",
        "shop_expire",
    } <= set(ours)
    assert {name for name, executor in ours.items() if executor is not dg.in_process_executor} == set()


def test_building_the_definitions_emits_no_warning(tmp_path: Path) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        built = icegroup_definitions(GROUPS, lake(tmp_path), owners=["team:data"], base_dir=tmp_path)
        built.get_repository_def().load_all_definitions()
        dg.Definitions.merge(built, dg.Definitions()).get_repository_def().load_all_definitions()

    assert [str(w.message) for w in caught] == []


def test_the_packaged_location_loads_without_a_warning_or_a_new_lake(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for variable in ("ICEGROUP_LAKEHOUSE", "ICEGROUP_CATALOG_URI", "ICEGROUP_WAREHOUSE", "ICEGROUP_GROUPS"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("ICEGROUP_HOME", str(tmp_path))

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        packaged = defs()
        packaged.get_repository_def().load_all_definitions()

    assert [str(w.message) for w in caught] == []
    assert packaged.resolve_sensor_def("demo_leader").job_name == "demo_borrower"
    assert list(tmp_path.iterdir()) == [], "no lake is created to read the sources' first commits"


def test_a_source_with_no_lake_yet_gets_partitions_from_today(tmp_path: Path) -> None:
    built = icegroup_definitions(GROUPS[:1], lake(tmp_path), base_dir=tmp_path)

    sink = built.resolve_assets_def(dg.AssetKey(["lake", "clean", "orders"]))

    assert isinstance(sink.partitions_def, dg.DailyPartitionsDefinition)
    assert sink.partitions_def.get_partition_keys() == [datetime.now(UTC).date().isoformat()]


def test_groups_and_lakehouse_files_are_read_from_the_base_folder(tmp_path: Path) -> None:
    (tmp_path / "groups.yaml").write_text("groups:\n  - {name: orders_clean, source: raw.orders, sink: clean.orders}\n")
    (tmp_path / "lakehouse.yaml").write_text("catalog_name: files\ncatalog_uri: sqlite:///l/c.db\nwarehouse: l/w\n")

    built = icegroup_definitions("groups.yaml", "lakehouse.yaml", base_dir=tmp_path)

    assert built.resolve_assets_def(dg.AssetKey(["files", "clean", "orders"])) is not None
    assert built.resolve_job_def("icegroup_expire") is not None


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"assets": {"orders": {"source_asset_key": ["raw", "orders"]}}}, "assets: orders is not a group here"),
        ({"name": "two words"}, "name: 'two words' is not a Dagster resource key"),
        ({"lakehouse": "missing.yaml"}, "lakehouse: .*missing.yaml does not exist"),
        ({"lakehouse": {"catalog_uri": "sqlite:///c.db"}}, "lakehouse: .*warehouse: a SQL catalog needs its warehouse"),
        ({"groups": [{"name": "Bad", "source": "raw.orders", "sink": "clean.orders"}]}, "group 'Bad': name: use lower"),
        ({"groups": "nowhere.yaml"}, "nowhere.yaml does not exist"),
    ],
)
def test_bad_input_is_an_error_naming_the_field(tmp_path: Path, arguments: dict[str, Any], message: str) -> None:
    given: dict[str, Any] = {"groups": GROUPS[:1], "lakehouse": lake(tmp_path), **arguments}
    groups, lakehouse = given.pop("groups"), given.pop("lakehouse")

    with pytest.raises(ConfigError, match=message):
        icegroup_definitions(groups, lakehouse, base_dir=tmp_path, **given)


def test_a_components_default_name_is_its_folders() -> None:
    assert default_name(Path("/p/defs/Orders-Lake")) == "icegroup_orders_lake"


def test_group_configs_are_taken_as_they_are_and_an_unset_window_start_stays_unset(tmp_path: Path) -> None:
    group = GroupConfig(name="orders_clean", source="raw.orders", sink="clean.orders", replay_window="hour")

    built = icegroup_definitions([group], lake(tmp_path), base_dir=tmp_path)

    sink = built.resolve_assets_def(dg.AssetKey(["lake", "clean", "orders"]))
    assert isinstance(sink.partitions_def, dg.HourlyPartitionsDefinition)
    first = sink.partitions_def.get_first_partition_key()
    assert first == f"{datetime.now(UTC).date().isoformat()}-00:00", "from today, not from the field's default"
