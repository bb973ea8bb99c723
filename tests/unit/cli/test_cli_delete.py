"""``icegroup delete`` on a real catalog (no Spark): a preview, a refusal while a lease may commit, then a fresh start.

Also the JSON contract of the read commands on the same group: no id a double would corrupt.
"""

from __future__ import annotations

import json

import pytest
from pyiceberg.catalog import Catalog

from icegroup.dagster_project.cli import Exit, main
from icegroup.iceberg.leader import TickResult, tick
from icegroup.iceberg.pause import set_paused
from icegroup.iceberg.protocol.fences import epoch_key, fence_key
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.liveness import RunState
from icegroup.iceberg.store.fences import raise_fences
from icegroup.iceberg.store.group_delete import footprint, owned_property
from icegroup.iceberg.store.lineage import lineage_identifier
from icegroup.iceberg.store.registrations import registration_key
from icegroup.iceberg.store.registry import load_state, registry_identifier
from icegroup.iceberg.store.sink_history import deleted_key
from icegroup.iceberg.store.tables import load_optional
from tests.factories import BORROWER_RUN
from tests.sink_commits import commit_lease


def run(catalog: Catalog, group: GroupConfig) -> TickResult:
    """One tick that grants to a Borrower run and sees every Borrower run as running."""
    return tick(catalog, group, lambda _: RunState.RUNNING, owner_run_id=BORROWER_RUN)


def sink_rows(catalog: Catalog, group: GroupConfig) -> int:
    return len(catalog.load_table(group.sink).scan().to_arrow())


def test_delete_is_refused_while_a_lease_may_still_commit_and_names_the_remedy(
    catalog: Catalog, group: GroupConfig, cli: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    [held] = run(catalog, group).launch

    assert main([*cli, "delete", group.name, "--execute"]) == Exit.ERROR

    err = capsys.readouterr().err
    assert f"{held.lease_id}#{held.attempt}" in err
    assert f"`icegroup pause {group.name}`" in err
    assert load_state(catalog, group.name).state is not None, "nothing was deleted"


def test_delete_previews_then_removes_the_state_and_the_group_starts_afresh_over_the_same_sink(
    catalog: Catalog, group: GroupConfig, cli: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    first = run(catalog, group)
    set_paused(catalog, group, paused=True)
    commit_lease(catalog, group, first.state, first.launch[0])
    assert run(catalog, group).state.leases == {}, "paused: the finished lease is not followed by another"
    rows = sink_rows(catalog, group)
    assert rows > 0
    assert raise_fences(catalog.load_table(group.sink), {fence_key(group.name, first.launch[0].lease_id): 1})
    capsys.readouterr()

    assert main([*cli, "delete", group.name]) == Exit.OK
    preview = capsys.readouterr().out
    assert registry_identifier(group.name) in preview
    assert preview.splitlines()[-1].startswith(f"preview: nothing changed; `icegroup delete {group.name} --execute`")
    assert load_state(catalog, group.name).state is not None, "a preview deletes nothing"

    assert main([*cli, "delete", group.name, "--execute", "--json"]) == Exit.OK
    done = json.loads(capsys.readouterr().out)
    assert done["executed"] is True
    assert isinstance(done["deleted_at_sink_snapshot"], str), "a snapshot id is a JSON string"

    sink = catalog.load_table(group.sink)
    assert sink_rows(catalog, group) == rows, "the sink's rows stay"
    assert load_optional(catalog, registry_identifier(group.name)) is None
    assert load_optional(catalog, lineage_identifier(group.name)) is None
    assert not any(owned_property(group.name, key) for key in sink.properties), "its markers are gone"
    assert sink.properties[epoch_key(group.name)] == "1", "the epoch fence went up: a zombie of epoch 0 is refused"
    assert sink.properties[fence_key(group.name, first.launch[0].lease_id)] == "1", "lease fences stay"
    assert sink.properties[deleted_key(group.name)] == done["deleted_at_sink_snapshot"]
    assert registration_key(group.name) not in catalog.load_table(group.source).properties
    assert footprint(catalog, group.name, group.source, group.sink).empty()

    set_paused_again = run(catalog, group)  # a new group: no rebuild from the deleted group's commits
    assert set_paused_again.state.epoch == 1, "the new group takes the raised epoch, so its commits pass the fence"
    assert set_paused_again.state.paused_at_ms is None, "the pause was the deleted group's"
    assert sum(s.committed_shards for s in set_paused_again.state.streams.values()) == 0
    assert len(set_paused_again.launch) == 1, "it is granted work again from its start position"


def test_delete_of_a_group_that_keeps_nothing_says_so(
    group: GroupConfig, cli: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*cli, "delete", group.name, "--execute"]) == Exit.OK

    assert capsys.readouterr().out.strip() == f"group {group.name}: keeps no state; nothing to delete"


def ints_a_double_corrupts(value: object) -> list[int]:
    """Every integer in a JSON document that a double cannot hold exactly."""
    if isinstance(value, dict):
        return [n for item in value.values() for n in ints_a_double_corrupts(item)]
    if isinstance(value, list):
        return [n for item in value for n in ints_a_double_corrupts(item)]
    return [value] if isinstance(value, int) and abs(value) >= 2**53 else []


@pytest.mark.parametrize(
    "command",
    [["list"], ["describe", "{g}"], ["checkpoints", "{g}"], ["rebuild", "{g}"], ["reset", "{g}", "--to-earliest"],
     ["dead-letters", "{g}"], ["delete", "{g}"], ["redrive", "{g}"], ["expire", "{g}"]],
    ids=lambda c: c[0],
)  # fmt: skip
def test_every_json_output_holds_ids_as_strings_and_no_placeholder(
    catalog: Catalog, group: GroupConfig, cli: list[str], capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    first = run(catalog, group)
    commit_lease(catalog, group, first.state, first.launch[0])
    run(catalog, group)
    capsys.readouterr()

    assert main([*cli, *(part.format(g=group.name) for part in command), "--json"]) == Exit.OK

    out = capsys.readouterr().out
    assert ints_a_double_corrupts(json.loads(out)) == []
    assert '"-"' not in out
    assert "None" not in out


def test_describe_json_gives_every_snapshot_id_as_a_string(
    catalog: Catalog, group: GroupConfig, cli: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    first = run(catalog, group)
    commit_lease(catalog, group, first.state, first.launch[0])
    run(catalog, group)
    capsys.readouterr()

    assert main([*cli, "describe", group.name, "--json"]) == Exit.OK
    described = json.loads(capsys.readouterr().out)
    assert isinstance(described["source_head"], str)
    assert int(described["source_head"]) == catalog.load_table(group.source).metadata.current_snapshot_id
    assert all(isinstance(s["head"], str) for s in described["streams"])
    assert "retention" not in described, "no sentences: the registration and replays are fields"
    assert described["replays"] == []
    assert described["registration"]["group"] == group.name
    assert isinstance(described["registration"]["pin_sequence"], int)

    assert main([*cli, "checkpoints", group.name, "--json"]) == Exit.OK
    [point] = json.loads(capsys.readouterr().out)
    assert isinstance(point["sink_snapshot"], str)
    assert isinstance(point["rows"], int), "counts stay numbers"
