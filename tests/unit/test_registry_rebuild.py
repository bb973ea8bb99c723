"""A registry that is lost or behind the sink is rebuilt from the sink's commits, by stream and range.

The Borrower's sink commits are simulated with pyiceberg (``tests/sink_commits.py``), so these tests
need no Spark; the integration tier drops the registry under real consumption
(``tests/integration/test_registry_rebuild.py``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.catalog import Catalog

from icegroup.dagster_project.cli import Exit, main
from icegroup.iceberg import rebuild
from icegroup.iceberg.describe import describe_group
from icegroup.iceberg.errors import ConfigError, RegistryConflict, SinkError, SourceError
from icegroup.iceberg.leader import TickResult, tick
from icegroup.iceberg.protocol.fences import epoch_key
from icegroup.iceberg.protocol.group import GroupConfig, StartAtSnapshot
from icegroup.iceberg.protocol.liveness import RunState
from icegroup.iceberg.protocol.reset import ResetTarget
from icegroup.iceberg.protocol.sink_commit import COL_SHARD, shard_number
from icegroup.iceberg.rebuild import sync_tables
from icegroup.iceberg.replay import plan_replay
from icegroup.iceberg.reset import execute_reset
from icegroup.iceberg.store.registry import commit_state, load_state, registry_identifier
from icegroup.iceberg.store.sink_history import SinkHistory
from tests.factories import MakeGroup, append_batches, create_source, tables_of, today, write_groups
from tests.sink_commits import SINK_SCHEMA, commit_lease, consume_all, sink_of


def run(catalog: Catalog, group: GroupConfig) -> TickResult:
    """One tick whose Borrowers are not running yet."""
    return tick(catalog, group, lambda _: RunState.MISSING)


def committed_ranges(catalog: Catalog, group: GroupConfig) -> list[tuple[str, int]]:
    """(stream, source snapshot) of every committed shard's snapshots, once per commit."""
    sink = catalog.load_table(group.sink)
    found = []
    for snapshot in sink.snapshots():
        props = snapshot.summary.additional_properties if snapshot.summary else {}
        if props.get("icegroup.group") == group.name:
            for item in json.loads(props["icegroup.shards"]):
                found.extend((item["stream"], s) for s in item["snapshots"])
    return found


def drop_registry(catalog: Catalog, group: GroupConfig) -> None:
    """Lose the registry, as a catalog restored without it would."""
    catalog.drop_table(registry_identifier(group.name))


@pytest.fixture
def group(catalog: Catalog, make_group: MakeGroup) -> GroupConfig:
    """A group with small shards over a source with 4 snapshots of 3 streams."""
    built = make_group(shard_caps={"max_files": 1}, lease_max_shards=1, max_borrowers=2)
    append_batches(create_source(catalog, built.source), 4, 30)
    return built


def test_a_lost_registry_is_rebuilt_from_the_sink_and_nothing_is_consumed_twice(
    catalog: Catalog, group: GroupConfig
) -> None:
    first = run(catalog, group)
    for lease in first.launch:
        commit_lease(catalog, group, first.state, lease)
    before = {name: s.position for name, s in run(catalog, group).state.streams.items() if s.committed_shards}
    drop_registry(catalog, group)

    rebuilt = run(catalog, group)

    assert rebuilt.rebuilt is not None
    assert "the registry is missing" in rebuilt.rebuilt
    assert rebuilt.state.epoch == 1
    assert catalog.load_table(group.sink).properties[epoch_key(group.name)] == "1", "older leases are fenced"
    assert {n: s.position for n, s in rebuilt.state.streams.items() if s.committed_shards} == before
    consume_all(catalog, group)
    ranges = committed_ranges(catalog, group)
    assert len(ranges) == len(set(ranges)), "no source snapshot of a stream was committed twice"
    snapshots = {s.snapshot_id for s in catalog.load_table(group.source).snapshots()}
    streams = {stream for stream, _ in ranges}
    assert len(streams) == 3
    assert set(ranges) == {(stream, s) for stream in streams for s in snapshots}, "every range was committed"


def test_a_registry_restored_from_an_older_backup_is_rebuilt(catalog: Catalog, group: GroupConfig) -> None:
    first = run(catalog, group)
    backup = load_state(catalog, group.name).state
    assert backup is not None
    for lease in first.launch:
        commit_lease(catalog, group, first.state, lease)
    append_batches(catalog.load_table(group.source), 2, 30)  # cut, granted and committed after the backup
    consume_all(catalog, group)
    commit_state(load_state(catalog, group.name), backup)  # the restore

    behind = run(catalog, group)

    assert behind.rebuilt is not None
    assert "which the registry does not hold" in behind.rebuilt
    consume_all(catalog, group)
    ranges = committed_ranges(catalog, group)
    assert len(ranges) == len(set(ranges)), "no source snapshot of a stream was committed twice"
    assert len(ranges) == 6 * 3


