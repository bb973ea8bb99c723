"""The chaos suite's recovery figures: which faults overlapped another's recovery."""

from __future__ import annotations

from tests.chaos.run import Fault, Outcome, overlapped, recovery_parts


def fault(at_s: float, recovered_s: float) -> Fault:
    return Fault(kind="random", worker="w0", at_s=at_s, held={}, recovered_s=recovered_s)


def test_a_fault_overlaps_another_when_one_comes_within_the_others_recovery() -> None:
    faults = [fault(10.0, 5.0), fault(12.0, 20.0), fault(40.0, 1.0), fault(31.0, 2.0), fault(50.0, 1.0)]

    assert overlapped(faults) == [True, True, False, True, False]


def test_recovery_is_split_by_the_first_commit_and_by_overlaps() -> None:
    outcome = Outcome(faults=[fault(2.0, 30.0), fault(40.0, 5.0), fault(43.0, 9.0), fault(60.0, 3.0)])
    outcome.first_commit_s = 32.0

    parts = recovery_parts(outcome)

    assert parts["before the first commit"]["max"] == 30.0
    assert (parts["alone"]["n"], parts["alone"]["max"]) == (1, 3.0)
    assert (parts["overlapped"]["n"], parts["overlapped"]["max"]) == (2, 9.0)
    assert parts["after the first commit"]["n"] == 3
    assert "p95_recovery_s=30.0" in outcome.line()


def test_without_a_commit_every_fault_counts_as_before_it() -> None:
    parts = recovery_parts(Outcome(faults=[fault(1.0, 4.0)]))

    assert parts["before the first commit"]["n"] == 1
    assert parts["after the first commit"]["n"] == 0
