"""``icegroup dead-letters`` and ``icegroup redrive`` on the test lakehouse (no Spark, no Dagster runs)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.catalog import Catalog

from icegroup.dagster_project.cli import main
from icegroup.iceberg.leader import tick
from icegroup.iceberg.protocol.dead_letters import PARKED, REDRIVEN, STOPPED, DeadLetter
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.liveness import RunState
from icegroup.iceberg.store.dead_letters import latest, open_letters, record
from icegroup.iceberg.store.dead_rows import ISOLATED, DeadRow, latest_rows, record_rows
from icegroup.iceberg.store.dead_rows import REDRIVEN as REDRIVEN_ROW
from tests.factories import MakeDeadLetter, MakeGroup, append_batches, create_source, write_groups
from tests.sink_commits import commit_lease

# What the listing shows of every letter below; spelled out because the assertions spell it out.
LISTED: dict[str, Any] = {
    "lease_id": "fedcba9876543210",
    "attempt": 2,
    "error": "ZeroDivisionError: division by zero",
    "from_snapshot": 101,
    "to_snapshot": 103,
}


@pytest.fixture
def group(make_group: MakeGroup) -> GroupConfig:
    return make_group()


@pytest.fixture
def groups_file(tmp_path: Path, group: GroupConfig) -> Path:
    """A groups YAML with this test's group."""
    return write_groups(tmp_path / "groups.yaml", group)