def test_a_source_created_again_is_refused_by_a_reset_and_a_rebuild_keeps_the_table_its_positions_are_in(
    catalog: Catalog, group: GroupConfig
) -> None:
    consume_all(catalog, group)
    stored = load_state(catalog, group.name).state
    assert stored is not None
    assert stored.source_uuid == str(catalog.load_table(group.source).metadata.table_uuid)
    catalog.drop_table(group.source)
    append_batches(create_source(catalog, group.source), 1, 30)
    new = str(catalog.load_table(group.source).metadata.table_uuid)
    sink_before = catalog.load_table(group.sink).properties

    with pytest.raises(SourceError, match=rf"dropped and created again: .* is {new}.*icegroup delete {group.name}"):
        execute_reset(catalog, group, ResetTarget("latest"))
    assert load_state(catalog, group.name).state == stored, "the reset changed nothing"
    assert catalog.load_table(group.sink).properties == sink_before, "no fence raised, no marker set"
    with pytest.raises(SourceError, match="dropped and created again"):
        run(catalog, group)
    with pytest.raises(SourceError, match="dropped and created again"):
        plan_replay(catalog, group, today(group))

    source = catalog.load_table(group.source)
    rebuilt = rebuild.rebuild(catalog, group, source, stored, stored.epoch + 1, "a test", fence=False)
    assert rebuilt.source_uuid == stored.source_uuid, "its positions are in the old table still"


def test_a_sink_whose_history_lost_commits_is_not_rebuilt_from_what_is_left(
    catalog: Catalog, group: GroupConfig
) -> None:
    consume_all(catalog, group)
    orphan = {"id": 0, COL_SHARD: shard_number("0123456789abcdef")}
    sink_of(catalog, group).append(pa.Table.from_pylist([orphan], schema=SINK_SCHEMA.as_arrow()))
    drop_registry(catalog, group)

    with pytest.raises(SinkError, match=r"holds rows of 1 shards .* whose commits are no longer in its history"):
        run(catalog, group)

    assert not catalog.table_exists(registry_identifier(group.name)), "nothing was committed"


def test_a_group_renamed_onto_the_same_sink_rebuilds_past_the_old_names_rows(
    catalog: Catalog, group: GroupConfig
) -> None:
    """The remedy for a changed transform is a new name: the sink then holds rows of both names."""
    consume_all(catalog, group)
    renamed = group.model_copy(update={"name": f"{group.name}_v2"})
    consume_all(catalog, renamed)
    drop_registry(catalog, renamed)

    run(catalog, renamed)

    state = load_state(catalog, renamed.name).state
    assert state is not None
    assert state.epoch > 0, "rebuilt from the renamed group's own commits"


def test_a_changed_filter_stops_the_group_naming_the_choices(catalog: Catalog, group: GroupConfig) -> None:
    run(catalog, group)
    changed = group.model_copy(update={"filter": "region = 'eu'"})
    token = load_state(catalog, group.name).token

    with pytest.raises(ConfigError, match="filter/transform changed since the sink's output was made") as caught:
        run(catalog, changed)

    assert "give the changed group a new name" in str(caught.value)
    assert "on_change: continue" in str(caught.value)
    assert load_state(catalog, group.name).token == token, "nothing was committed"


def test_on_change_continue_records_the_change_and_new_leases_carry_the_new_hash(
    catalog: Catalog, group: GroupConfig
) -> None:
    first = run(catalog, group)
    commit_lease(catalog, group, first.state, first.launch[0])
    changed = group.model_copy(update={"filter": "region = 'eu'", "on_change": "continue"})

    result = run(catalog, changed)

    assert result.state.config_hash == changed.config_hash != group.config_hash
    [change] = result.state.config_changes
    assert (change.old_hash, change.new_hash) == (group.config_hash, changed.config_hash)
    assert change.sink_snapshot == catalog.load_table(group.sink).current_snapshot().snapshot_id  # type: ignore[union-attr]
    assert all(lease.origin is not None for lease in result.state.leases.values())
    new = [lease for lease in result.launch if lease.lease_id not in first.state.leases]
    assert all(lease.origin.config_hash == changed.config_hash for lease in new if lease.origin)


