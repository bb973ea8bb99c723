"""lease_action for every run state around the deadline, poison and re-drive, and regrant."""

from __future__ import annotations

import pytest

from icegroup.iceberg.protocol.liveness import Decision, LeaseAction, RunState, lease_action, regrant, still_beating
from icegroup.iceberg.protocol.state import Lease, LeasePhase, Origin
from tests import factories

DEADLINE = 1_060_000

Expected = tuple[LeasePhase, LeaseAction, bool]  # (phase, action, terminate)

# run state -> (decision before the deadline, decision after it)
EXPECTED: dict[RunState, tuple[Expected, Expected]] = {
    RunState.MISSING: (
        (LeasePhase.GRANTING, LeaseAction.LAUNCH, False),
        (LeasePhase.REVOKING, LeaseAction.REGRANT, False),
    ),
    RunState.QUEUED: (
        (LeasePhase.GRANTING, LeaseAction.WAIT, False),
        (LeasePhase.REVOKING, LeaseAction.REGRANT, True),
    ),
    RunState.RUNNING: (
        (LeasePhase.GRANTED, LeaseAction.WAIT, False),
        (LeasePhase.REVOKING, LeaseAction.REGRANT, True),
    ),
    RunState.SUCCEEDED: (
        (LeasePhase.REVOKED, LeaseAction.REGRANT, False),
        (LeasePhase.REVOKED, LeaseAction.REGRANT, False),
    ),
    RunState.FAILED: (
        (LeasePhase.REVOKED, LeaseAction.REGRANT, False),
        (LeasePhase.REVOKED, LeaseAction.REGRANT, False),
    ),
    RunState.CANCELED: (
        (LeasePhase.REVOKED, LeaseAction.REGRANT, False),
        (LeasePhase.REVOKED, LeaseAction.REGRANT, False),
    ),
}


def outcome(decision: Decision) -> Expected:
    """What the table above records of a decision."""
    return decision.phase, decision.action, decision.terminate


def granted(phase: LeasePhase = LeasePhase.GRANTING) -> Lease:
    """A first attempt due at DEADLINE; the fields a regrant must keep or reset differ from their defaults."""
    return factories.lease(
        ["s1", "s2"],
        streams=["a"],
        epoch=2,
        attempt=0,
        granted_at_ms=1_000_000,
        deadline_ms=DEADLINE,
        sink_snapshot_at_grant=42,
        owner_run_id="run-1",
        phase=phase,
    )


def test_table_covers_every_run_state() -> None:
    assert set(EXPECTED) == set(RunState)


@pytest.mark.parametrize("stored", [LeasePhase.GRANTING, LeasePhase.GRANTED])
@pytest.mark.parametrize("run", list(RunState))
def test_action_before_deadline(run: RunState, stored: LeasePhase) -> None:
    assert outcome(lease_action(granted(stored), run, now_ms=DEADLINE - 1)) == EXPECTED[run][0]


@pytest.mark.parametrize("stored", [LeasePhase.GRANTING, LeasePhase.GRANTED])
@pytest.mark.parametrize("run", list(RunState))
def test_action_after_deadline(run: RunState, stored: LeasePhase) -> None:
    assert outcome(lease_action(granted(stored), run, now_ms=DEADLINE + 1)) == EXPECTED[run][1]


@pytest.mark.parametrize("run", [RunState.QUEUED, RunState.RUNNING])
def test_deadline_itself_is_still_in_time(run: RunState) -> None:
    decision = lease_action(granted(), run, now_ms=DEADLINE)

    assert decision.action is LeaseAction.WAIT
    assert decision.phase is (LeasePhase.GRANTED if run is RunState.RUNNING else LeasePhase.GRANTING)
    assert decision.terminate is False


@pytest.mark.parametrize("run", [RunState.QUEUED, RunState.RUNNING])
def test_alive_run_past_its_deadline_is_revoked_and_terminated(run: RunState) -> None:
    decision = lease_action(granted(LeasePhase.GRANTED), run, now_ms=DEADLINE + 1)

    assert decision == Decision(LeasePhase.REVOKING, LeaseAction.REGRANT, decision.reason, terminate=True)
    assert run.value in decision.reason


def test_never_launched_lease_past_its_deadline_is_regranted_without_terminating() -> None:
    decision = lease_action(granted(), RunState.MISSING, now_ms=DEADLINE + 1)

    assert outcome(decision) == (LeasePhase.REVOKING, LeaseAction.REGRANT, False)
    assert "never launched" in decision.reason


