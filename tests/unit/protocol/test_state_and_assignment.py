"""GroupState transitions (add_shards, apply_commits, stream_cursors) and lease assignment."""

from __future__ import annotations

import re
from typing import Any

import pytest

from icegroup.iceberg.protocol.assignment import assign_leases, make_lease_id
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.shards import DAY_MS, Shard
from icegroup.iceberg.protocol.state import RATE_SAMPLES, GroupState, Lease, StreamState, add_shards, apply_commits
from tests import factories
from tests.factories import MakeLease

W0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
W1 = W0 + DAY_MS
W2 = W1 + DAY_MS


def shard(shard_id: str, stream: str, seq: int, *, window: int = W0, rows: int = 10) -> Shard:
    """Shard ending at snapshot 100+seq, starting after 100+seq-1."""
    return factories.shard(seq, stream=stream, shard_id=shard_id, window_start_ms=window, rows=rows)


def state_of(*shards: Shard, leases: tuple[Lease, ...] = (), epoch: int = 0, **streams: StreamState) -> GroupState:
    """Group ``orders`` with these pending shards, leases in flight and stream states."""
    return GroupState(
        group="orders",
        source="demo.events",
        sink="demo.events_out",
        epoch=epoch,
        start_position=None,
        planned_through=None,
        streams=dict(streams),
        shards={s.shard_id: s for s in shards},
        leases={lease.lease_id: lease for lease in leases},
    )


def group_of(**fields: Any) -> GroupConfig:
    """Group ``orders`` with these config fields."""
    return GroupConfig.model_validate({"name": "orders", "source": "demo.events", "sink": "demo.events_out", **fields})


def assign(state: GroupState, now_ms: int = 1_000_000, **fields: Any) -> list[Lease]:
    """The leases granted for the state under a group with these config fields."""
    return assign_leases(state, group_of(**fields), now_ms=now_ms, sink_snapshot=None)


# add_shards


def test_add_shards_records_shards_and_moves_planned_through() -> None:
    before = state_of()
    a1, b2 = shard("a1", "a", 1), shard("b2", "b", 2)

    after = add_shards(before, [a1, b2], through=105)

    assert after.shards == {"a1": a1, "b2": b2}
    assert after.planned_through == 105
    assert after.streams["a"] == StreamState(position=100, position_sequence=0)
    assert after.streams["b"] == StreamState(position=101, position_sequence=0)
    assert before.shards == {}
    assert before.planned_through is None


def test_add_shards_is_idempotent() -> None:
    shards = [shard("a1", "a", 1), shard("a2", "a", 2)]

    once = add_shards(state_of(), shards, through=102)
    twice = add_shards(once, shards, through=102)

    assert twice.model_dump() == once.model_dump()


def test_add_shards_never_replaces_a_known_shard() -> None:
    original = shard("a1", "a", 1, rows=10)

    after = add_shards(state_of(original), [shard("a1", "a", 1, rows=999)], through=101)

    assert after.shards["a1"].rows == 10


def test_add_shards_keeps_the_position_of_a_known_stream() -> None:
    before = state_of(a=StreamState(position=90, position_sequence=3, committed_shards=4))

    after = add_shards(before, [shard("a5", "a", 5)], through=105)

    assert after.streams["a"] == StreamState(position=90, position_sequence=3, committed_shards=4)


# apply_commits


def test_apply_commits_advances_positions_and_counts_rows() -> None:
    state = add_shards(
        state_of(),
        [shard("a1", "a", 1, rows=10), shard("a2", "a", 2, rows=5), shard("b3", "b", 3)],
        through=103,
    )

    after, done = apply_commits(state, ["a1", "a2"])

    assert [s.shard_id for s in done] == ["a1", "a2"]
    assert after.streams["a"] == StreamState(position=102, position_sequence=2, committed_shards=2, committed_rows=15)
    assert after.streams["b"] == state.streams["b"]
    assert set(after.shards) == {"b3"}
    assert set(state.shards) == {"a1", "a2", "b3"}


