"""The icegroup command: consume through a Dagster instance, describe and list, clear errors."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg
import pytest
import yaml
from pyiceberg.catalog import Catalog
from pyspark.sql import SparkSession

from icegroup.dagster_project.cli import main
from icegroup.dagster_project.runs.tags import TAG_GROUP
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.verify import verify_group
from tests.factories import MakeGroup, append_batches, create_source

pytestmark = [pytest.mark.spark, pytest.mark.dagster]


@pytest.fixture
def groups_file(tmp_path: Path, make_group: MakeGroup) -> Path:
    """A groups YAML with this test's group; its windows begin five days back, so some are complete already."""
    five_days_back = (datetime.now(UTC) - timedelta(days=5)).date()
    group = make_group(shard_caps={"max_files": 2}, lease_max_shards=1, window_start=five_days_back)
    path = tmp_path / "groups.yaml"
    path.write_text(
        yaml.safe_dump({"groups": [group.model_dump(mode="json", exclude_defaults=True) | {"name": group.name}]})
    )
    return path


def test_consume_until_caught_up_runs_through_the_instance(
    spark: SparkSession,
    env: Path,
    groups_file: Path,
    catalog: Catalog,
    make_group: MakeGroup,
    capsys: pytest.CaptureFixture[str],
) -> None:
    group = make_group()
    append_batches(create_source(catalog, group.source), 5, 12)

    assert main(["--groups", str(groups_file), "consume", group.name, "--until-caught-up"]) == 0

    assert verify_group(catalog, group, key="event_id").ok
    out = capsys.readouterr().out
    assert "success" in out
    assert "lag 0 snapshots / 0 rows" in out

    assert main(["--groups", str(groups_file), "describe", group.name, "--plot"]) == 0
    plotted = capsys.readouterr().out.split("lag after each lease (rows not yet committed)")[1]
    leases, windows = plotted.split(f"rows per window in {group.sink} now")
    lags = [int(line.rsplit(" ", 1)[1].replace(",", "")) for line in leases.splitlines()[1:] if line.strip()]
    assert lags, "a bar per lease the consume observed"
    assert all(0 <= lag < 60 for lag in lags), f"each lease committed some of the 60 rows before its lag: {lags}"
    assert "█" in leases
    assert windows.rstrip().endswith("  60"), "the sink's one window holds the 60 rows"
    with dg.DagsterInstance.get() as instance:
        runs = instance.get_runs(filters=dg.RunsFilter(tags={TAG_GROUP: group.name}))
        assert [r.status for r in runs] == [dg.DagsterRunStatus.SUCCESS]
        sink_key = dg.AssetKey([catalog.name, *group.sink.split(".")])
        observed = [r.asset_observation for r in instance.fetch_observations(sink_key, limit=100).records]
        empty = sorted(o.partition or "" for o in observed if o is not None and o.metadata.get("empty"))
        assert len(empty) == 5, "the five complete windows before today's are observed complete and empty"
        records = instance.fetch_materializations(sink_key, limit=100).records
        assert not records, "an empty window is no materialization; today's is still open"


def test_consume_without_until_caught_up_does_one_round(
    spark: SparkSession, env: Path, groups_file: Path, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group()
    append_batches(create_source(catalog, group.source), 5, 12)

    assert main(["--groups", str(groups_file), "consume", group.name]) == 0

    check = verify_group(catalog, group, key="event_id")
    assert 0 < check.found < check.expected
    assert check.duplicates == 0


def test_describe_and_list_report_lag_as_json(
    env: Path,
    groups_file: Path,
    catalog: Catalog,
    make_group: MakeGroup,
    capsys: pytest.CaptureFixture[str],
) -> None:
    group = make_group()
    append_batches(create_source(catalog, group.source), 3, 9)

    assert main(["--groups", str(groups_file), "describe", group.name, "--json"]) == 0
    described = json.loads(capsys.readouterr().out)
    assert described["lag_rows"] == 27
    assert described["lag_snapshots"] == 9
    assert sorted(s["stream"] for s in described["streams"]) == [
        "0:region=apac",
        "0:region=eu",
        "0:region=us",
    ]
    assert main(["--groups", str(groups_file), "list", "--json"]) == 0
    (listed,) = json.loads(capsys.readouterr().out)
    assert listed["group"] == group.name
    assert listed["lag_rows"] == 27


def test_unknown_group_and_missing_source_are_clear_errors(
    env: Path, groups_file: Path, make_group: MakeGroup, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--groups", str(groups_file), "describe", "nope"]) == 2
    assert "group 'nope' is not defined" in capsys.readouterr().err
    assert main(["--groups", str(groups_file), "consume", make_group().name]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_bad_group_file_names_the_field(env: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("groups:\n  - {name: g, source: a.b, sink: a.c, max_borrowers: 0}\n")
    assert main(["--groups", str(path), "list"]) == 2
    assert "group 'g': max_borrowers" in capsys.readouterr().err


@pytest.fixture
def consumed_by_cli(
    spark: SparkSession, env: Path, groups_file: Path, catalog: Catalog, make_group: MakeGroup
) -> GroupConfig:
    """The test's group over 3 appends of 12 events, consumed until caught up by ``icegroup consume``."""
    group = make_group()
    append_batches(create_source(catalog, group.source), 3, 12)
    assert main(["--groups", str(groups_file), "consume", group.name, "--until-caught-up"]) == 0
    return group


def test_replay_previews_the_plan_and_replay_execute_replaces_the_window_through_the_instance(
    env: Path,
    groups_file: Path,
    catalog: Catalog,
    consumed_by_cli: GroupConfig,
    capsys: pytest.CaptureFixture[str],
) -> None:
    group = consumed_by_cli
    window = datetime.now(UTC).strftime("%Y-%m-%d")
    capsys.readouterr()

    assert main(["--groups", str(groups_file), "replay", group.name, "--window", window, "--json"]) == 0
    (plan,) = json.loads(capsys.readouterr().out)
    assert plan["window"] == window
    assert (plan["source_rows"], plan["sink_rows_now"], plan["complete"]) == (36, 36, True)

    assert main(["--groups", str(groups_file), "replay", group.name, "--window", window, "--execute", "--json"]) == 0
    (done,) = json.loads(capsys.readouterr().out)
    assert (done["rows_in"], done["rows_out"], done["rows_replaced"]) == (36, 36, 36)
    with dg.DagsterInstance.from_config(str(env)) as instance:
        run = instance.get_run_by_id(done["run_id"])
        assert run is not None
        assert run.tags.get("dagster/partition") == window
    assert verify_group(catalog, group, key="event_id").ok


def test_replay_names_the_windows_it_needs(
    env: Path, groups_file: Path, make_group: MakeGroup, capsys: pytest.CaptureFixture[str]
) -> None:
    group = make_group()

    assert main(["--groups", str(groups_file), "replay", group.name]) == 2
    assert "name the windows: --window 2026-01-31 (repeatable), or --from T --to T" in capsys.readouterr().err
    assert main(["--groups", str(groups_file), "replay", group.name, "--window", "31/01/2026"]) == 2
    assert "'31/01/2026' is not a day window; write it like 2026-01-31" in capsys.readouterr().err