@pytest.mark.parametrize("run", [RunState.FAILED, RunState.CANCELED, RunState.SUCCEEDED])
def test_finished_run_with_shards_left_is_revoked_and_regranted(run: RunState) -> None:
    decision = lease_action(granted(LeasePhase.GRANTED), run, now_ms=DEADLINE - 1)

    assert outcome(decision) == (LeasePhase.REVOKED, LeaseAction.REGRANT, False)
    assert run.value in decision.reason


@pytest.mark.parametrize("stored", [LeasePhase.GRANTING, LeasePhase.GRANTED])
@pytest.mark.parametrize("run", list(RunState))
@pytest.mark.parametrize("now_ms", [DEADLINE - 1, DEADLINE + 1], ids=["in-time", "late"])
def test_poisoned_lease_is_parked(run: RunState, stored: LeasePhase, now_ms: int) -> None:
    decision = lease_action(granted(stored), run, now_ms=now_ms, poisoned=True)

    assert outcome(decision) == (LeasePhase.PARKED, LeaseAction.PARK, False)


@pytest.mark.parametrize("run", list(RunState))
@pytest.mark.parametrize("now_ms", [DEADLINE - 1, DEADLINE + 1], ids=["in-time", "late"])
def test_parked_lease_still_poisoned_waits(run: RunState, now_ms: int) -> None:
    decision = lease_action(granted(LeasePhase.PARKED), run, now_ms=now_ms, poisoned=True)

    assert outcome(decision) == (LeasePhase.PARKED, LeaseAction.WAIT, False)
    assert "icegroup redrive" in decision.reason


@pytest.mark.parametrize("run", list(RunState))
@pytest.mark.parametrize("now_ms", [DEADLINE - 1, DEADLINE + 1], ids=["in-time", "late"])
def test_parked_lease_that_was_redriven_is_regranted(run: RunState, now_ms: int) -> None:
    decision = lease_action(granted(LeasePhase.PARKED), run, now_ms=now_ms, poisoned=False)

    assert outcome(decision) == (LeasePhase.REVOKED, LeaseAction.REGRANT, False)
    assert decision.reason == "re-driven"


def test_not_poisoned_is_the_default() -> None:
    assert lease_action(granted(), RunState.RUNNING, now_ms=DEADLINE - 1).action is LeaseAction.WAIT


def test_regrant_is_the_next_attempt_of_the_same_lease() -> None:
    lease = granted()

    again = regrant(lease, now_ms=2_000_000, timeout_s=30, owner_run_id="run-2", sink_snapshot=77)

    assert again.attempt == 1
    assert again.lease_id == lease.lease_id
    assert again.shard_ids == lease.shard_ids
    assert again.streams == lease.streams
    assert again.epoch == lease.epoch
    assert again.window_start_ms == lease.window_start_ms


@pytest.mark.parametrize("phase", list(LeasePhase))
def test_regrant_starts_the_next_attempt_as_granting(phase: LeasePhase) -> None:
    again = regrant(granted(phase), now_ms=2_000_000, timeout_s=30, owner_run_id=None, sink_snapshot=None)

    assert again.phase is LeasePhase.GRANTING


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


def test_regrant_leaves_the_old_attempts_phase_untouched() -> None:
    lease = granted(LeasePhase.PARKED)

    regrant(lease, now_ms=2_000_000, timeout_s=30, owner_run_id="run-2", sink_snapshot=77)

    assert lease.phase is LeasePhase.PARKED


def test_regrant_carries_the_groups_current_origin_and_keeps_the_old_one_without_it() -> None:
    old = granted().model_copy(update={"origin": Origin(start_position=1, config_hash="a" * 16)})
    now = Origin(start_position=1, config_hash="b" * 16)

    assert regrant(old, 2_000_000, 30, None, None, origin=now).origin == now
    assert regrant(old, 2_000_000, 30, None, None).origin == old.origin


def test_regrant_counts_every_attempt() -> None:
    twice = regrant(regrant(granted(), 2_000_000, 30, "run-a", None), 3_000_000, 30, "run-b", None)

    assert twice.attempt == 2
    decision = lease_action(twice, RunState.RUNNING, now_ms=3_000_000 + 30 * 1000)
    assert outcome(decision) == (LeasePhase.GRANTED, LeaseAction.WAIT, False)


def test_a_lease_whose_holder_beat_within_the_session_timeout_is_still_beating() -> None:
    mine = factories.lease(["s1"], owner_run_id="run-a")
    beats = {"run-a": 100_000}
    assert still_beating(mine, beats, now_ms=100_000 + 30_000, session_timeout_s=30)
    assert not still_beating(mine, beats, now_ms=100_000 + 30_001, session_timeout_s=30), "silent past the timeout"
    assert not still_beating(factories.lease(["s2"], owner_run_id="run-b"), beats, now_ms=100_000, session_timeout_s=30)
