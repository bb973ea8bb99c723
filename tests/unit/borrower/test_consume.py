"""`consume` on a group with nothing to do: it answers from the Leader tick and never starts Spark."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest
from pyiceberg.catalog import Catalog

from icegroup.dagster_project import jobs
from icegroup.dagster_project.cli import main
from icegroup.dagster_project.resources import IcegroupResource
from icegroup.iceberg.config.lakehouse import LakehouseConfig
from icegroup.iceberg.lag import Work, pending_work
from icegroup.iceberg.leader import tick
from icegroup.iceberg.protocol.completion import MAX_PER_TICK
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.liveness import RunState
from icegroup.iceberg.protocol.shards import DAY_MS
from icegroup.iceberg.store.registry import load_state
from icegroup.spark_jobs import session
from tests.consuming import consume
from tests.factories import MakeGroup, append_batches, create_source, no_spark, write_groups
from tests.sink_commits import commit_lease


def consumed_unreconciled(catalog: Catalog, group: GroupConfig) -> None:
    """One source commit, granted and committed to the sink; the registry has not reconciled it yet."""
    append_batches(create_source(catalog, group.source), 1, 9)
    first = tick(catalog, group, lambda _: RunState.MISSING)
    for lease in first.launch:
        commit_lease(catalog, group, first.state, lease)


@pytest.fixture
def cli_home(lake_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The ``icegroup`` command on the test lakehouse, a fresh Dagster home, and no Spark; returns ``tmp_path``.

    A run that asks for its session fails the test (``no_spark``). The JVM's early boot on a thread is
    left out: ``pending_work`` counts a committed but unreconciled lease as data to move, so the command
    and the op boot a JVM that the run then never asks for, and a JVM started here would keep the plain
    lakehouse's jars for every later Spark test in this process.
    """
    monkeypatch.setenv("ICEGROUP_HOME", str(lake_home))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    monkeypatch.setattr(IcegroupResource, "spark", lambda _: no_spark())
    monkeypatch.setattr(session, "start_in_background", lambda lakehouse: None)
    monkeypatch.setattr(jobs, "start_in_background", lambda lakehouse: None)
    return tmp_path


def test_consume_of_a_caught_up_group_returns_without_starting_spark(
    catalog: Catalog, lakehouse: LakehouseConfig, make_group: MakeGroup
) -> None:
    group = make_group(max_borrowers=3)
    consumed_unreconciled(catalog, group)

    lines: list[str] = []
    summary = consume(no_spark, lakehouse, group, "run-1", lambda _: RunState.SUCCEEDED, progress=lines.append)

    assert summary.caught_up
    assert summary.leases == 0
    assert any("caught up" in line for line in lines)


def test_consume_of_an_empty_source_returns_without_starting_spark(
    catalog: Catalog, lakehouse: LakehouseConfig, make_group: MakeGroup
) -> None:
    group = make_group()
    create_source(catalog, group.source)

    assert consume(no_spark, lakehouse, group, "run-1", lambda _: RunState.MISSING, progress=lambda _: None).caught_up


def test_icegroup_consume_with_only_a_committed_lease_to_reconcile_asks_for_no_spark_session(
    catalog: Catalog, make_group: MakeGroup, cli_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    group = make_group()
    consumed_unreconciled(catalog, group)

    assert main(["--groups", str(write_groups(cli_home / "groups.yaml", group)), "consume", group.name]) == 0

    assert "caught up" in capsys.readouterr().out


def test_icegroup_consume_json_prints_the_run_and_the_group(
    catalog: Catalog, make_group: MakeGroup, cli_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    group = make_group()
    create_source(catalog, group.source)

    assert main(["--groups", str(write_groups(cli_home / "groups.yaml", group)), "consume", group.name, "--json"]) == 0

    printed = json.loads(capsys.readouterr().out)
    assert printed["success"] is True
    assert printed["group"]["group"] == group.name


def test_icegroup_consume_of_an_idle_group_makes_no_run_and_never_imports_dagster(
    catalog: Catalog, make_group: MakeGroup, lake_home: Path, tmp_path: Path
) -> None:
    group = make_group(window_start=datetime.now(UTC).date())
    consumed_unreconciled(catalog, group)
    assert tick(catalog, group, lambda _: RunState.SUCCEEDED).caught_up
    groups = write_groups(tmp_path / "groups.yaml", group)
    script = (
        "import sys\n"
        "from icegroup.dagster_project.cli import main\n"
        f"code = main(['--groups', {str(groups)!r}, 'consume', {group.name!r}])\n"
        "print('exit', code, 'dagster' in sys.modules, 'pyspark' in sys.modules)\n"
    )
    env = {**os.environ, "ICEGROUP_HOME": str(lake_home), "DAGSTER_HOME": str(tmp_path / "dagster")}

    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)

    assert done.returncode == 0, done.stderr
    assert f"group {group.name}: nothing to consume; no run started" in done.stdout
    assert done.stdout.strip().endswith("exit 0 False False"), "no Dagster import, not even PySpark's"
    assert not (tmp_path / "dagster").exists() or not any((tmp_path / "dagster").iterdir()), "no run recorded"


def test_consume_reports_every_due_window_before_it_calls_the_group_caught_up(
    catalog: Catalog, lakehouse: LakehouseConfig, make_group: MakeGroup
) -> None:
    """A tick reports at most MAX_PER_TICK windows; consume goes on ticking rather than leave the rest to a next run."""
    group = make_group(window_start=datetime.now(UTC).date() - timedelta(days=2 * MAX_PER_TICK + 10))
    consumed_unreconciled(catalog, group)
    state = load_state(catalog, group.name).state
    assert state is not None
    assert state.windows_complete_through_ms is not None, "the first tick reported its MAX_PER_TICK windows"
    today_ms = (datetime.now(UTC).date().toordinal() - date(1970, 1, 1).toordinal()) * DAY_MS
    reported: list[int] = []

    summary = consume(
        no_spark,
        lakehouse,
        group,
        "run-1",
        lambda _: RunState.SUCCEEDED,
        on_tick=lambda result: reported.extend(result.complete),
        progress=print,
    )

    assert summary.caught_up
    assert summary.ticks >= 2, "more windows were due than one tick reports"
    assert reported == list(range(state.windows_complete_through_ms, today_ms, DAY_MS)), "every finished day, once"
    assert pending_work(catalog, group) is Work.NONE


def test_icegroup_consume_with_only_windows_to_report_makes_a_run_without_a_jvm(
    catalog: Catalog,
    make_group: MakeGroup,
    cli_home: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    group = make_group(window_start=datetime.now(UTC).date() - timedelta(days=2 * MAX_PER_TICK + 10))
    consumed_unreconciled(catalog, group)
    assert tick(catalog, group, lambda _: RunState.SUCCEEDED).more_windows_due
    assert pending_work(catalog, group) is Work.WINDOWS
    started: list[LakehouseConfig] = []
    monkeypatch.setattr(session, "start_in_background", started.append)  # the command's early boot
    monkeypatch.setattr(jobs, "start_in_background", started.append)  # the consume op's
    groups = write_groups(cli_home / "groups.yaml", group)

    assert main(["--groups", str(groups), "consume", group.name, "--json"]) == 0

    assert json.loads(capsys.readouterr().out)["run_id"] is not None, "the windows are reported by a run"
    assert started == [], "no JVM for a run that only reports windows"
    assert pending_work(catalog, group) is Work.NONE
