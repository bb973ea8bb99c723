"""Warm Borrowers: a lease waits for one without a deadline, one takes it, and the Leader starts them sparingly."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from pyiceberg.catalog import Catalog

from icegroup.iceberg.borrower import take_leases
from icegroup.iceberg.errors import BorrowerOutdated
from icegroup.iceberg.leader import tick
from icegroup.iceberg.protocol.borrower import (
    BorrowerRun,
    Starts,
    borrowers_to_start,
    census,
    outdated,
    rehearses,
    stale,
    starts,
    take,
    ungranted,
    waiting,
)
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.liveness import LeaseAction, RunState, lease_action
from icegroup.iceberg.protocol.state import ConfigChange, LeasePhase
from icegroup.iceberg.store.registry import load_state
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


def test_shards_no_lease_holds_are_ungranted_so_a_borrower_ticks_again_once_its_lease_ends() -> None:
    held = lease([shard(1).shard_id, shard(2).shard_id], owner_run_id="run-9")

    assert not ungranted(group_state([shard(1), shard(2)], [held]))
    assert ungranted(group_state([shard(1), shard(2), shard(3)], [held]))  # cut while its stream was busy
    assert not ungranted(group_state([], []))


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


def test_the_leader_keeps_warm_borrowers_up_with_no_work_making_a_run_for_work_warm_first() -> None:
    none = census([], group_state([]), {}, NOW, 30, 2)
    warm_up = census([BorrowerRun("w", RunState.RUNNING, NOW, warm=True)], group_state([]), {"w": NOW}, NOW, 30, 2)
    cold_up = census([BorrowerRun("c", RunState.QUEUED)], group_state([]), {}, NOW, 30, 2)

    assert starts(0, none, warm_borrowers=1, max_borrowers=2) == Starts(warm=1, for_work=0), "idle: one warm run"
    assert starts(0, none, warm_borrowers=0, max_borrowers=2) == Starts(warm=0, for_work=0), "0: today's cold path"
    assert starts(2, none, warm_borrowers=1, max_borrowers=2) == Starts(warm=1, for_work=1), "the first is the warm one"
    assert starts(1, none, warm_borrowers=2, max_borrowers=2) == Starts(warm=2, for_work=0)
    assert starts(0, warm_up, warm_borrowers=1, max_borrowers=2) == Starts(warm=0, for_work=0), "one is up"
    assert (warm_up.warm, cold_up.warm) == (1, 0), "a run started for work is not counted warm"
    assert starts(0, cold_up, warm_borrowers=2, max_borrowers=2) == Starts(warm=1, for_work=0), "within max_borrowers"


def test_a_silent_warm_run_is_not_counted_warm() -> None:
    runs = [BorrowerRun("w", RunState.RUNNING, NOW - 600_000, warm=True)]

    found = census(runs, group_state([]), {"w": NOW - 120_000}, NOW, 30, 2)

    assert (found.silent, found.warm) == (("w",), 0)
    assert starts(0, found, warm_borrowers=1, max_borrowers=2) == Starts(warm=1, for_work=0)


def test_warm_runs_of_older_code_are_ended_busy_or_not_and_runs_for_work_are_left_to_end() -> None:
    runs = [
        BorrowerRun("old-idle", RunState.RUNNING, NOW, warm=True, code="aaa"),
        BorrowerRun("old-busy", RunState.RUNNING, NOW, warm=True, code="aaa"),
        BorrowerRun("new", RunState.RUNNING, NOW, warm=True, code="bbb"),
        BorrowerRun("for-work", RunState.RUNNING, NOW, code="aaa"),
    ]

    assert stale(runs, code="bbb") == ["old-idle", "old-busy"]


def test_a_borrower_is_outdated_only_when_the_registry_moved_on_from_its_config() -> None:
    moved = ConfigChange(at_ms=NOW, old_hash="old", new_hash="new", sink_snapshot=None)

    assert outdated(group_state([], config_hash="new", config_changes=[moved]), "old")
    assert not outdated(group_state([], config_hash="new", config_changes=[moved]), "new")
    assert not outdated(group_state([], config_hash="new"), "other"), "never granted under: connect refuses, loudly"
    assert not outdated(group_state([], config_hash=None), "old"), "a registry that pins nothing yet"


def test_a_borrower_whose_config_is_outdated_takes_nothing_and_says_so(catalog: Catalog, make_group: MakeGroup) -> None:
    group = make_group(max_borrowers=1)
    append_batches(create_source(catalog, group.source), 1, 6)
    tick(catalog, group, missing, now_ms=NOW)
    changed = group.model_copy(update={"filter": "amount > 0", "on_change": "continue"})
    append_batches(catalog.load_table(group.source), 1, 6)
    tick(catalog, changed, missing, now_ms=NOW + 1000)  # the Leader, reloaded, records the change

    with pytest.raises(BorrowerOutdated, match=f"pinned to config hash {changed.config_hash}"):
        take_leases(catalog, group, "run-old", slots=1)
    assert len(take_leases(catalog, changed, "run-new", slots=2)) >= 1, "the leases still wait for a Borrower"


def test_a_borrowers_own_tick_never_pins_its_older_config_back(catalog: Catalog, make_group: MakeGroup) -> None:
    group = make_group(max_borrowers=1)
    append_batches(create_source(catalog, group.source), 1, 6)
    with pytest.raises(BorrowerOutdated, match="pinned to config hash None"):
        tick(catalog, group, missing, now_ms=NOW, pin_config=False)  # creating the registry is the Leader's
    assert load_state(catalog, group.name).state is None
    tick(catalog, group, missing, now_ms=NOW)
    changed = group.model_copy(update={"filter": "amount > 0", "on_change": "continue"})
    tick(catalog, changed, missing, now_ms=NOW + 1000)  # the Leader, reloaded, records the change
    append_batches(catalog.load_table(group.source), 1, 6)
    before = load_state(catalog, group.name).state

    with pytest.raises(BorrowerOutdated, match="leaves ticking to the Leader"):
        tick(catalog, group, missing, now_ms=NOW + 2000, pin_config=False)

    assert load_state(catalog, group.name).state == before, "nothing committed"
    assert before is not None
    assert before.config_hash == changed.config_hash
    mine = tick(catalog, changed, missing, now_ms=NOW + 3000, pin_config=False)
    assert mine.new_shards > 0, "a Borrower on the registry's config ticks as any Leader does"


@pytest.mark.parametrize(("warm", "maximum", "ok"), [(0, 1, True), (2, 2, True), (3, 2, False)])
def test_warm_borrowers_fit_within_max_borrowers(warm: int, maximum: int, ok: bool) -> None:
    fields = {"name": "g", "source": "a.b", "sink": "a.c", "warm_borrowers": warm, "max_borrowers": maximum}
    if ok:
        assert GroupConfig.model_validate(fields).warm_borrowers == warm
    else:
        with pytest.raises(ValidationError, match="warm_borrowers: 3 is more than max_borrowers 2"):
            GroupConfig.model_validate(fields)


@pytest.mark.parametrize(
    ("stays_warm", "rehearsed", "largest_lease_rows", "rehearsal_rows", "expected"),
    [
        (True, False, 0, 1_000_000, True),
        (True, False, 300, 1_000_000, True),  # a small first lease compiled little
        (True, False, 1_000_000, 1_000_000, False),  # a lease that large compiled the path already
        (True, True, 0, 1_000_000, False),  # once per run
        (True, False, 0, 0, False),  # turned off
        (False, False, 0, 1_000_000, False),  # a Borrower started for work exits when idle
    ],
)
def test_only_an_idle_borrower_that_stays_warm_rehearses_once_until_a_lease_as_large_ran(
    stays_warm: bool, rehearsed: bool, largest_lease_rows: int, rehearsal_rows: int, expected: bool
) -> None:
    assert rehearses(stays_warm, rehearsed, largest_lease_rows, rehearsal_rows) is expected