def test_apply_commits_applies_in_sequence_order() -> None:
    state = state_of(shard("a1", "a", 1), shard("a2", "a", 2))

    after, done = apply_commits(state, ["a2", "a1"])

    assert [s.shard_id for s in done] == ["a1", "a2"]
    assert after.streams["a"].position == 102


def test_apply_commits_never_moves_a_position_back() -> None:
    state = state_of(shard("a1", "a", 1), shard("a2", "a", 2))

    later, _ = apply_commits(state, ["a2"])
    after, _ = apply_commits(later, ["a1"])

    assert after.streams["a"].position == 102
    assert after.streams["a"].position_sequence == 2
    assert after.streams["a"].committed_shards == 2


def test_apply_commits_ignores_unknown_and_already_committed_shards() -> None:
    state = state_of(shard("a1", "a", 1), shard("a2", "a", 2))
    once, _ = apply_commits(state, ["a1"])

    again, done = apply_commits(once, ["a1", "zz"])

    assert done == []
    assert again.model_dump() == once.model_dump()


def test_apply_commits_retires_a_lease_whose_shards_are_all_committed(make_lease: MakeLease) -> None:
    state = state_of(
        shard("a1", "a", 1),
        shard("b2", "b", 2),
        shard("b3", "b", 3),
        leases=(
            make_lease(["a1"], streams=["a"], lease_id="la"),
            make_lease(["b2", "b3"], streams=["b"], lease_id="lb"),
        ),
    )

    after, _ = apply_commits(state, ["a1", "b2"])

    assert set(after.leases) == {"lb"}
    assert after.leases_done == 1


def test_apply_commits_retires_a_lease_once_its_last_shard_commits(make_lease: MakeLease) -> None:
    state = state_of(
        shard("b2", "b", 2), shard("b3", "b", 3), leases=(make_lease(["b2", "b3"], streams=["b"], lease_id="lb"),)
    )

    first, _ = apply_commits(state, ["b2"])
    second, _ = apply_commits(first, ["b3"])

    assert set(first.leases) == {"lb"}
    assert second.leases == {}
    assert second.leases_done == 1
    assert second.is_idle()


# stream_cursors


def test_stream_cursors_are_positions_then_the_last_pending_shard() -> None:
    state = state_of(
        shard("a3", "a", 3),
        shard("a2", "a", 2),
        a=StreamState(position=100, position_sequence=0),
        b=StreamState(position=90, position_sequence=1),
        c=StreamState(position=None),
    )

    assert state.stream_cursors() == {"a": 103, "b": 90, "c": None}


def test_no_pending_shards_no_leases() -> None:
    assert assign(state_of()) == []


def test_assign_fills_max_borrowers_minus_leases_in_flight(make_lease: MakeLease) -> None:
    pending = [shard(f"{s}{i}", s, i) for i, s in enumerate("abcd", start=1)]
    state = state_of(shard("x9", "x", 9), *pending, leases=(make_lease(["x9"], streams=["x"], lease_id="lx"),))

    assert len(assign(state, max_borrowers=3)) == 2
    assert assign(state, max_borrowers=1) == []


def test_assign_never_gives_a_stream_held_by_a_lease_in_flight(make_lease: MakeLease) -> None:
    state = state_of(
        shard("a1", "a", 1),
        shard("a2", "a", 2),
        shard("b3", "b", 3),
        leases=(make_lease(["a1"], streams=["a"], lease_id="la"),),
    )

    leases = assign(state, max_borrowers=4)

    assert [(lease.streams, lease.shard_ids) for lease in leases] == [(["b"], ["b3"])]


def test_a_lease_holds_shards_of_one_window_only() -> None:
    state = state_of(shard("a1", "a", 1, window=W0), shard("a2", "a", 2, window=W0), shard("a3", "a", 3, window=W1))

    (lease,) = assign(state, max_borrowers=2)

    assert lease.shard_ids == ["a1", "a2"]
    assert lease.window_start_ms == W0


