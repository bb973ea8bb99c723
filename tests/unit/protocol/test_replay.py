"""The pure half of replays: windows a replay may serve, coverage, tickets, and complete windows."""

from __future__ import annotations

from datetime import date

import pytest

from icegroup.iceberg.describe import replay_lines
from icegroup.iceberg.errors import ReplayConflict, UsageError
from icegroup.iceberg.protocol.assignment import assign_leases
from icegroup.iceberg.protocol.completion import CLOSE_GRACE_MS, complete_windows, first_window_ms
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.replay import check_window, expire_replays, take_ticket, window_coverage, windows_between
from icegroup.iceberg.protocol.shards import DAY_MS
from icegroup.iceberg.protocol.sink_commit import ReplayCommit, ShardRange, SinkCommit
from icegroup.iceberg.protocol.state import ReplayTicket
from tests.factories import WINDOW_START_MS, MakeShard, group_state

DAY = "2026-01-01"


def group(**overrides: object) -> GroupConfig:
    """A group whose windows begin on 2025-12-30."""
    fields: dict[str, object] = {
        "name": "orders",
        "source": "demo.events",
        "sink": "demo.events_out",
        "transform": "icegroup.spark_jobs.transforms:identity",
        "window_start": "2025-12-30",
    }
    return GroupConfig.model_validate({**fields, **overrides})


def shard_range(n: int, window: int = WINDOW_START_MS) -> ShardRange:
    """The n-th shard's range in the given window."""
    return ShardRange(f"{n:016x}", "0/region=eu", 100 + n - 1, 100 + n, (100 + n,), n, 10, window)


def commit(*shards: ShardRange) -> SinkCommit:
    """A sink commit of these shards."""
    return SinkCommit(1, 0, "orders", "demo.events", "lease", 0, 0, shards, 10)


def ticket(holder: str = "replay-a", generation: int = 1, started_at_ms: int = 0) -> ReplayTicket:
    """A ticket of today's window."""
    return ReplayTicket(
        window=DAY, window_start_ms=WINDOW_START_MS, generation=generation, epoch=0, holder=holder,
        started_at_ms=started_at_ms,
    )  # fmt: skip


def test_a_window_is_checked_against_the_form_window_start_and_the_clock() -> None:
    now = WINDOW_START_MS + 5 * DAY_MS
    assert check_window(group(), DAY, now) == WINDOW_START_MS
    with pytest.raises(UsageError, match="'2026-1-1x' is not a day window; write it like 2026-01-31"):
        check_window(group(), "2026-1-1x", now)
    with pytest.raises(UsageError, match="before window_start"):
        check_window(group(), "2025-12-29", now)
    with pytest.raises(UsageError, match="has not begun yet"):
        check_window(group(), "2026-01-07", now)
    with pytest.raises(UsageError, match="does not start an hour window"):
        check_window(group(replay_window="hour"), "2026-01-01-10:30", now)


def test_from_to_names_every_window_it_overlaps() -> None:
    assert windows_between(group(), WINDOW_START_MS + 1, WINDOW_START_MS + 2 * DAY_MS + 1) == [
        "2026-01-01",
        "2026-01-02",
        "2026-01-03",
    ]


def test_coverage_is_the_windows_commits_and_what_earlier_replays_of_it_covered() -> None:
    other_day = WINDOW_START_MS + DAY_MS
    earlier = ReplayCommit(9, 0, "orders", DAY, 1, 0, (shard_range(1), shard_range(2)), 20, 20)
    commits = [commit(shard_range(2)), commit(shard_range(3), shard_range(4, other_day))]

    covered = window_coverage(WINDOW_START_MS, DAY, commits, [earlier])

    assert [s.shard_id for s in covered] == [shard_range(n).shard_id for n in (1, 2, 3)]


