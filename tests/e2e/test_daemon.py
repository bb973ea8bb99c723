"""The Leader sensor under a real Dagster daemon: runs launched as subprocesses, each a cold Spark."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import pytest
import yaml
from dagster_graphql import DagsterGraphQLClient
from dagster_graphql.client.query import LAUNCH_PARTITION_BACKFILL_MUTATION
from pyiceberg.catalog import Catalog

from icegroup.dagster_project.cli.metrics import leader_ticks
from icegroup.dagster_project.runs.tags import ROLE_BORROWER, TAG_GROUP, TAG_ROLE, TAG_WARM
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
    "max_borrowers": 6,  # slots for three Borrower runs of two: a lease per stream, fewer runs than leases
    "borrower_idle_s": 5,
    "warm_borrowers": 0,
}


@contextmanager
def running(tmp_path: Path, group: dict[str, object]) -> Iterator[Path]:
    """`dagster dev` over workspace.yaml with a one-group file; yields ICEGROUP_HOME (its ``port`` file: the UI's)."""
    new_instance(tmp_path / "dagster")
    (tmp_path / "groups.yaml").write_text(yaml.safe_dump({"groups": [group]}))
    append_batches(create_source(load_lakehouse(env=home_env(tmp_path)).catalog(), GROUP["source"]), 2, 30)
    env = dagster_env(tmp_path, tmp_path / "groups.yaml", tmp_path / "dagster")
    with dagster_dev(env, tmp_path / "dev.log") as port:
        (tmp_path / "port").write_text(str(port))
        yield tmp_path


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Path]:
    """The daemon over ``GROUP``, whose Borrowers exit 5 s after their last lease."""
    with running(tmp_path, GROUP) as home:
        yield home


@pytest.fixture
def warm(tmp_path: Path) -> Iterator[Path]:
    """The daemon over ``GROUP`` with the default warm Borrower: one the Leader keeps up with nothing to do."""
    with running(tmp_path, {key: value for key, value in GROUP.items() if key != "warm_borrowers"}) as home:
        yield home


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


def test_by_default_a_new_lease_finds_a_warm_borrower_up_and_a_terminated_one_ends_canceled(warm: Path) -> None:
    lakehouse = load_lakehouse(env=home_env(warm))
    group = load_groups(warm / "groups.yaml")["live"]
    catalog = lakehouse.catalog()
    wait_until(lambda: caught_up(catalog, group.name), 300, warm, "caught up")
    client = DagsterGraphQLClient("127.0.0.1", port_number=int((warm / "port").read_text()))
    wait_until(lambda: ui_answers(client), 120, warm, "the UI answers")
    with dg.DagsterInstance.from_config(str(warm / "dagster")) as instance:

        def borrowers() -> list[dg.DagsterRun]:
            return instance.get_runs(filters=dg.RunsFilter(tags={TAG_GROUP: "live"}))

        wait_until(lambda: len([r for r in borrowers() if not r.is_finished]) == 1, 60, warm, "one warm Borrower")
        (up,) = [run for run in borrowers() if not run.is_finished]
        assert up.tags[TAG_WARM] == "1"
        done = load_state(catalog, group.name).state
        assert done is not None

        def leases_of(run_id: str) -> int:
            return len(instance.all_logs(run_id, of_type=dg.DagsterEventType.ASSET_OBSERVATION))

        before = leases_of(up.run_id)
        append_batches(catalog.load_table(group.source), 1, 30)

        def consumed_again() -> bool:
            state = load_state(catalog, group.name).state
            return state is not None and state.leases_done > done.leases_done and state.is_idle()

        wait_until(consumed_again, 300, warm, "the new append consumed")
        assert leases_of(up.run_id) > before, "the warm run already up took a lease of it"
        assert not status(instance, up.run_id).is_finished, "which stays up, idle"

        client.terminate_run(up.run_id)  # the op runs in the run's own process: the interrupt reaches it there

        wait_until(lambda: status(instance, up.run_id).is_finished, 120, warm, "the terminated run to end")
        assert status(instance, up.run_id).status == dg.DagsterRunStatus.CANCELED
        wait_until(lambda: any(not r.is_finished for r in borrowers()), 60, warm, "the Leader to start another")
    assert verify_group(catalog, group, key="event_id").ok


def status(instance: dg.DagsterInstance, run_id: str) -> dg.DagsterRun:
    """The run as the instance holds it now."""
    run = instance.get_run_by_id(run_id)
    assert run is not None
    return run


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
