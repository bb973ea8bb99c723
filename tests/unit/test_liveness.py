"""lease_action for every run state around the deadline, and regrant."""

from __future__ import annotations

import pytest

from iceberg.liveness import LeaseAction, RunState, lease_action, regrant
from iceberg.state import Lease

DEADLINE = 1_060_000

# run state -> (action before the deadline, action after it)
EXPECTED = {
    RunState.MISSING: (LeaseAction.LAUNCH, LeaseAction.REGRANT),
    RunState.QUEUED: (LeaseAction.WAIT, LeaseAction.REGRANT),
    RunState.RUNNING: (LeaseAction.WAIT, LeaseAction.REGRANT),
    RunState.SUCCEEDED: (LeaseAction.REGRANT, LeaseAction.REGRANT),
    RunState.FAILED: (LeaseAction.REGRANT, LeaseAction.REGRANT),
    RunState.CANCELED: (LeaseAction.REGRANT, LeaseAction.REGRANT),
}


def granted() -> Lease:
    return Lease(
        lease_id="0123456789abcdef",
        epoch=2,
        window_start_ms=1_767_225_600_000,
        shard_ids=["s1", "s2"],
        streams=["a"],
        attempt=0,
        granted_at_ms=1_000_000,
        deadline_ms=DEADLINE,
        sink_snapshot_at_grant=42,
        owner_run_id="run-1",
    )


def test_table_covers_every_run_state() -> None:
    assert set(EXPECTED) == set(RunState)


@pytest.mark.parametrize("run", list(RunState))
def test_action_before_deadline(run: RunState) -> None:
    assert lease_action(granted(), run, now_ms=DEADLINE - 1) is EXPECTED[run][0]


@pytest.mark.parametrize("run", list(RunState))
def test_action_after_deadline(run: RunState) -> None:
    assert lease_action(granted(), run, now_ms=DEADLINE + 1) is EXPECTED[run][1]


@pytest.mark.parametrize("run", [RunState.QUEUED, RunState.RUNNING])
def test_deadline_itself_is_still_in_time(run: RunState) -> None:
    assert lease_action(granted(), run, now_ms=DEADLINE) is LeaseAction.WAIT


def test_regrant_is_the_next_attempt_of_the_same_lease() -> None:
    lease = granted()

    again = regrant(lease, now_ms=2_000_000, timeout_s=30, owner_run_id="run-2", sink_snapshot=77)

    assert again.attempt == 1
    assert again.lease_id == lease.lease_id
    assert again.shard_ids == lease.shard_ids
    assert again.streams == lease.streams
    assert again.epoch == lease.epoch
    assert again.window_start_ms == lease.window_start_ms


def test_regrant_moves_the_validation_base_to_the_reconciled_sink_head() -> None:
    assert regrant(granted(), 2_000_000, 30, None, sink_snapshot=77).sink_snapshot_at_grant == 77
    assert regrant(granted(), 2_000_000, 30, None, sink_snapshot=None).sink_snapshot_at_grant == 42


def test_regrant_resets_grant_time_deadline_and_owner() -> None:
    again = regrant(granted(), now_ms=2_000_000, timeout_s=30, owner_run_id="run-2", sink_snapshot=77)

    assert again.granted_at_ms == 2_000_000
    assert again.deadline_ms == 2_000_000 + 30 * 1000
    assert again.owner_run_id == "run-2"


def test_regrant_to_a_launched_run_clears_the_owner() -> None:
    assert (
        regrant(granted(), now_ms=2_000_000, timeout_s=30, owner_run_id=None, sink_snapshot=None).owner_run_id is None
    )


def test_regrant_leaves_the_old_attempt_untouched() -> None:
    lease = granted()

    regrant(lease, now_ms=2_000_000, timeout_s=30, owner_run_id="run-2", sink_snapshot=77)

    assert lease.attempt == 0
    assert lease.deadline_ms == DEADLINE
    assert lease.owner_run_id == "run-1"


def test_regrant_counts_every_attempt() -> None:
    twice = regrant(regrant(granted(), 2_000_000, 30, None, None), 3_000_000, 30, None, None)

    assert twice.attempt == 2
    assert lease_action(twice, RunState.RUNNING, now_ms=3_000_000 + 30 * 1000) is LeaseAction.WAIT
