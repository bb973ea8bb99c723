"""Heartbeats: the catalog-database rows Borrowers renew, and the liveness rule that reads them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from pyiceberg.catalog import Catalog

from icegroup.iceberg.config.lakehouse import LakehouseConfig
from icegroup.iceberg.leader import tick
from icegroup.iceberg.protocol.leader import check_liveness
from icegroup.iceberg.protocol.liveness import LeaseAction, RunState, hold_of, holder_of, lease_action
from icegroup.iceberg.protocol.state import LeasePhase
from icegroup.iceberg.store.heartbeats import (
    HEARTBEATS,
    beat,
    ensure_table,
    forget,
    gone_holders,
    heartbeat,
    process_gone,
    process_token,
    read_beats,
)
from tests.factories import MakeGroup, append_batches, create_source, group_state, lease, shard

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


def test_a_warm_borrower_keeps_its_row_with_a_last_beat_so_its_ending_run_does_not_look_silent(
    catalog: Catalog, group: str
) -> None:
    with heartbeat(catalog, group, "run-1", interval_s=60, forget_at_end=False):
        first = read_beats(catalog, group)["run-1"].beat_ms
        time.sleep(0.05)

    assert read_beats(catalog, group)["run-1"].beat_ms > first


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


def test_check_liveness_revokes_only_the_silent_holders_leases(make_group: MakeGroup) -> None:
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
    catalog: Catalog, make_group: MakeGroup
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


def test_a_process_token_names_a_running_process_and_is_gone_once_it_ended() -> None:
    mine = process_token()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    token = process_token(child.pid)
    assert mine is not None
    assert token is not None

    assert not process_gone(mine)
    assert not process_gone(token)
    child.kill()
    child.wait()
    assert process_gone(token)


def test_a_pid_reused_by_another_process_or_a_zombie_counts_as_gone() -> None:
    mine = process_token()
    assert mine is not None
    scope, pid, started = mine.rsplit("/", 2)

    assert process_gone(f"{scope}/{pid}/{int(started) - 1}"), "same pid, another start time: another process"
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    token = process_token(child.pid)
    while child.poll() is None and Path(f"/proc/{child.pid}/stat").read_text().split(")")[1].split()[0] != "Z":
        time.sleep(0.01)
    assert token is None or process_gone(token), "an exited child not reaped yet is gone too"
    child.wait()


@pytest.mark.parametrize(
    "token",
    [None, "", "not-a-token", "another-boot/pid:[1]/1/1", f"{os.getpid()}"],
    ids=["none", "empty", "garbage", "other-machine", "pid-only"],
)
def test_a_process_on_another_machine_or_an_unreadable_token_is_left_to_the_session_timeout(token: str | None) -> None:
    assert not process_gone(token)


def test_a_holder_whose_process_ended_is_revoked_at_once_and_its_run_terminated() -> None:
    held = lease([shard(1).shard_id], deadline_ms=NOW + 3_600_000, phase=LeasePhase.GRANTED)

    decision = lease_action(
        held, RunState.RUNNING, NOW, last_beat_ms=NOW - 1_000, session_timeout_s=30, holder_gone=True
    )

    assert decision.action is LeaseAction.REGRANT
    assert decision.terminate
    assert decision.reason == "its Borrower's process ended"


def test_a_table_made_before_the_process_column_gains_it(catalog: Catalog, group: str) -> None:
    engine = catalog.engine  # type: ignore[attr-defined]
    HEARTBEATS.drop(engine, checkfirst=True)
    with engine.begin() as connection:
        connection.exec_driver_sql(
            "CREATE TABLE icegroup_heartbeats (group_name VARCHAR(255), holder VARCHAR(255), beat_ms BIGINT, "
            "pid INTEGER, host VARCHAR(255), PRIMARY KEY (group_name, holder))"
        )
        connection.exec_driver_sql(f"INSERT INTO icegroup_heartbeats VALUES ('{group}', 'old', 1000, 1, 'h')")

    assert read_beats(catalog, group)["old"].process is None
    beat(catalog, group, "new")
    assert read_beats(catalog, group)["new"].process == process_token()


def test_a_tick_regrants_at_once_the_leases_of_a_consumer_killed_with_kill_9(
    catalog: Catalog, lakehouse: LakehouseConfig, make_group: MakeGroup, lake_home: Path
) -> None:
    group = make_group(max_borrowers=1, session_timeout_s=30)
    append_batches(create_source(catalog, group.source), 1, 6)
    granted = tick(catalog, group, lambda _: RunState.MISSING, owner_run_id="consumer-1")
    assert [x.owner_run_id for x in granted.launch] == ["consumer-1"]
    beating = (
        "import sys, time\n"
        "from icegroup.iceberg.store.heartbeats import heartbeat\n"
        "from icegroup.iceberg.config.lakehouse import load_lakehouse\n"
        f"with heartbeat(load_lakehouse().catalog(), {group.name!r}, 'consumer-1', interval_s=10):\n"
        "    print('beating', flush=True)\n"
        "    time.sleep(120)\n"
    )
    env = {**os.environ, "ICEGROUP_HOME": str(lake_home)}
    consumer = subprocess.Popen([sys.executable, "-c", beating], env=env, stdout=subprocess.PIPE, text=True)
    assert consumer.stdout is not None
    assert consumer.stdout.readline() == "beating\n"

    alive = tick(catalog, group, lambda _: RunState.RUNNING, owner_run_id="consumer-2")
    os.kill(consumer.pid, signal.SIGKILL)
    consumer.wait()
    assert gone_holders(read_beats(catalog, group.name)) == {"consumer-1"}
    after = tick(catalog, group, lambda _: RunState.RUNNING, owner_run_id="consumer-2")

    assert alive.launch == []
    assert [(x.owner_run_id, x.attempt) for x in after.launch] == [("consumer-2", 1)]
    assert [(x.lease_id, x.attempt) for x in after.terminate] == [(x.lease_id, 0) for x in granted.launch]


def test_a_lease_nobody_executes_says_what_it_waits_for_not_a_regrant_time() -> None:
    held = lease(["a"], owner_run_id="run-7", deadline_ms=NOW + 1_603_000, streams=["0:region=eu"])
    waiting = lease(["b"], owner_run_id=None, streams=["1:region=us"])
    parked = held.model_copy(update={"phase": LeasePhase.PARKED})
    redrive = "icegroup redrive g --execute"

    poison = f"lease {held.lease_id}#0 (0:region=eu): on a poison shard; waits for `{redrive}` after the fix"
    assert hold_of(held, {}, 30, redrive).describe(NOW) == poison, "its consume stopped at the poison and exited"
    assert hold_of(parked, {}, 30).describe(NOW).endswith("waits for `icegroup redrive` after the fix")
    assert hold_of(waiting, {}, 30).describe(NOW).endswith(": granted, waiting for a Borrower to take it")
