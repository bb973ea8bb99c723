"""Warm Borrowers: a lease waits for one without a deadline, one takes it, and the Leader starts them sparingly."""

from __future__ import annotations

from pyiceberg.catalog import Catalog

from icegroup.iceberg.borrower import take_leases
from icegroup.iceberg.leader import tick
from icegroup.iceberg.protocol.borrower import BorrowerRun, borrowers_to_start, census, take, waiting
from icegroup.iceberg.protocol.liveness import LeaseAction, RunState, lease_action
from icegroup.iceberg.protocol.state import LeasePhase
from tests.factories import MakeGroup, append_batches, create_source, group_state, lease, shard

NOW = 1_900_000_000_000


def missing(_: object) -> RunState:
    """No Borrower run is known for any lease: a sensor's view of a waiting lease."""
    return RunState.MISSING


def test_a_waiting_lease_has_no_deadline_however_long_no_borrower_takes_it() -> None:
    waits = lease([shard(1).shard_id], owner_run_id=None, deadline_ms=NOW - 3_600_000)

    decision = lease_action(waits, RunState.MISSING, NOW)

    assert (decision.phase, decision.action) == (LeasePhase.GRANTING, LeaseAction.LAUNCH)


def test_a_borrower_takes_the_oldest_waiting_leases_into_its_free_slots_with_a_fresh_deadline() -> None:
    a, b, c = (lease([shard(n).shard_id], owner_run_id=None, granted_at_ms=n) for n in (1, 2, 3))
    held = lease([shard(4).shard_id], owner_run_id="other")
    state = group_state([shard(n) for n in range(1, 5)], [a, b, c, held])

    new, taken = take(state, "run-9", NOW, timeout_s=600, slots=2)

    assert [t.lease_id for t in taken] == [a.lease_id, b.lease_id]
    assert all(t.owner_run_id == "run-9" and t.deadline_ms == NOW + 600_000 for t in taken)
    assert all(t.phase is LeasePhase.GRANTED and t.attempt == 0 for t in taken)
    assert [w.lease_id for w in waiting(new)] == [c.lease_id]
    assert new.leases[held.lease_id] == held


def test_a_queued_borrower_never_loses_its_lease_and_the_deadline_counts_from_the_take(
    catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group(max_borrowers=1, lease_timeout_s=60)
    append_batches(create_source(catalog, group.source), 1, 6)
    (granted,) = tick(catalog, group, missing, now_ms=NOW).launch
    assert granted.owner_run_id is None

    hour_later = tick(catalog, group, missing, now_ms=NOW + 3_600_000)  # the Borrower run sat in the queue

    still = hour_later.state.leases[granted.lease_id]
    assert (still.attempt, still.owner_run_id, hour_later.regranted) == (0, None, 0)
    ((taken, shards),) = take_leases(catalog, group, "run-1", slots=1, now_ms=NOW + 3_700_000)
    assert taken.lease_id == granted.lease_id
    assert taken.owner_run_id == "run-1"
    assert taken.deadline_ms == NOW + 3_700_000 + 60_000, "counted from the take, not from the grant"
    assert [s.shard_id for s in shards] == granted.shard_ids
    assert take_leases(catalog, group, "run-2", slots=1) == [], "a taken lease is no one else's"


def test_a_consume_tick_takes_a_lease_the_sensor_granted(catalog: Catalog, make_group: MakeGroup) -> None:
    group = make_group(max_borrowers=1)
    append_batches(create_source(catalog, group.source), 1, 6)
    (granted,) = tick(catalog, group, missing, now_ms=NOW).launch

    mine = tick(catalog, group, missing, owner_run_id="consume-1", now_ms=NOW + 1000)

    (launched,) = mine.launch
    assert (launched.lease_id, launched.attempt, launched.owner_run_id) == (granted.lease_id, 0, "consume-1")


def test_the_census_counts_queued_and_beating_borrowers_and_finds_the_silent_ones() -> None:
    held = lease([shard(1).shard_id], owner_run_id="beating")
    state = group_state([shard(1)], [held])
    runs = [
        BorrowerRun("queued", RunState.QUEUED),
        BorrowerRun("beating", RunState.RUNNING, started_ms=NOW - 600_000),
        BorrowerRun("killed", RunState.RUNNING, started_ms=NOW - 600_000),
        BorrowerRun("starting", RunState.RUNNING, started_ms=NOW - 10_000),
        BorrowerRun("never-beat", RunState.RUNNING, started_ms=NOW - 600_000),
    ]
    beats = {"beating": NOW - 5_000, "killed": NOW - 31_000}

    found = census(runs, state, beats, NOW, session_timeout_s=30, slots_per_borrower=2)

    assert found.live == ("queued", "beating", "starting")
    assert found.silent == ("killed", "never-beat")
    assert found.free_slots == 2 + 1 + 2


def test_a_borrower_whose_process_ended_is_silent_at_once_unless_it_is_still_queued() -> None:
    runs = [BorrowerRun("ended", RunState.RUNNING, NOW - 60_000), BorrowerRun("queued", RunState.QUEUED)]

    found = census(runs, group_state([]), {"ended": NOW - 1_000}, NOW, 30, 2, gone={"ended", "queued"})

    assert (found.live, found.silent) == (("queued",), ("ended",))


def test_borrowers_start_only_for_work_no_live_one_has_room_for_within_max_borrowers() -> None:
    none = census([], group_state([]), {}, NOW, 30, 2)
    one_idle = census([BorrowerRun("a", RunState.RUNNING, NOW)], group_state([]), {"a": NOW}, NOW, 30, 2)

    assert borrowers_to_start(0, none, slots_per_borrower=2, max_borrowers=4) == 0
    assert borrowers_to_start(1, none, slots_per_borrower=2, max_borrowers=4) == 1
    assert borrowers_to_start(5, none, slots_per_borrower=2, max_borrowers=4) == 3
    assert borrowers_to_start(5, none, slots_per_borrower=2, max_borrowers=2) == 2
    assert borrowers_to_start(2, one_idle, slots_per_borrower=2, max_borrowers=4) == 0
    assert borrowers_to_start(3, one_idle, slots_per_borrower=2, max_borrowers=4) == 1
    assert borrowers_to_start(9, one_idle, slots_per_borrower=1, max_borrowers=1) == 0
