"""The Leader sensor under a real Dagster daemon: runs launched as subprocesses, each a cold Spark."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import pytest
import yaml
from dagster_graphql import DagsterGraphQLClient
from dagster_graphql.client.query import LAUNCH_PARTITION_BACKFILL_MUTATION
from pyiceberg.catalog import Catalog

from icegroup.dagster_project.cli.metrics import leader_ticks
from icegroup.dagster_project.runs.tags import ROLE_BORROWER, TAG_GROUP, TAG_ROLE
from icegroup.iceberg.config.groups import load_groups
from icegroup.iceberg.config.lakehouse import load_lakehouse
from icegroup.iceberg.config.rest import ENV_CREDENTIAL
from icegroup.iceberg.store.registry import load_state
from icegroup.iceberg.verify import verify_group
from tests.dagster_dev import dagster_dev, dagster_env, new_instance, ui_answers
from tests.factories import append_batches, create_source
from tests.stack_env import home_env, on_stack, stack_layout

pytestmark = [pytest.mark.demo, pytest.mark.dagster]
GROUP = {
    "name": "live",
    "source": "live.events",
    "sink": "live.events_out",
    "max_borrowers": 3,
    "borrower_idle_s": 5,
}


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Path]:
    """`dagster dev` over workspace.yaml with a one-group file; yields ICEGROUP_HOME (its ``port`` file: the UI's)."""
    new_instance(tmp_path / "dagster")
    (tmp_path / "groups.yaml").write_text(yaml.safe_dump({"groups": [GROUP]}))
    append_batches(create_source(load_lakehouse(env=home_env(tmp_path)).catalog(), GROUP["source"]), 2, 30)
    env = dagster_env(tmp_path, tmp_path / "groups.yaml", tmp_path / "dagster")
    with dagster_dev(env, tmp_path / "dev.log") as port:
        (tmp_path / "port").write_text(str(port))
        yield tmp_path


def test_leader_sensor_drives_borrower_runs_to_caught_up(daemon: Path) -> None:
    lakehouse = load_lakehouse(env=home_env(daemon))
    group = load_groups(daemon / "groups.yaml")["live"]
    catalog = lakehouse.catalog()
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        state = load_state(catalog, group.name).state
        if state is not None and state.leases_done and state.is_idle():
            break
        time.sleep(3)
    else:
        pytest.fail("not caught up in 300 s; see " + str(daemon / "dev.log"))

    assert verify_group(catalog, group, key="event_id").ok
    assert state.leases_done == 3, "3 streams, 3 leases"
    with dg.DagsterInstance.from_config(str(daemon / "dagster")) as instance:

        def borrowers_ended() -> bool:
            return all(r.is_finished for r in instance.get_runs(filters=dg.RunsFilter(tags={TAG_GROUP: "live"})))

        wait_until(borrowers_ended, 60, daemon, "the idle Borrowers to exit")
        runs = instance.get_runs(filters=dg.RunsFilter(tags={TAG_GROUP: "live"}))
        stored = [run_config_and_events(instance, run) for run in runs]
    if lakehouse.rest is not None and (not on_stack() or stack_layout().catalog == "icegroup"):
        secret = os.environ[ENV_CREDENTIAL].split(":", 1)[1]  # icegroup's server signs clients in
        assert all(secret not in text for text in stored), "no run config, tag or event holds the REST credential"
        assert secret not in (daemon / "dev.log").read_text(), "nor the daemon's and runs' log"
    assert 1 <= len(runs) < state.leases_done, "warm Borrowers: fewer runs than leases"
    assert all(r.status == dg.DagsterRunStatus.SUCCESS for r in runs), "an idle Borrower exits cleanly"
    assert all(r.tags[TAG_ROLE] == ROLE_BORROWER and r.tags["dagster/sensor_name"] == "live_leader" for r in runs)

    last = leader_ticks(daemon / "dagster", {group.name: group})[group.name]
    assert last.tick_s is not None, "the Leader sensor's cursor holds its last tick's time"
    assert 0 < last.tick_s < 60
    assert time.time() - last.at_s < 60, "and the instance when it ticked"


def test_a_backfill_launched_through_the_ui_api_replays_the_window(daemon: Path) -> None:
    lakehouse = load_lakehouse(env=home_env(daemon))
    group = load_groups(daemon / "groups.yaml")["live"]
    catalog = lakehouse.catalog()
    wait_until(lambda: caught_up(catalog, group.name), 300, daemon, "caught up")
    window = datetime.now(UTC).strftime("%Y-%m-%d")
    client = DagsterGraphQLClient("127.0.0.1", port_number=int((daemon / "port").read_text()))
    wait_until(lambda: ui_answers(client), 120, daemon, "the UI answers")

    launched = client._execute(
        LAUNCH_PARTITION_BACKFILL_MUTATION,
        {
            "backfillParams": {
                "assetSelection": [{"path": [lakehouse.catalog_name, "live", "events_out"]}],
                "partitionNames": [window],
            }
        },
    )["launchPartitionBackfill"]

    assert launched["__typename"] == "LaunchBackfillSuccess", launched
    backfill = launched["backfillId"]
    with dg.DagsterInstance.from_config(str(daemon / "dagster")) as instance:

        def finished() -> bool:
            runs = instance.get_runs(filters=dg.RunsFilter(tags={"dagster/backfill": backfill}))
            return bool(runs) and all(run.is_finished for run in runs)

        wait_until(finished, 300, daemon, f"backfill {backfill} to finish")
        runs = instance.get_runs(filters=dg.RunsFilter(tags={"dagster/backfill": backfill}))
        checked = [
            e.dagster_event.event_specific_data.check_name
            for e in instance.all_logs(runs[0].run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION)
            if e.dagster_event is not None
        ]
    assert sorted(checked) == ["dead_letters", "exactly_once", "lag"], "a UI backfill of the sink runs its checks"
    assert [run.status for run in runs] == [dg.DagsterRunStatus.SUCCESS]
    # One run for the selection's range (BackfillPolicy.single_run), tagged with the range, here one window.
    tags = runs[0].tags
    assert (tags["dagster/asset_partition_range_start"], tags["dagster/asset_partition_range_end"]) == (window, window)
    head = catalog.load_table(group.sink).current_snapshot()
    assert head is not None
    assert head.summary is not None
    assert head.summary.additional_properties["icegroup.replay"] == window
    assert verify_group(catalog, group, key="event_id").ok


def run_config_and_events(instance: dg.DagsterInstance, run: dg.DagsterRun) -> str:
    """Everything the instance stores for a run, as text: its config, tags and every event with its metadata."""
    events = instance.all_logs(run.run_id)
    return json.dumps(run.run_config, default=str) + json.dumps(run.tags) + "".join(repr(e) for e in events)


def caught_up(catalog: Catalog, group: str) -> bool:
    """The group has committed leases and has nothing open."""
    state = load_state(catalog, group).state
    return state is not None and bool(state.leases_done) and state.is_idle()


def wait_until(predicate: Callable[[], bool], timeout_s: float, daemon: Path, what: str) -> None:
    """Poll until ``predicate()``; fail naming the server log."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(3)
    pytest.fail(f"timed out after {timeout_s:.0f}s waiting for {what}; see {daemon / 'dev.log'}")
