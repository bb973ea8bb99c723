"""Rebuilding a registry from the sink's commits, and noticing when the registry is behind the sink."""

from __future__ import annotations

from typing import Any

import pytest

from iceberg.errors import SourceError
from iceberg.groups import GroupConfig
from iceberg.protocol.lineage import SinkCommit, commit_properties, parse_commit
from iceberg.protocol.rebuild import rebuild_state, registry_behind
from iceberg.protocol.shards import FileEntry, Shard, SnapshotInfo, cut_shards
from iceberg.protocol.state import Origin
from tests.factories import WINDOW_START_MS, group_state, shard

EU, US = "0/region=eu", "0/region=us"
GROUP = GroupConfig(name="orders", source="demo.events", sink="demo.events_out")


def committed(s: Shard, *, snapshot_id: int, origin: Origin | None = None, epoch: int = 0, **props: Any) -> SinkCommit:
    """The sink commit of shard ``s`` as a Borrower writes it and the sink history reads it back."""
    properties = commit_properties("orders", "demo.events", f"{snapshot_id:016x}", epoch, 0, s, origin=origin)
    properties.update(props)
    commit = parse_commit(snapshot_id, WINDOW_START_MS + snapshot_id, properties, added_records=s.rows)
    assert commit is not None
    return commit


def test_positions_start_counts_and_config_hash_come_back_from_the_commits() -> None:
    origin = Origin(start_position=100, config_hash="aaaa")
    commits = [
        committed(shard(1, stream=EU), snapshot_id=901, origin=origin),
        committed(shard(2, stream=US), snapshot_id=902, origin=origin),
        committed(shard(3, stream=EU), snapshot_id=903, origin=origin),
    ]

    state = rebuild_state(GROUP, commits, sequences={}, sink_head=903, epoch=4)

    assert state.streams[EU].position == 103
    assert state.streams[EU].position_sequence == 3
    assert state.streams[EU].committed_shards == 2
    assert state.streams[EU].committed_rows == 20
    assert state.streams[US].position == 102
    assert state.start_position == state.planned_through == 100
    assert state.sink_cursor == 903
    assert state.epoch == 4
    assert state.leases_done == 3
    assert state.config_hash == "aaaa"
    assert state.shards == {}
    assert state.leases == {}


def test_a_config_change_between_commits_is_recorded_where_it_happened() -> None:
    commits = [
        committed(shard(1), snapshot_id=901, origin=Origin(start_position=100, config_hash="aaaa")),
        committed(shard(2), snapshot_id=902, origin=Origin(start_position=100, config_hash="bbbb", config_version=1)),
    ]

    state = rebuild_state(GROUP, commits, sequences={}, sink_head=902, epoch=1)

    assert state.config_hash == "bbbb"
    assert [(c.old_hash, c.new_hash, c.sink_snapshot) for c in state.config_changes] == [("aaaa", "bbbb", 901)]


def test_a_lease_granted_before_a_config_change_that_commits_after_it_does_not_undo_the_change() -> None:
    old = Origin(start_position=100, config_hash="aaaa")
    new = Origin(start_position=100, config_hash="bbbb", config_version=1)
    commits = [
        committed(shard(1), snapshot_id=901, origin=old),
        committed(shard(2), snapshot_id=902, origin=new),
        committed(shard(3, stream=US), snapshot_id=903, origin=old),  # granted before the change
    ]

    state = rebuild_state(GROUP, commits, sequences={}, sink_head=903, epoch=1)

    assert state.config_hash == "bbbb"
    assert [(c.old_hash, c.new_hash) for c in state.config_changes] == [("aaaa", "bbbb")]


def test_commits_from_before_recorded_sequences_use_the_source_and_the_earliest_range_start() -> None:
    legacy = parse_commit(901, 0, {**strip_sequence(shard(2)), "icegroup.group": "orders"}, added_records=10)
    assert legacy is not None
    assert legacy.origin is None
    assert legacy.shards[0].to_sequence is None

    state = rebuild_state(GROUP, [legacy], sequences={101: 1, 102: 2}, sink_head=901, epoch=1)

    assert state.streams[shard(2).stream].position_sequence == 2
    assert state.start_position == 101


def test_a_legacy_commit_whose_source_snapshot_expired_names_it() -> None:
    legacy = parse_commit(901, 0, {**strip_sequence(shard(2)), "icegroup.group": "orders"}, added_records=10)
    assert legacy is not None

    with pytest.raises(SourceError, match=r"ends at source snapshot 102, which 'demo\.events' no longer has"):
        rebuild_state(GROUP, [legacy], sequences={}, sink_head=901, epoch=1)


def strip_sequence(s: Shard) -> dict[str, str]:
    """Summary properties of a commit written before sequence numbers, start and hash were recorded."""
    properties = commit_properties("orders", "demo.events", "f" * 16, 0, 0, s)
    return {
        **properties,
        "icegroup.shards": properties["icegroup.shards"].replace(f'"seq":{s.to_sequence},', ""),
    }


def test_a_registry_that_holds_every_committed_shard_is_not_behind() -> None:
    first = shard(1)
    state = group_state([first])

    assert registry_behind(state, [committed(first, snapshot_id=901)], sink_epoch=0) is None


def test_a_commit_of_a_shard_the_registry_never_cut_means_it_is_behind() -> None:
    state = group_state([shard(1)])

    reason = registry_behind(state, [committed(shard(2), snapshot_id=902)], sink_epoch=0)

    assert reason is not None
    assert f"commits shard {shard(2).shard_id}" in reason
    assert "which the registry does not hold" in reason


def test_a_sink_epoch_above_the_registry_means_it_is_behind() -> None:
    reason = registry_behind(group_state([]), [], sink_epoch=1)

    assert reason == "the sink's epoch fence is 1, the registry's epoch is 0"


def test_cutting_after_a_rebuild_leaves_out_what_each_stream_committed() -> None:
    snapshots = [SnapshotInfo(100 + n, 99 + n, n, WINDOW_START_MS + n, 0, "append") for n in range(1, 5)]
    files = [FileEntry(stream, 100 + n, f"{stream}/{n}.parquet", 5, 50) for n in range(1, 5) for stream in (EU, US)]

    shards = cut_shards(
        group="orders", epoch=1, snapshots=snapshots, files=files, stream_cursors={EU: 102}, plan_from=None,
        caps=GROUP.shard_caps, window="day", floors={EU: 2},
    )  # fmt: skip

    by_stream = {s.stream: s for s in shards}
    assert by_stream[EU].from_snapshot == 102
    assert by_stream[EU].snapshots == [103, 104]
    assert by_stream[US].from_snapshot is None
    assert by_stream[US].snapshots == [101, 102, 103, 104]