def test_a_live_replay_holds_its_window_and_a_dead_one_is_superseded_by_the_next_generation() -> None:
    state = group_state([], replays={DAY: ticket(generation=3, started_at_ms=0)})

    with pytest.raises(ReplayConflict, match=r"window 2026-01-01 is being replayed by replay-a \(generation 3"):
        take_ticket(state, DAY, WINDOW_START_MS, "replay-b", 3, {"replay-a": 50_000}, 60_000, 30)
    taken = take_ticket(state, DAY, WINDOW_START_MS, "replay-b", 3, {"replay-a": 50_000}, 90_000, 30)

    assert (taken.generation, taken.holder) == (4, "replay-b")
    fresh = take_ticket(group_state([]), DAY, WINDOW_START_MS, "replay-c", 7, {}, 0, 30)
    assert fresh.generation == 8, "above the sink's fence, so replays that finished are fenced out too"


def test_the_leader_expires_a_replay_whose_holder_stopped_beating() -> None:
    state = group_state([], replays={DAY: ticket(started_at_ms=0)})

    kept, dead = expire_replays(state, {"replay-a": 10_000}, 39_000, 30)
    assert dead == []
    assert kept is state
    kept, dead = expire_replays(state, {"replay-a": 10_000}, 41_000, 30)
    assert [t.holder for t in dead] == ["replay-a"]
    assert kept.replays == {}


def test_a_replay_whose_process_ended_is_expired_at_once() -> None:
    state = group_state([], replays={DAY: ticket(started_at_ms=0)})

    _, dead = expire_replays(state, {"replay-a": 10_000}, 11_000, 30, gone={"replay-a"})

    assert [t.holder for t in dead] == ["replay-a"]


def test_shards_of_a_window_being_replayed_wait_and_other_windows_are_granted(make_shard: MakeShard) -> None:
    waiting = make_shard(1, stream="0/region=eu")
    other = make_shard(2, stream="0/region=us", window_start_ms=WINDOW_START_MS + DAY_MS)
    state = group_state([waiting, other], replays={DAY: ticket()})

    leases = assign_leases(state, group(max_borrowers=4), 0, None)

    assert [lease.shard_ids for lease in leases] == [[other.shard_id]]


def test_windows_complete_once_the_cursor_passed_them_and_nothing_of_them_waits(make_shard: MakeShard) -> None:
    g = group()
    start = first_window_ms(g)
    assert date(2025, 12, 30) == date.fromordinal(start // DAY_MS + 719_163)
    cursor = WINDOW_START_MS + 3_600_000
    assert complete_windows(group_state([]), g, cursor, None) == [start, start + DAY_MS]
    pending = group_state([make_shard(1, window_start_ms=start + DAY_MS)])
    assert complete_windows(pending, g, cursor, None) == [start], "a window with a shard waiting is open"
    reported = group_state([], windows_complete_through_ms=start + DAY_MS)
    assert complete_windows(reported, g, cursor, None) == [start + DAY_MS], "each window once"
    idle_now = WINDOW_START_MS + DAY_MS + CLOSE_GRACE_MS
    assert complete_windows(reported, g, cursor, idle_now)[-1] == WINDOW_START_MS, "a caught-up group's windows end"
    assert complete_windows(group_state([]), g, None, None) == []
    just_after = WINDOW_START_MS + CLOSE_GRACE_MS - 1
    assert complete_windows(reported, g, just_after, None) == [], "a snapshot within the grace may still land"


def test_describe_lists_replays_in_flight_with_their_holder_and_heartbeat() -> None:
    state = group_state([], replays={DAY: ticket(holder="replay-run-7", generation=2, started_at_ms=WINDOW_START_MS)})

    (line,) = replay_lines(state, {"replay-run-7": WINDOW_START_MS + 4_000}, WINDOW_START_MS + 10_000)

    assert line == (
        "window 2026-01-01: generation 2 by replay-run-7 since 2026-01-01T00:00:00+00:00; last heartbeat 6s ago"
    )
    assert replay_lines(group_state([]), {}, 0) == []