def test_lease_max_shards_caps_a_stream_run() -> None:
    state = state_of(*(shard(f"a{i}", "a", i) for i in range(1, 6)))

    (lease,) = assign(state, max_borrowers=1, lease_max_shards=2)

    assert lease.shard_ids == ["a1", "a2"]


def test_lease_max_shards_caps_a_lease_of_several_streams() -> None:
    state = state_of(shard("a1", "a", 1), shard("a2", "a", 2), shard("b3", "b", 3), shard("b4", "b", 4))

    leases = assign(state, max_borrowers=1, lease_max_shards=2)

    assert leases
    assert all(len(lease.shard_ids) <= 2 for lease in leases)


def test_make_lease_id_ignores_shard_order() -> None:
    lease_id = make_lease_id("orders", 0, ["s1", "s2", "s3"])

    assert lease_id == make_lease_id("orders", 0, ["s3", "s1", "s2"])
    assert re.fullmatch(r"[0-9a-f]{16}", lease_id)
    assert lease_id != make_lease_id("orders", 1, ["s1", "s2", "s3"])
    assert lease_id != make_lease_id("refunds", 0, ["s1", "s2", "s3"])
    assert lease_id != make_lease_id("orders", 0, ["s1", "s2"])


def test_lease_ids_are_deterministic() -> None:
    state = state_of(shard("a1", "a", 1), shard("b2", "b", 2), epoch=3)

    first = assign(state, max_borrowers=2)
    second = assign(state, now_ms=5_000_000, max_borrowers=2)

    assert [lease.lease_id for lease in first] == [lease.lease_id for lease in second]
    assert all(lease.lease_id == make_lease_id("orders", 3, lease.shard_ids) for lease in first)


def test_oldest_window_is_served_first() -> None:
    state = state_of(shard("z1", "z", 1, window=W0, rows=1), shard("a2", "a", 2, window=W1, rows=1000))

    (lease,) = assign(state, max_borrowers=1)

    assert lease.streams == ["z"]
    assert lease.window_start_ms == W0


def test_free_slots_left_by_the_oldest_window_go_to_newer_windows() -> None:
    state = state_of(shard("a1", "a", 1, window=W0), shard("b2", "b", 2, window=W1), shard("c3", "c", 3, window=W2))

    leases = assign(state, max_borrowers=2)

    assert [(lease.window_start_ms, lease.streams) for lease in leases] == [(W0, ["a"]), (W1, ["b"])]


def test_streams_are_spread_over_free_slots_by_rows() -> None:
    state = state_of(shard("a1", "a", 1, rows=100), shard("b2", "b", 2, rows=10), shard("c3", "c", 3, rows=10))

    leases = assign(state, max_borrowers=2, leases_per_borrower=1)

    assert sorted(lease.streams for lease in leases) == [["a"], ["b", "c"]]


@pytest.mark.parametrize(
    ("max_borrowers", "leases_per_borrower", "leases"), [(2, 2, 1), (4, 2, 2), (3, 2, 2), (2, 1, 2), (8, 2, 3)]
)
def test_a_windows_streams_go_in_one_lease_per_borrower_run_the_slots_make(
    max_borrowers: int, leases_per_borrower: int, leases: int
) -> None:
    state = state_of(shard("a1", "a", 1), shard("b2", "b", 2), shard("c3", "c", 3))

    granted = assign(state, max_borrowers=max_borrowers, leases_per_borrower=leases_per_borrower)

    assert len(granted) == leases, "one run's leases share a session: its streams go in one lease, one Spark job"
    assert sorted(stream for lease in granted for stream in lease.streams) == ["a", "b", "c"]


def test_streams_a_full_lease_leaves_out_take_a_free_slot_before_a_newer_window() -> None:
    state = state_of(
        shard("a1", "a", 1), shard("a2", "a", 2), shard("b3", "b", 3), shard("c4", "c", 4, window=W1)
    )  # fmt: skip

    granted = assign(state, max_borrowers=2, leases_per_borrower=2, lease_max_shards=2)

    assert [(lease.window_start_ms, lease.streams) for lease in granted] == [(W0, ["a"]), (W0, ["b"])]


