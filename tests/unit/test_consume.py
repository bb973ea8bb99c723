"""`consume` on a group with nothing to do: it answers from the Leader tick and never starts Spark."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyiceberg.catalog import Catalog

from dagster_project.cli import main
from dagster_project.resources import IcegroupResource
from iceberg.groups import GroupConfig
from iceberg.lakehouse import LakehouseConfig
from iceberg.leader import tick
from iceberg.protocol.liveness import RunState
from spark_jobs.consume import consume
from tests.factories import append_batches, create_source, no_spark
from tests.integration.helpers import write_groups
from tests.sink_commits import commit_lease


def test_consume_of_a_caught_up_group_returns_without_starting_spark(
    catalog: Catalog, lakehouse: LakehouseConfig, make_group: type[GroupConfig]
) -> None:
    group = make_group(max_borrowers=3)
    append_batches(create_source(catalog, group.source), 1, 9)
    first = tick(catalog, group, lambda _: RunState.MISSING)
    for lease in first.launch:
        commit_lease(catalog, group, first.state, lease)

    lines: list[str] = []
    summary = consume(no_spark, lakehouse, group, "run-1", lambda _: RunState.SUCCEEDED, progress=lines.append)

    assert summary.caught_up
    assert summary.leases == 0
    assert any("caught up" in line for line in lines)


def test_consume_of_an_empty_source_returns_without_starting_spark(
    catalog: Catalog, lakehouse: LakehouseConfig, make_group: type[GroupConfig]
) -> None:
    group = make_group()
    create_source(catalog, group.source)

    assert consume(no_spark, lakehouse, group, "run-1", lambda _: RunState.MISSING, progress=lambda _: None).caught_up


def test_icegroup_consume_with_nothing_to_do_starts_no_spark(
    catalog: Catalog,
    make_group: type[GroupConfig],
    lake_home: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    group = make_group()
    append_batches(create_source(catalog, group.source), 1, 9)
    first = tick(catalog, group, lambda _: RunState.MISSING)
    for lease in first.launch:
        commit_lease(catalog, group, first.state, lease)
    monkeypatch.setenv("ICEGROUP_HOME", str(lake_home))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    monkeypatch.setattr(IcegroupResource, "spark", lambda _: no_spark())

    assert main(["--groups", str(write_groups(tmp_path / "groups.yaml", group)), "consume", group.name]) == 0

    assert "caught up" in capsys.readouterr().out


def test_icegroup_consume_json_prints_the_run_and_the_group(
    catalog: Catalog,
    make_group: type[GroupConfig],
    lake_home: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    group = make_group()
    create_source(catalog, group.source)
    monkeypatch.setenv("ICEGROUP_HOME", str(lake_home))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))

    assert main(["--groups", str(write_groups(tmp_path / "groups.yaml", group)), "consume", group.name, "--json"]) == 0

    printed = json.loads(capsys.readouterr().out)
    assert printed["success"] is True
    assert printed["group"]["group"] == group.name
