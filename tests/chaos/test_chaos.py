"""The chaos suite at a CI-sized setting: the same run as ``make chaos``, with fewer faults.

Eight faults each: six kills of workers and two operator actions, a replay of the open window and
a backward reset, each possibly killed part-way. The first run's workers are ``consume`` processes
(Leader and Borrower in one); the second's are the Dagster deployment's parts, a Leader process and
warm Borrower processes, so kills land on the Leader and on Borrowers mid-lease and idle.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.run import Settings, run_chaos

pytestmark = pytest.mark.chaos


@pytest.mark.parametrize("borrowers", [False, True], ids=["consume-workers", "leader-and-warm-borrowers"])
def test_kill_9_chaos_keeps_exactly_once(tmp_path: Path, borrowers: bool) -> None:
    settings = Settings(faults=8, min_snapshots=20, max_snapshots=45, produce_every_s=1.0, borrowers=borrowers)
    outcome = run_chaos(settings, tmp_path)
    print(outcome.line())

    assert len(outcome.faults) == 8
    assert outcome.snapshots >= 20
    assert outcome.streams >= 3
    assert outcome.recovered == 8
    assert outcome.lost == 0
    assert outcome.duplicated == 0
    assert outcome.rows_differ == 0
    assert outcome.source_rows == outcome.sink_rows > 0
    assert outcome.position_regressions == []
    assert outcome.order_violations == []
    assert outcome.lease_problems == []
    assert outcome.worker_problems == []
    assert outcome.audit_problems == [], "the sink's exactly_once check passes in every window"
    assert [run.kind for run in outcome.admin] == ["replay", "reset"], "every fourth fault is an operator action"
    assert [run.problem for run in outcome.admin if run.problem] == []
    assert all(run.completed for run in outcome.admin if run.kind == "reset"), "a killed reset is completed"
    if borrowers:
        assert any(fault.held for fault in outcome.faults), "a Borrower was killed holding leases"
