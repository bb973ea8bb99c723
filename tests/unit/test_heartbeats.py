"""Heartbeats: the catalog-database rows Borrowers renew, and the liveness rule that reads them."""

from __future__ import annotations

import threading
import time

import pytest
from pyiceberg.catalog import Catalog

from iceberg.groups import GroupConfig
from iceberg.heartbeats import beat, ensure_table, forget, heartbeat, read_beats
from iceberg.leader import tick
from iceberg.protocol.liveness import LeaseAction, RunState, hold_of, holder_of, lease_action
from iceberg.protocol.phases import check_liveness
from iceberg.protocol.state import LeasePhase
from tests.factories import append_batches, create_source, group_state, lease, shard

NOW = 1_900_000_000_000


@pytest.fixture
def group(ns: str) -> str:
    """A group name of this test's own."""
    return f"g_{ns}"


def test_a_beat_is_written_updated_read_and_forgotten(catalog: Catalog, group: str) -> None:
    ensure_table(catalog)

    beat(catalog, group, "run-1", now_ms=1_000)
    beat(catalog, group, "run-1", now_ms=2_000)
    beat(catalog, group, "run-2", now_ms=1_500)
    beat(catalog, f"{group}_other", "run-1", now_ms=9_000)

    assert {h: b.beat_ms for h, b in read_beats(catalog, group).items()} == {"run-1": 2_000, "run-2": 1_500}
    forget(catalog, group, ["run-1"])
    assert set(read_beats(catalog, group)) == {"run-2"}


def test_first_starts_at_the_same_moment_all_create_the_table(catalog: Catalog, group: str) -> None:
    errors: list[BaseException] = []

    def start(name: str) -> None:
        try:
            ensure_table(catalog)
            beat(catalog, group, name)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=start, args=(f"run-{i}",)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == []
    assert len(read_beats(catalog, group)) == 4


def test_the_heartbeat_beats_before_and_while_the_block_runs_and_forgets_after(catalog: Catalog, group: str) -> None:
    with heartbeat(catalog, group, "run-1", interval_s=0.05):
        first = read_beats(catalog, group)["run-1"].beat_ms
        time.sleep(0.3)
        later = read_beats(catalog, group)["run-1"].beat_ms

    assert later > first
    assert read_beats(catalog, group) == {}


def test_a_holder_silent_past_the_session_timeout_is_revoked_and_its_run_terminated() -> None:
    held = lease([shard(1).shard_id], deadline_ms=NOW + 3_600_000, phase=LeasePhase.GRANTED)

    decision = lease_action(held, RunState.RUNNING, NOW, last_beat_ms=NOW - 31_000, session_timeout_s=30)

    assert decision.action is LeaseAction.REGRANT
    assert decision.terminate
    assert "no heartbeat for 31s (session_timeout_s: 30)" in decision.reason


@pytest.mark.parametrize("last_beat_ms", [NOW - 29_000, None], ids=["beating", "never-beat"])
def test_a_beating_holder_or_one_not_started_yet_keeps_its_lease(last_beat_ms: int | None) -> None:
    held = lease([shard(1).shard_id], deadline_ms=NOW + 3_600_000, phase=LeasePhase.GRANTED)

    decision = lease_action(held, RunState.RUNNING, NOW, last_beat_ms=last_beat_ms, session_timeout_s=30)

    assert decision.action is LeaseAction.WAIT


def test_the_holder_is_the_owning_run_else_the_lease_attempt() -> None:
    assert holder_of(lease(["a"], owner_run_id="run-7")) == "run-7"
    held = lease(["a"], attempt=2, owner_run_id=None)
    assert holder_of(held) == f"{held.lease_id}#2"


def test_a_hold_says_who_holds_the_lease_and_until_when() -> None:
    held = lease(["a"], owner_run_id="run-7", attempt=1, deadline_ms=NOW + 600_000, streams=["0:region=eu"])

    hold = hold_of(held, {"run-7": NOW - 10_000}, session_timeout_s=30)

    assert hold.regrant_at_ms == NOW + 20_000
    assert hold.describe(NOW) == (
        f"lease {held.lease_id}#1 (0:region=eu) held by run-7: last heartbeat 10s ago; "
        "re-granted in 20s if it stays silent, at the latest in 600s"
    )
    assert (
        hold_of(held, {}, 30)
        .describe(NOW)
        .endswith("no heartbeat yet; re-granted in 600s if it stays silent, at the latest in 600s")
    )


def test_check_liveness_revokes_only_the_silent_holders_leases(make_group: type[GroupConfig]) -> None:
    silent = lease([shard(1).shard_id], owner_run_id="dead", deadline_ms=NOW + 3_600_000, streams=["a"])
    alive = lease([shard(2).shard_id], owner_run_id="alive", deadline_ms=NOW + 3_600_000, streams=["b"])
    state = group_state([shard(1), shard(2)], [silent, alive])
    running = {silent.lease_id: RunState.RUNNING, alive.lease_id: RunState.RUNNING}

    out = check_liveness(
        state, make_group(), running, set(), NOW, None, beats={"dead": NOW - 60_000, "alive": NOW - 1_000}
    )

    assert [old.lease_id for old, _ in out.revoked] == [silent.lease_id]
    assert out.terminate == [silent]
    assert out.state.leases[silent.lease_id].attempt == 1


def test_a_tick_regrants_the_leases_of_a_consumer_whose_heartbeat_stopped(
    catalog: Catalog, make_group: type[GroupConfig]
) -> None:
    group = make_group(max_borrowers=1, session_timeout_s=30)
    append_batches(create_source(catalog, group.source), 1, 6)
    granted = tick(catalog, group, lambda _: RunState.MISSING, owner_run_id="consumer-1", now_ms=NOW)
    assert [x.owner_run_id for x in granted.launch] == ["consumer-1"]
    ensure_table(catalog)
    beat(catalog, group.name, "consumer-1", now_ms=NOW)

    still = tick(catalog, group, lambda _: RunState.RUNNING, owner_run_id="consumer-2", now_ms=NOW + 29_000)
    later = tick(catalog, group, lambda _: RunState.RUNNING, owner_run_id="consumer-2", now_ms=NOW + 31_000)

    assert still.launch == []
    assert [(x.owner_run_id, x.attempt) for x in later.launch] == [("consumer-2", 1)]
    assert [(x.lease_id, x.attempt) for x in later.terminate] == [(x.lease_id, 0) for x in granted.launch]
