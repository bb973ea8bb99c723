"""Rebuilding a registry from the sink's commits, and noticing when the registry is behind the sink."""

from __future__ import annotations

from typing import Any

import pytest

from icegroup.iceberg.errors import SourceError
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.rebuild import rebuild_state, registry_behind
from icegroup.iceberg.protocol.shards import FileEntry, Shard, SnapshotInfo, cut_shards
from icegroup.iceberg.protocol.sink_commit import ResetRecord, SinkCommit, commit_properties, parse_commit
from icegroup.iceberg.protocol.state import Origin, StreamState, add_shards, retire_streams
from tests.factories import WINDOW_START_MS, group_state, shard

EU, US = "0/region=eu", "0/region=us"
GROUP = GroupConfig(name="orders", source="demo.events", sink="demo.events_out")


def committed(s: Shard, *, snapshot_id: int, origin: Origin | None = None, epoch: int = 0, **props: Any) -> SinkCommit:
    """The sink commit of shard ``s`` as a Borrower writes it and the sink history reads it back."""
    properties = commit_properties("orders", "demo.events", f"{snapshot_id:016x}", epoch, 0, [s], origin=origin)
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
    properties = commit_properties("orders", "demo.events", "f" * 16, 0, 0, [s])
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


def test_the_low_watermark_is_the_lowest_position_of_a_stream_with_pending_shards() -> None:
    state = group_state([shard(3, stream=EU)], planned_through=105, planned_through_sequence=5)
    state.streams[EU] = StreamState(position=102, position_sequence=2)
    state.streams[US] = StreamState(position=104, position_sequence=4)  # nothing pending: committed through 105

    assert state.low_watermark() == (102, 2)
    assert group_state([], planned_through=105, planned_through_sequence=5).low_watermark() == (105, 5)
    assert group_state([], planned_through=None).low_watermark() == (None, 0), "the table's beginning"


def test_a_low_watermark_with_a_position_of_unknown_sequence_is_not_known() -> None:
    state = group_state([shard(3, stream=EU)], planned_through=105, planned_through_sequence=5)
    state.streams[EU] = StreamState(position=102, position_sequence=0)  # written before sequences were kept

    assert state.low_watermark() is None
    assert state.origin.low_watermark_sequence is None


def test_a_stream_seen_for_the_first_time_is_positioned_at_the_old_planning_cursor() -> None:
    before = group_state([], planned_through=102, planned_through_sequence=2)

    after = add_shards(before, [shard(4, stream=US, from_snapshot=102)], through=104, through_sequence=4)

    assert (after.streams[US].position, after.streams[US].position_sequence) == (102, 2)
    assert (after.planned_through, after.planned_through_sequence) == (104, 4)


def test_a_rebuild_plans_from_the_newest_low_watermark_its_commits_recorded() -> None:
    early = Origin(start_position=100, config_hash="aaaa", low_watermark=100, low_watermark_sequence=0)
    later = Origin(start_position=100, config_hash="aaaa", low_watermark=102, low_watermark_sequence=2)
    commits = [
        committed(shard(1), snapshot_id=901, origin=early),
        committed(shard(3), snapshot_id=903, origin=later),
        committed(shard(2, stream=US), snapshot_id=902, origin=early),  # granted earlier, committed later
    ]

    state = rebuild_state(GROUP, commits, sequences={}, sink_head=903, epoch=1)

    assert (state.planned_through, state.planned_through_sequence) == (102, 2)
    assert state.start_position == 100


def test_a_rebuild_after_a_reset_leaves_out_the_output_the_reset_deleted() -> None:
    mark = Origin(start_position=100, config_hash=None, low_watermark=103, low_watermark_sequence=3)
    commits = [
        committed(shard(1, stream=EU), snapshot_id=901, origin=mark),
        committed(shard(2, stream=EU), snapshot_id=902, origin=mark),
        committed(shard(3, stream=EU), snapshot_id=903, origin=mark),
    ]
    reset = ResetRecord(epoch=1, positions={EU: 1, "*": 1}, snapshots={EU: 101, "*": 101})

    state = rebuild_state(GROUP, commits, sequences={}, sink_head=903, epoch=2, resets=[reset])

    assert (state.streams[EU].position, state.streams[EU].position_sequence) == (101, 1)
    assert state.planned_through == 100, "no low watermark from before the reset"


def test_a_rebuilt_stream_was_last_active_when_its_last_commit_landed_not_in_1970() -> None:
    """A rebuilt registry has no tick samples: each stream's activity comes from its sink commits' timestamps."""
    commits = [
        committed(shard(1, stream=EU), snapshot_id=901),
        committed(shard(2, stream=US), snapshot_id=902),
        committed(shard(3, stream=EU), snapshot_id=903),
    ]
    newest = {EU: commits[2].timestamp_ms, US: commits[1].timestamp_ms}

    state = rebuild_state(GROUP, commits, sequences={}, sink_head=903, epoch=1)

    assert {name: s.recent[-1][0] for name, s in state.streams.items()} == newest
    state.planned_through, state.planned_through_sequence = 103, 3  # every stream at or below the cursor
    a_second_later = max(newest.values()) + 1_000
    kept = retire_streams(state, a_second_later, idle_ms=3_600_000)
    assert set(kept.streams) == {EU, US}, "streams that committed a second ago are not done"
    assert kept.retired.streams == 0