def test_icegroup_rebuild_shows_the_sink_view_and_commits_it_only_with_execute(
    catalog: Catalog, group: GroupConfig, tmp_path: Path, lake_home: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    monkeypatch.setenv("ICEGROUP_HOME", str(lake_home))
    first = run(catalog, group)
    commit_lease(catalog, group, first.state, first.launch[0])
    drop_registry(catalog, group)
    groups = write_groups(tmp_path / "groups.yaml", group)

    assert main(["--groups", str(groups), "rebuild", group.name]) == 0
    dry = capsys.readouterr().out
    assert f"group {group.name}: registry missing" in dry
    assert "preview: nothing changed" in dry
    assert not catalog.table_exists(registry_identifier(group.name))

    assert main(["--groups", str(groups), "rebuild", group.name, "--execute"]) == 0
    done = capsys.readouterr().out
    assert "rebuilt: the registry is at epoch 1" in done
    state = load_state(catalog, group.name).state
    assert state is not None
    assert state.epoch == 1
    shard = first.state.shards[first.launch[0].shard_ids[0]]
    assert state.streams[shard.stream].position == shard.to_snapshot
    view = describe_group(catalog, group)
    assert view.lag_rows == 4 * 30 - shard.rows, "lag is what the sink lacks, though planning starts over"


def test_icegroup_rebuild_of_a_group_with_nothing_in_the_sink_says_so(
    catalog: Catalog, group: GroupConfig, tmp_path: Path, lake_home: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    monkeypatch.setenv("ICEGROUP_HOME", str(lake_home))
    run(catalog, group)
    token = load_state(catalog, group.name).token
    groups = write_groups(tmp_path / "groups.yaml", group)

    assert main(["--groups", str(groups), "rebuild", group.name, "--execute"]) == Exit.ERROR

    assert "there is nothing to rebuild" in capsys.readouterr().err
    assert load_state(catalog, group.name).token == token


def test_a_rebuild_raises_the_epoch_fence_before_it_reads_the_sink_history(
    catalog: Catalog, group: GroupConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = run(catalog, group)
    commit_lease(catalog, group, first.state, first.launch[0])
    drop_registry(catalog, group)
    fence_at_full_read: list[str | None] = []
    real_read = rebuild.read_sink_history

    def read(catalog: Catalog, sink: str, name: str, since: int | None) -> SinkHistory:
        if since is None:
            fence_at_full_read.append(catalog.load_table(sink).properties.get(epoch_key(name)))
        return real_read(catalog, sink, name, since)

    monkeypatch.setattr(rebuild, "read_sink_history", read)

    run(catalog, group)

    assert fence_at_full_read[-1] == "1", "a lease of epoch 0 could no longer commit once the history was read"


def test_a_registry_read_before_another_leader_committed_is_not_rebuilt(catalog: Catalog, group: GroupConfig) -> None:
    stale = load_state(catalog, group.name)  # read before the group's first tick: no registry yet
    first = run(catalog, group)  # another Leader's first tick, and its Borrower's commit
    commit_lease(catalog, group, first.state, first.launch[0])

    with pytest.raises(RegistryConflict, match="moved while this Leader compared it with the sink"):
        sync_tables(tables_of(catalog, group, stale))

    assert epoch_key(group.name) not in catalog.load_table(group.sink).properties, "no fence was raised"


def test_a_second_leader_rebuilding_into_the_same_epoch_backs_off(catalog: Catalog, group: GroupConfig) -> None:
    first = run(catalog, group)
    commit_lease(catalog, group, first.state, first.launch[0])
    drop_registry(catalog, group)
    source = catalog.load_table(group.source)
    rebuild.rebuild(catalog, group, source, None, 1, "registry missing", fence=True)  # the first raises the fence

    with pytest.raises(RegistryConflict, match="another Leader is rebuilding"):
        rebuild.rebuild(catalog, group, source, None, 1, "registry missing", fence=True)


def test_a_rebuild_plans_from_the_low_watermark_so_expired_early_source_history_does_not_stop_it(
    catalog: Catalog, group: GroupConfig
) -> None:
    source = catalog.load_table(group.source)
    early = [s.snapshot_id for s in sorted(source.snapshots(), key=lambda s: s.sequence_number or 0)][:3]
    group = group.model_copy(update={"start": StartAtSnapshot(snapshot_id=early[1])})  # consumes after early[0]
    consume_all(catalog, group)
    append_batches(source, 2, 30)
    consume_all(catalog, group)
    source.maintenance.expire_snapshots().by_ids(early).commit()  # the start position is gone
    drop_registry(catalog, group)

    rebuilt = run(catalog, group)

    assert rebuilt.rebuilt is not None
    assert rebuilt.state.start_position == early[0]
    assert rebuilt.state.planned_through not in early
    assert rebuilt.caught_up, "nothing left: every range was committed before the registry was lost"
    ranges = committed_ranges(catalog, group)
    assert len(ranges) == len(set(ranges)) == 5 * 3


@pytest.mark.parametrize("how", ["tick", "icegroup rebuild --execute"])
def test_streams_that_committed_just_before_a_rebuild_are_not_folded_out_as_idle_since_1970(
    catalog: Catalog, group: GroupConfig, how: str
) -> None:
    consume_all(catalog, group)
    drop_registry(catalog, group)
    if how != "tick":
        rebuild.rebuild_registry(catalog, group, execute=True)
    last_commit = max(s.timestamp_ms for s in catalog.load_table(group.sink).snapshots())

    after = run(catalog, group)  # the tick that rebuilds, or the first one after the rebuild
    view = describe_group(catalog, group)

    assert after.state.retired.streams == 0, "a stream that committed seconds ago is not done"
    assert len(after.state.streams) == 3
    assert all(0 < s.recent[-1][0] <= last_commit for s in after.state.streams.values())
    assert (view.retired_streams, len(view.streams)) == (0, 3)
