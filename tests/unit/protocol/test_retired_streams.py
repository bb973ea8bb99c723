"""Streams that are done leave the registry document: a table partitioned by day keeps its live days only."""

from __future__ import annotations

from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.leader import cut
from icegroup.iceberg.protocol.shards import DAY_MS, FileEntry, SnapshotInfo
from icegroup.iceberg.protocol.state import GroupState, StreamState, apply_commits, retire_streams
from tests.factories import group_state, lease

W0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
IDLE_MS = DAY_MS
GROUP = GroupConfig(name="orders", source="demo.events", sink="demo.events_out")


def day(n: int) -> str:
    """The stream of day ``n``'s partition."""
    return f"0/day=2026-01-{n:02d}"


def snapshot(seq: int) -> SnapshotInfo:
    """Append snapshot 100+seq, committed ``seq`` hours after W0."""
    return SnapshotInfo(100 + seq, 100 + seq - 1, seq, W0 + seq * 3_600_000, 0, "append")


def run_days(days: int, per_day: int = 3) -> GroupState:
    """A group that consumed ``days`` days of a day-partitioned table, each day's rows landing in its own partition.

    Every snapshot is cut, committed and followed by a retirement pass at the tick's time, as the
    Leader's tick does.
    """
    state = group_state([])
    seq = 0
    for d in range(1, days + 1):
        for _ in range(per_day):
            seq += 1
            now = W0 + (d - 1) * DAY_MS + seq * 60_000
            snap = snapshot(seq)
            files = [FileEntry(day(d), snap.snapshot_id, f"wh/{seq}.parquet", 10, 100)]
            planned = cut(state, GROUP, [snap], files, snap.snapshot_id, snap.sequence_number)
            state, _ = apply_commits(planned.state, [s.shard_id for s in planned.new_shards], now)
            state = retire_streams(state, now, IDLE_MS)
    return state


def test_a_year_of_daily_partitions_keeps_only_the_live_days_in_the_registry() -> None:
    state = run_days(365)

    assert set(state.streams) == {day(365)}, "each day's stream is folded out a day after its last commit"
    assert state.retired.streams == 364
    assert state.retired.shards + state.streams[day(365)].committed_shards == 365 * 3, "no count is lost"
    assert state.retired.rows + state.streams[day(365)].committed_rows == 365 * 3 * 10
    assert len(state.model_dump_json()) < 2_000, "the document stays the size of one live day"


def test_late_data_in_a_retired_stream_is_cut_from_the_planning_cursor() -> None:
    state = run_days(3)
    assert day(1) not in state.streams
    late = snapshot(10)

    planned = cut(state, GROUP, [late], [FileEntry(day(1), late.snapshot_id, "wh/late.parquet", 4, 40)], 110, 10)

    [again] = planned.new_shards
    assert again.stream == day(1)
    assert again.from_snapshot == state.planned_through, "it starts where everything of it is known committed"
    assert planned.state.streams[day(1)].position == state.planned_through


def test_a_stream_with_work_or_a_position_past_the_cursor_stays() -> None:
    old = W0 - 2 * DAY_MS
    idle = StreamState(position=105, position_sequence=5, recent=[(old, 10)])
    ahead = StreamState(position=109, position_sequence=9, recent=[(old, 10)])  # a reset moved the cursor back
    held = StreamState(position=104, position_sequence=4, recent=[(old, 10)])
    fresh = StreamState(position=106, position_sequence=6, recent=[(W0 - 60_000, 10)])
    unknown = StreamState(position=103, position_sequence=0)
    state = group_state([], leases=[lease(["00000000000000aa"], streams=["held"])]).model_copy(
        update={
            "planned_through": 107,
            "planned_through_sequence": 7,
            "streams": {"idle": idle, "ahead": ahead, "held": held, "fresh": fresh, "unknown": unknown},
        }
    )

    retired = retire_streams(state, W0, IDLE_MS)

    assert set(retired.streams) == {"ahead", "held", "fresh", "unknown"}
    assert retired.retired.streams == 1
    assert state.streams.keys() == {"idle", "ahead", "held", "fresh", "unknown"}, "the input is left as it was"