@pytest.fixture(autouse=True)
def env(lake_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI finds the session's lakehouse through ICEGROUP_HOME and nothing else."""
    monkeypatch.setenv("ICEGROUP_HOME", str(lake_home))
    for var in ("ICEGROUP_LAKEHOUSE", "ICEGROUP_CATALOG_URI", "ICEGROUP_WAREHOUSE", "ICEGROUP_GROUPS"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def letters(catalog: Catalog, group: GroupConfig, make_dead_letter: MakeDeadLetter) -> list[DeadLetter]:
    """One parked and one stopped shard, and one that was parked and re-driven already."""
    recorded = [
        make_dead_letter("s1", PARKED, stream="0/region=eu", at_ms=1_000, **LISTED),
        make_dead_letter("s2", STOPPED, stream="0/region=us", at_ms=1_000, **LISTED),
        make_dead_letter("s3", PARKED, stream="0/region=apac", at_ms=1_000, **LISTED),
    ]
    record(catalog, group.name, recorded)
    record(catalog, group.name, [make_dead_letter("s3", REDRIVEN, stream="0/region=apac", at_ms=2_000, **LISTED)])
    return recorded


def cli(groups_file: Path, *args: str) -> int:
    return main(["--groups", str(groups_file), *args])


def test_dead_letters_lists_each_shards_latest_state_as_json(
    groups_file: Path, group: GroupConfig, letters: list[DeadLetter], capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli(groups_file, "dead-letters", group.name, "--json") == 0

    rows = sorted(json.loads(capsys.readouterr().out), key=lambda row: row["shard"])
    assert rows == [
        {
            "shard": shard,
            "stream": stream,
            "state": state,
            "from_snapshot": "101",
            "to_snapshot": "103",
            "lease_id": "fedcba9876543210",
            "attempt": 2,
            "error": "ZeroDivisionError: division by zero",
        }
        for shard, stream, state in (
            ("s1", "0/region=eu", PARKED),
            ("s2", "0/region=us", STOPPED),
            ("s3", "0/region=apac", REDRIVEN),
        )
    ]


def test_dead_letters_of_a_group_without_any_is_an_empty_list(
    groups_file: Path, group: GroupConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli(groups_file, "dead-letters", group.name, "--json") == 0

    assert json.loads(capsys.readouterr().out) == []


def test_dead_letters_as_a_table(
    groups_file: Path, group: GroupConfig, letters: list[DeadLetter], capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli(groups_file, "dead-letters", group.name) == 0

    header, *lines = capsys.readouterr().out.splitlines()
    assert header.split() == ["SHARD", "STREAM", "STATE", "SOURCE_SNAPSHOTS", "LEASE", "ERROR"]
    assert sorted(line.split()[:3] for line in lines) == [
        ["s1", "0/region=eu", PARKED],
        ["s2", "0/region=us", STOPPED],
        ["s3", "0/region=apac", REDRIVEN],
    ]


@pytest.mark.parametrize("shard", ["nope", "s3"], ids=["unknown", "already-redriven"])
def test_redrive_of_a_shard_that_is_not_open_is_an_error_naming_it_and_dead_letters(
    catalog: Catalog,
    groups_file: Path,
    group: GroupConfig,
    letters: list[DeadLetter],
    capsys: pytest.CaptureFixture[str],
    shard: str,
) -> None:
    before = latest(catalog, group.name)

    assert cli(groups_file, "redrive", group.name, "--shard", "s1", "--shard", shard) == 2

    err = capsys.readouterr().err
    assert err.startswith("icegroup: error: ")
    assert f"shard(s) [{shard!r}] of group {group.name!r} are not parked or stopped" in err
    assert f"`icegroup dead-letters {group.name}`" in err
    assert latest(catalog, group.name) == before  # not even the open shard named with it is released


def test_redrive_of_one_shard_releases_only_it_then_redrive_releases_the_rest(
    catalog: Catalog,
    groups_file: Path,
    group: GroupConfig,
    letters: list[DeadLetter],
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli(groups_file, "redrive", group.name, "--shard", "s1") == 0
    assert capsys.readouterr().out.splitlines() == [
        "would re-drive: shard s1 (stream 0/region=eu)",
        f"preview: nothing changed; `icegroup redrive {group.name} --execute` re-drives 1 shard(s)",
    ]
    assert sorted(open_letters(catalog, group.name)) == ["s1", "s2"], "a preview releases nothing"

    assert cli(groups_file, "redrive", group.name, "--shard", "s1", "--execute") == 0

    assert capsys.readouterr().out.splitlines() == [
        "re-driven: shard s1 (stream 0/region=eu)",
        "1 shard(s) re-driven; the next Leader tick grants them again",
    ]
    assert list(open_letters(catalog, group.name)) == ["s2"]

    assert cli(groups_file, "redrive", group.name, "--execute") == 0

    assert capsys.readouterr().out.splitlines() == [
        "re-driven: shard s2 (stream 0/region=us)",
        "1 shard(s) re-driven; the next Leader tick grants them again",
    ]
    assert open_letters(catalog, group.name) == {}
    assert {d.action for d in latest(catalog, group.name).values()} == {REDRIVEN}


def test_redrive_with_nothing_open_releases_nothing(
    groups_file: Path, group: GroupConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli(groups_file, "redrive", group.name, "--execute") == 0

    assert capsys.readouterr().out.splitlines() == [
        f"group {group.name}: nothing to re-drive: no shard is parked or stopped, and no isolated row waits"
    ]


@pytest.mark.parametrize("command", ["dead-letters", "redrive"])
def test_an_undefined_group_is_an_error_listing_the_defined_ones(
    groups_file: Path, group: GroupConfig, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    assert cli(groups_file, command, "nope") == 2

    err = capsys.readouterr().err
    assert f"group 'nope' is not defined in {groups_file}; defined: [{group.name!r}]" in err


def test_rows_isolated_before_a_crash_and_then_committed_with_their_shard_whole_are_marked_and_counted_out(
    catalog: Catalog, group: GroupConfig, groups_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    append_batches(create_source(catalog, group.source), 1, 9)
    first = tick(catalog, group, lambda _: RunState.MISSING)
    lease = first.launch[0]
    shard = first.state.shards[lease.shard_ids[0]]
    # The Borrower recorded an isolated row, then died before the commit that leaves it out; the next
    # attempt committed the shard whole.
    record_rows(catalog, group.name, [DeadRow(shard.shard_id, shard.stream, lease.lease_id, 0, shard.files[0], 3,
                                              ISOLATED, "ValueError: bad", "{}", None, 1_000)])  # fmt: skip
    commit_lease(catalog, group, first.state, lease)
    (committed,) = [
        snapshot
        for snapshot in catalog.load_table(group.sink).snapshots()
        if snapshot.summary and shard.shard_id in snapshot.summary.additional_properties.get("icegroup.shards", "")
    ]

    assert cli(groups_file, "dead-letters", group.name) == 0
    assert capsys.readouterr().out.splitlines()[-2:] == [
        f"1 rows isolated from their shards, 0 not re-driven: `icegroup dead-letters {group.name} --rows`",
        f"1 more were committed with their shard whole after a crash: `icegroup redrive {group.name} --execute` "
        "marks them",
    ]
    assert cli(groups_file, "redrive", group.name, "--execute") == 0
    assert capsys.readouterr().out.splitlines() == [
        f"marked: the 1 isolated rows of shard {shard.shard_id} in the sink, committed with their shard whole by "
        f"sink snapshot {committed.snapshot_id} (after a crash)"
    ]
    (row,) = latest_rows(catalog, group.name).values()
    assert (row.action, row.sink_snapshot) == (REDRIVEN_ROW, committed.snapshot_id)
    assert cli(groups_file, "dead-letters", group.name) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        f"1 rows isolated from their shards, 0 not re-driven: `icegroup dead-letters {group.name} --rows`"
    )
