"""What counts as a lease attempt's progress, and which Spark jobs are its own."""

from __future__ import annotations

from icegroup.iceberg.protocol.renewal import job_group, progressed
from tests.factories import lease


def test_a_stage_that_completed_more_tasks_is_progress() -> None:
    assert progressed({3: 4}, {3: 5})
    assert progressed({}, {7: 1}), "a stage first seen with a completed task"


def test_stages_spark_forgot_do_not_hide_progress_nor_fake_it() -> None:
    assert not progressed({3: 4, 4: 9}, {4: 9}), "a forgotten stage is not a fall, and nothing moved"
    assert progressed({3: 4, 4: 9}, {5: 1}), "a total would have fallen from 13 to 1"
    assert not progressed({3: 4}, {3: 4})


def test_each_attempt_of_a_lease_has_a_job_group_of_its_own() -> None:
    first = lease(["s1"])
    again = first.model_copy(update={"attempt": first.attempt + 1})
    assert job_group("g", first) != job_group("g", again)
    assert job_group("g", first).startswith(f"icegroup:g:{first.lease_id}#")
