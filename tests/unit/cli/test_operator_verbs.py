"""Operator verbs: pause, resume, checkpoints and ``describe --as-of``, on a real catalog (no Spark)."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime

import pyarrow as pa
import pytest
from pyiceberg.catalog import Catalog

from icegroup.dagster_project.cli import Exit, main
from icegroup.iceberg.describe import describe_group
from icegroup.iceberg.errors import NotCaughtUp, UsageError
from icegroup.iceberg.leader import TickResult, tick
from icegroup.iceberg.pause import set_paused
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.liveness import RunState
from icegroup.iceberg.protocol.sink_commit import replay_properties
from icegroup.iceberg.store.registry import load_state
from tests.consuming import consume
from tests.factories import BORROWER_RUN, no_spark
from tests.sink_commits import SINK_SCHEMA, commit_lease


def run(catalog: Catalog, group: GroupConfig, seen: RunState = RunState.RUNNING) -> TickResult:
    """One tick that grants to a Borrower run and sees every Borrower run as ``seen``."""
    return tick(catalog, group, lambda _: seen, owner_run_id=BORROWER_RUN)


def test_a_paused_group_grants_nothing_new_while_its_lease_in_flight_finishes(
    catalog: Catalog, group: GroupConfig
) -> None:
    first = run(catalog, group)
    [held] = first.launch
    set_paused(catalog, group, paused=True)

    commit_lease(catalog, group, first.state, held)
    paused = run(catalog, group)

    assert paused.paused
    assert paused.launch == [], "the finished lease is not followed by a new one"
    assert paused.state.leases == {}
    assert len(paused.state.shards) == 6 - 1, "planning goes on, so lag stays visible"
    assert describe_group(catalog, group).status.startswith(f"paused (icegroup resume {group.name} continues it)")

    set_paused(catalog, group, paused=False)
    resumed = run(catalog, group)

    assert not resumed.paused
    assert len(resumed.launch) == 1
    assert resumed.state.streams[first.state.shards[held.shard_ids[0]].stream].committed_shards == 1


def test_a_dead_borrowers_lease_is_still_granted_again_while_paused(catalog: Catalog, group: GroupConfig) -> None:
    [held] = run(catalog, group).launch
    set_paused(catalog, group, paused=True)

    again = run(catalog, group, seen=RunState.FAILED)

    assert [(lease.lease_id, lease.attempt) for lease in again.launch] == [(held.lease_id, 1)]


def test_consume_of_a_paused_group_stops_with_the_remedy(
    catalog: Catalog, group: GroupConfig, lakehouse: object
) -> None:
    first = run(catalog, group)
    commit_lease(catalog, group, first.state, first.launch[0])
    set_paused(catalog, group, paused=True)

    with pytest.raises(NotCaughtUp, match=rf"is paused; `icegroup resume {group.name}` continues it"):
        consume(no_spark, lakehouse, group, "run-1", lambda _: RunState.SUCCEEDED, progress=lambda _: None)  # type: ignore[arg-type]


def test_a_group_that_never_ticked_cannot_be_paused(catalog: Catalog, group: GroupConfig) -> None:
    with pytest.raises(UsageError, match="has no registry yet"):
        set_paused(catalog, group, paused=True)

    assert load_state(catalog, group.name).table is None, "nothing was created"


def test_pause_and_resume_from_the_cli_say_what_changed(
    catalog: Catalog, group: GroupConfig, cli: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    run(catalog, group)

    assert main([*cli, "pause", group.name]) == Exit.OK
    assert main([*cli, "pause", group.name]) == Exit.OK
    assert main([*cli, "resume", group.name]) == Exit.OK
    assert main([*cli, "resume", group.name]) == Exit.OK

    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        f"group {group.name}: paused; 1 leases in flight finish; nothing new is granted",
        f"group {group.name}: already paused; 1 leases in flight finish; nothing new is granted",
        f"group {group.name}: resumed; the next Leader tick grants again",
        f"group {group.name}: not paused; the next Leader tick grants again",
    ]


def test_checkpoints_list_every_commit_with_its_run_lease_range_and_window(
    catalog: Catalog, group: GroupConfig, cli: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    first = run(catalog, group)
    [held] = first.launch
    commit_lease(catalog, group, first.state, held, run_id="run-42")
    shard = first.state.shards[held.shard_ids[0]]

    assert main([*cli, "checkpoints", group.name, "--json"]) == Exit.OK
    [point] = json.loads(capsys.readouterr().out)

    assert point["run_id"] == "run-42"
    assert point["lease"] == f"{held.lease_id}#0"
    assert point["epoch"] == 0
    assert point["stream"] == shard.stream
    assert point["source_range"] == f"start..{shard.to_snapshot}"
    assert point["rows"] == shard.rows
    window = point["window"]
    assert main([*cli, "checkpoints", group.name, "--window", window]) == Exit.OK
    assert "1 checkpoints of group" in capsys.readouterr().out
    assert main([*cli, "checkpoints", group.name, "--window", "2024-01-01"]) == Exit.OK
    assert "0 checkpoints of group" in capsys.readouterr().out

    replayed = replay_properties(group.name, group.source, window, 3, 0, [], "run-43")
    catalog.load_table(group.sink).append(pa.Table.from_pylist([], schema=SINK_SCHEMA.as_arrow()), replayed)
    assert main([*cli, "checkpoints", group.name, "--window", window, "--json"]) == Exit.OK
    points = json.loads(capsys.readouterr().out)
    assert [(p["kind"], p["lease"], p["run_id"]) for p in points] == [
        ("commit", f"{held.lease_id}#0", "run-42"),
        ("replay", "replay generation 3", "run-43"),
    ]


def test_checkpoints_of_a_window_that_is_not_one_name_the_form(
    group: GroupConfig, cli: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*cli, "checkpoints", group.name, "--window", "yesterday"]) == Exit.ERROR

    assert "--window: 'yesterday' is not a day window; write it like 2026-01-31" in capsys.readouterr().err


def test_describe_as_of_shows_who_held_which_lease_then(
    catalog: Catalog, group: GroupConfig, cli: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    first = run(catalog, group)
    [held] = first.launch
    time.sleep(0.01)
    then = datetime.now(tz=UTC).isoformat()
    time.sleep(0.01)
    commit_lease(catalog, group, first.state, held)
    run(catalog, group)

    assert main([*cli, "describe", group.name, "--as-of", then, "--json"]) == Exit.OK
    past = json.loads(capsys.readouterr().out)
    assert main([*cli, "describe", group.name, "--json"]) == Exit.OK
    now = json.loads(capsys.readouterr().out)

    assert [(h["lease_id"], h["attempt"]) for h in past["holds"]] == [(held.lease_id, 0)]
    assert past["historical"] is True
    assert sum(s["committed_rows"] for s in past["streams"]) == 0
    assert held.lease_id not in {h["lease_id"] for h in now["holds"]}
    assert sum(s["committed_rows"] for s in now["streams"]) == first.state.shards[held.shard_ids[0]].rows
    assert main([*cli, "describe", group.name, "--as-of", then]) == Exit.OK
    text = capsys.readouterr().out
    assert text.startswith("as of ")
    assert f"lease {held.lease_id}#0" in text


@pytest.mark.parametrize(
    ("as_of", "message"),
    [
        ("2020-01-01T00:00:00Z", "had no registry yet at 2020-01-01T00:00:00+00:00; pick a later time"),
        ("last tuesday", "--as-of: 'last tuesday' is not an ISO-8601 time"),
    ],
)
def test_describe_as_of_a_time_it_cannot_show_says_why(
    catalog: Catalog, group: GroupConfig, cli: list[str], capsys: pytest.CaptureFixture[str], as_of: str, message: str
) -> None:
    run(catalog, group)

    assert main([*cli, "describe", group.name, "--as-of", as_of]) == Exit.ERROR

    assert message in capsys.readouterr().err
