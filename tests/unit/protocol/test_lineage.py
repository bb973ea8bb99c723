"""The pure rules that turn sink commits into lineage entries: consume, replay supersedes, reset voids."""

from __future__ import annotations

from icegroup.iceberg.protocol.group import ShardCaps
from icegroup.iceberg.protocol.lineage import CONSUMED, REPLAYED, consumed, replayed, voided, window_provenance
from icegroup.iceberg.protocol.shards import FileEntry, Shard, SnapshotInfo, cut_shards
from icegroup.iceberg.protocol.sink_commit import ReplayCommit, ResetRecord, SinkCommit, range_of
from icegroup.iceberg.protocol.state import Origin
from tests.factories import GROUP, STREAM, WINDOW_START_MS, shard


def commit_of(*shards: Shard, snapshot_id: int = 900, epoch: int = 1) -> SinkCommit:
    """A sink commit of the shards by lease L attempt 2."""
    return SinkCommit(
        snapshot_id=snapshot_id,
        timestamp_ms=WINDOW_START_MS + 5,
        group=GROUP,
        source="ns.events",
        lease_id="L",
        epoch=epoch,
        attempt=2,
        shards=tuple(range_of(s) for s in shards),
        added_records=10,
        origin=Origin(start_position=None, config_hash="cafe"),
        run_id="run-1",
    )


def test_planning_keeps_each_files_snapshot_records_and_bytes() -> None:
    files = [
        FileEntry(STREAM, 11, "a.parquet", 5, 500),
        FileEntry(STREAM, 12, "b.parquet", 7, 700),
    ]
    snapshots = [SnapshotInfo(i, None, i, WINDOW_START_MS + i, 0, "append") for i in (11, 12)]
    [planned] = cut_shards(
        group=GROUP, epoch=0, snapshots=snapshots, files=files, stream_cursors={}, plan_from=None,
        caps=ShardCaps(), window="day",
    )  # fmt: skip
    assert planned.files == ["a.parquet", "b.parquet"]
    assert planned.file_stats == [(11, 5, 500), (12, 7, 700)]


def test_a_commit_makes_one_entry_per_planned_file_with_the_commits_provenance() -> None:
    planned = shard(1, files=["a.parquet", "b.parquet"], file_stats=[(101, 4, 40), (101, 6, 60)])
    found = consumed(commit_of(planned), {planned.shard_id: planned}, "day")
    assert [(e.source_file, e.source_snapshot, e.file_records, e.file_bytes) for e in found] == [
        ("a.parquet", 101, 4, 40),
        ("b.parquet", 101, 6, 60),
    ]
    first = found[0]
    assert (first.window, first.shard_id, first.sink_snapshot, first.kind) == (
        "2026-01-01",
        planned.shard_id,
        900,
        CONSUMED,
    )
    assert (first.lease_id, first.attempt, first.epoch, first.run_id, first.config_hash) == ("L", 2, 1, "run-1", "cafe")
    assert (first.from_snapshot, first.to_snapshot, first.shard_rows) == (100, 101, 10)


def test_a_shard_the_registry_no_longer_holds_gets_one_entry_without_files() -> None:
    planned = shard(1)
    [entry] = consumed(commit_of(planned), {}, "day")
    assert entry.source_file is None
    assert (entry.shard_id, entry.sink_snapshot) == (planned.shard_id, 900)


def test_a_shard_planned_before_file_stats_were_kept_still_names_its_files() -> None:
    planned = shard(1, files=["a.parquet", "b.parquet"])
    found = consumed(commit_of(planned), {planned.shard_id: planned}, "day")
    assert [(e.source_file, e.file_records) for e in found] == [("a.parquet", None), ("b.parquet", None)]


def test_a_replay_restamps_the_covered_shards_and_drops_the_rest_of_the_window() -> None:
    one, two = shard(1), shard(2)
    earlier = consumed(commit_of(one, two), {one.shard_id: one, two.shard_id: two}, "day")
    replay = ReplayCommit(
        snapshot_id=950, timestamp_ms=WINDOW_START_MS + 99, group=GROUP, window="2026-01-01", generation=3,
        epoch=1, covers=(range_of(one),), added_records=10, deleted_records=20, run_id="replay-run",
    )  # fmt: skip
    [entry] = replayed(replay, earlier)
    assert entry.shard_id == one.shard_id
    assert (entry.kind, entry.sink_snapshot, entry.generation, entry.run_id) == (REPLAYED, 950, 3, "replay-run")
    assert (entry.lease_id, entry.source_file) == ("L", one.files[0]), "where the rows came from is unchanged"


def test_a_reset_voids_the_older_epochs_commits_past_its_position_only() -> None:
    low, high = shard(1, to_sequence=1), shard(2, to_sequence=5)
    entries = consumed(commit_of(low, high, epoch=1), {low.shard_id: low, high.shard_id: high}, "day")
    reset = ResetRecord(epoch=2, positions={STREAM: 3}, snapshots={STREAM: 103})
    assert voided(entries, [reset]) == {high.shard_id}
    assert voided(entries, [ResetRecord(epoch=1, positions={STREAM: 0}, snapshots={})]) == set(), "same epoch"
    assert voided(entries, [ResetRecord(epoch=2, positions={"*": 0}, snapshots={})]) == {low.shard_id, high.shard_id}


def test_a_windows_provenance_sums_its_shards_once_and_spans_their_snapshots() -> None:
    one = shard(1, files=["a.parquet", "b.parquet"], to_sequence=1)
    two = shard(2, files=["c.parquet"], to_sequence=2)
    found = [
        *consumed(commit_of(one), {one.shard_id: one}, "day"),
        *consumed(commit_of(two, snapshot_id=901), {two.shard_id: two}, "day"),
    ]

    made = window_provenance(found, {"2026-01-01": WINDOW_START_MS})[WINDOW_START_MS]

    assert (made.window, made.shards, made.source_files) == ("2026-01-01", 2, 3)
    assert made.source_rows == one.rows + two.rows, "a shard's rows count once, not once per file"
    assert (made.source_snapshot, made.sink_snapshots) == (two.to_snapshot, (900, 901))
    assert made.source_range.startswith(str(one.from_snapshot))