def test_a_full_lease_leaves_no_slot_idle() -> None:
    state = state_of(*(shard(f"{s}{n}", s, n) for n in range(6) for s in "abc"))

    granted = assign(state, max_borrowers=2, leases_per_borrower=2, lease_max_shards=2)

    assert len(granted) == 2, "the second slot takes a stream the first lease had no room for"
    assert all(len(lease.shard_ids) == 2 for lease in granted)


def test_a_later_window_gets_a_lease_of_its_own_while_slots_are_free() -> None:
    state = state_of(shard("a1", "a", 1), shard("b2", "b", 2), shard("c3", "c", 3, window=W1))

    granted = assign(state, max_borrowers=2, leases_per_borrower=2)

    assert [lease.streams for lease in granted] == [["a", "b"], ["c"]]


def test_the_stream_waiting_longest_gets_the_free_slot_however_it_is_named() -> None:
    state = state_of(
        shard("u1", "us", 1), shard("u2", "us", 2),
        shard("a7", "apac", 7), shard("a8", "apac", 8),
        shard("e7", "eu", 7), shard("e8", "eu", 8),
    )  # fmt: skip

    (lease,) = assign(state, max_borrowers=1, lease_max_shards=2)

    assert lease.streams == ["us"], "its next shard is the oldest; the others' names sort first"
    assert lease.shard_ids == ["u1", "u2"]


def test_no_empty_leases_when_slots_outnumber_streams() -> None:
    state = state_of(shard("a1", "a", 1), shard("b2", "b", 2))

    leases = assign(state, max_borrowers=4)

    assert sorted(lease.streams for lease in leases) == [["a"], ["b"]]


def test_shards_of_a_lease_are_in_commit_order() -> None:
    state = state_of(shard("a3", "a", 3), shard("b2", "b", 2), shard("a1", "a", 1))

    (lease,) = assign(state, max_borrowers=1)

    assert lease.shard_ids == ["a1", "b2", "a3"]
    assert lease.streams == ["a", "b"]


def test_grant_records_time_deadline_sink_snapshot_and_owner() -> None:
    state = state_of(shard("a1", "a", 1), epoch=2)

    (lease,) = assign_leases(
        state, group_of(lease_timeout_s=60), now_ms=1_000_000, sink_snapshot=42, owner_run_id="run-1"
    )

    assert lease.granted_at_ms == 1_000_000
    assert lease.deadline_ms == 1_000_000 + 60 * 1000
    assert lease.sink_snapshot_at_grant == 42
    assert lease.owner_run_id == "run-1"
    assert lease.epoch == 2
    assert lease.attempt == 0


def test_streams_without_rows_get_no_empty_lease() -> None:
    state = state_of(shard("a1", "a", 1, rows=0), shard("b2", "b", 2, rows=0), shard("c3", "c", 3, rows=0))

    leases = assign(state, max_borrowers=3)

    assert leases
    assert all(lease.shard_ids for lease in leases)
    assert sorted(sid for lease in leases for sid in lease.shard_ids) == ["a1", "b2", "c3"]


def test_a_streams_rate_comes_from_the_last_ticks_that_found_its_commits_and_stays_bounded() -> None:
    shards = [shard(f"a{n}", "a", n, rows=100) for n in range(1, 12)]
    state = add_shards(state_of(), shards, through=111)

    assert state.streams["a"].rate_rows_s is None
    for n in range(1, 12):
        state, _ = apply_commits(state, [f"a{n}"], now_ms=n * 2_000)  # 100 rows every 2 s

    assert len(state.streams["a"].recent) == RATE_SAMPLES
    assert state.streams["a"].rate_rows_s == 50.0
    assert apply_commits(state, [], now_ms=99_000)[0].streams["a"].recent == state.streams["a"].recent
