"""Warm Borrower runs never take more than half of the run queue, every group's counted."""

from __future__ import annotations

from typing import Any

import dagster as dg

from icegroup.dagster_project.runs.tags import TAG_WARM
from icegroup.dagster_project.sensors import warm_room


@dg.op
def idle() -> None:
    """Nothing: a run to hold a queue slot."""


@dg.job
def borrower() -> Any:
    idle()


def test_warm_runs_take_at_most_half_the_queue_and_an_ended_one_frees_its_place() -> None:
    with dg.instance_for_test(overrides={"concurrency": {"runs": {"max_concurrent_runs": 4}}}) as instance:
        assert warm_room(instance) == 2
        first = instance.create_run_for_job(borrower, tags={TAG_WARM: "1"})
        instance.create_run_for_job(borrower, tags={TAG_WARM: "1"})
        instance.create_run_for_job(borrower)  # a run for work holds a slot, not a warm place

        assert warm_room(instance) == 0
        instance.report_run_canceled(first)
        assert warm_room(instance) == 1
