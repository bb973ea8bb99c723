"""What a consume run does after a tick, decided on the tick's facts alone."""

from __future__ import annotations

from dataclasses import replace

import pytest

from icegroup.iceberg.protocol.consume import RunOptions, Step, TickFacts, after_tick, out_of_patience

QUIET = TickFacts(
    stopped=False, caught_up=False, paused=False, more_windows_due=False, progressed=False, mine=0, busy=0, idle_s=0.0
)
PATIENT = RunOptions(max_wait_s=60.0, poll_s=1.0)


@pytest.mark.parametrize(
    ("facts", "step"),
    [
        (replace(QUIET, stopped=True, caught_up=True, mine=2), Step.STOP),
        (replace(QUIET, caught_up=True), Step.CAUGHT_UP),
        (replace(QUIET, caught_up=True, more_windows_due=True), Step.TICK),
        (replace(QUIET, paused=True), Step.PAUSED),
        (replace(QUIET, paused=True, busy=1), Step.WAIT_FOR_A_LEASE),
        (replace(QUIET, paused=True, more_windows_due=True), Step.TICK),
        (replace(QUIET, mine=1), Step.WAIT_FOR_A_LEASE),
        (replace(QUIET, busy=2), Step.WAIT_FOR_A_LEASE),
        (replace(QUIET, progressed=True), Step.TICK),
        (replace(QUIET, idle_s=61.0), Step.GIVE_UP),
        (replace(QUIET, idle_s=59.0), Step.SLEEP),
        (replace(QUIET, busy=1, idle_s=600.0), Step.WAIT_FOR_A_LEASE),
        (replace(QUIET, busy=2, progressed=True, planning_behind=True), Step.PLAN_AHEAD),
        (replace(QUIET, mine=1, progressed=True, planning_behind=True), Step.PLAN_AHEAD),
        (replace(QUIET, progressed=True, planning_behind=True), Step.TICK),
        (replace(QUIET, busy=2, caught_up=True, planning_behind=True, stopped=True), Step.STOP),
    ],
    ids=[
        "a stop wins over everything",
        "caught up",
        "caught up with windows still due ticks on",
        "paused with nothing here",
        "paused waits for the leases here",
        "paused with windows due ticks on",
        "granted here: run them and wait",
        "busy: wait for a lease",
        "progress: tick again at once",
        "no progress past the patience: give up",
        "no progress within the patience: sleep",
        "a lease running here is progress enough",
        "busy with more to plan: plan while the leases run",
        "granted here with more to plan: run them and plan at once",
        "more to plan and nothing here: tick again at once",
        "a stop wins over planning ahead",
    ],
)
def test_the_step_after_a_tick(facts: TickFacts, step: Step) -> None:
    assert after_tick(facts, PATIENT, until_caught_up=True) is step


def test_one_round_runs_what_was_granted_and_returns() -> None:
    assert after_tick(replace(QUIET, mine=1), PATIENT, until_caught_up=False) is Step.ONE_ROUND
    assert after_tick(QUIET, PATIENT, until_caught_up=False) is Step.ONE_ROUND
    assert after_tick(replace(QUIET, caught_up=True), PATIENT, until_caught_up=False) is Step.CAUGHT_UP


def test_a_following_run_never_runs_out_of_patience() -> None:
    following = replace(PATIENT, follow=True)
    assert after_tick(replace(QUIET, idle_s=10_000.0), following, until_caught_up=True) is Step.SLEEP


def test_a_run_whose_tick_keeps_losing_gives_up_only_with_no_lease_here() -> None:
    assert out_of_patience(61.0, busy=0, options=PATIENT)
    assert not out_of_patience(61.0, busy=1, options=PATIENT)
    assert not out_of_patience(59.0, busy=0, options=PATIENT)
