"""What a consume run hands back at its end: its own leases, judged ended; others' as their runs are seen."""

from __future__ import annotations

from icegroup.iceberg.protocol.consume import at_release, handed_back, run_leases
from icegroup.iceberg.protocol.liveness import RunState
from tests.factories import lease


def test_a_run_hands_back_only_the_leases_it_holds() -> None:
    mine, theirs = lease(["s1"], owner_run_id="me"), lease(["s2"], owner_run_id="other")
    assert run_leases([mine, theirs], "me") == [mine]
    assert run_leases([theirs], "me") == []


def test_the_runs_own_leases_have_ended_and_anothers_are_observed() -> None:
    mine, theirs = lease(["s1"], owner_run_id="me"), lease(["s2"], owner_run_id="other")
    assert at_release(mine, "me", lambda _: RunState.RUNNING) is RunState.SUCCEEDED
    assert at_release(theirs, "me", lambda _: RunState.RUNNING) is RunState.RUNNING


def test_the_last_line_counts_what_it_hands_back() -> None:
    assert handed_back([lease(["s1"])]) == "its lease is"
    assert handed_back([lease(["s1"]), lease(["s2"])]) == "its 2 leases are"
