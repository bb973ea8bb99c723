"""Leader safety and liveness through Dagster: racing Leaders, two instances on one lake, deadlines."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import dagster as dg
import pytest
from pyiceberg.catalog import Catalog

import icegroup.iceberg.leader
from icegroup.dagster_project.definitions import build_definitions
from icegroup.iceberg.borrower import take_leases
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.store.registry import load_state
from tests.factories import MakeGroup, append_batches, create_source
from tests.stack_env import use_home

pytestmark = pytest.mark.dagster


@pytest.fixture
def lake_env(lake_home: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The resource reads the test lakehouse."""
    use_home(monkeypatch, lake_home)


def in_lockstep(monkeypatch: pytest.MonkeyPatch, parties: int) -> None:
    """Make concurrent ticks read the registry before any of them commits: the worst case for CAS."""
    barrier = threading.Barrier(parties, timeout=30)
    original = icegroup.iceberg.leader.plan_source

    def planned_after_everyone_read(*args: Any, **kwargs: Any) -> Any:
        barrier.wait()
        return original(*args, **kwargs)

    monkeypatch.setattr(icegroup.iceberg.leader, "plan_source", planned_after_everyone_read)


def evaluate_at_once(evaluations: list[Callable[[], Any]]) -> list[Any]:
    with ThreadPoolExecutor(max_workers=len(evaluations)) as pool:
        return list(pool.map(lambda evaluate: evaluate(), evaluations))


def granted_shards(catalog: Catalog, group: GroupConfig) -> list[str]:
    state = load_state(catalog, group.name).state
    assert state is not None
    return [sid for lease in state.leases.values() for sid in lease.shard_ids]


@pytest.mark.usefixtures("lake_env")
def test_two_sensor_evaluations_at_once_grant_each_shard_once(
    catalog: Catalog, make_group: MakeGroup, monkeypatch: pytest.MonkeyPatch
) -> None:
    group = make_group(max_borrowers=6)  # three runs' worth of slots: a lease per stream
    append_batches(create_source(catalog, group.source), 2, 30)
    built = build_definitions({group.name: group}, "lake")
    sensor = built.resolve_sensor_def(f"{group.name}_leader")
    in_lockstep(monkeypatch, 2)

    with dg.instance_for_test() as instance:
        results = evaluate_at_once(
            [lambda: sensor(dg.build_sensor_context(instance=instance, resources=built.resources))] * 2
        )

    winners = [r for r in results if isinstance(r, dg.SensorResult)]
    losers = [r for r in results if isinstance(r, dg.SkipReason)]
    assert len(winners) == 1
    assert len(losers) == 1
    assert "another Leader or a Borrower committed first" in str(losers[0].skip_message)
    assert len(winners[0].run_requests or []) == 2, "3 waiting leases: two Borrowers of 2 slots each"
    state = load_state(catalog, group.name).state
    assert state is not None
    assert len(state.leases) == 3
    shards = granted_shards(catalog, group)
    assert len(shards) == len(set(shards))


@pytest.mark.usefixtures("lake_env")
def test_two_dagster_instances_on_one_lake_never_grant_a_shard_twice(
    catalog: Catalog, make_group: MakeGroup, monkeypatch: pytest.MonkeyPatch
) -> None:
    group = make_group(max_borrowers=2)
    source = create_source(catalog, group.source)
    append_batches(source, 2, 30)
    built = build_definitions({group.name: group}, "lake")
    sensor = built.resolve_sensor_def(f"{group.name}_leader")
    in_lockstep(monkeypatch, 2)

    with dg.instance_for_test() as one, dg.instance_for_test() as two:
        assert one.root_directory != two.root_directory
        results = evaluate_at_once(
            [
                lambda: sensor(dg.build_sensor_context(instance=one, resources=built.resources)),
                lambda: sensor(dg.build_sensor_context(instance=two, resources=built.resources)),
            ]
        )

    assert sorted(type(r).__name__ for r in results) == ["SensorResult", "SkipReason"]
    shards = granted_shards(catalog, group)
    assert shards
    assert len(shards) == len(set(shards))


@pytest.mark.usefixtures("lake_env")
def test_a_run_still_started_past_its_deadline_is_terminated_and_its_lease_regranted(
    catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group(max_borrowers=1, lease_timeout_s=10)
    append_batches(create_source(catalog, group.source), 1, 6)
    built = build_definitions({group.name: group}, "lake")
    sensor = built.resolve_sensor_def(f"{group.name}_leader")
    with dg.instance_for_test() as instance:
        first = sensor(dg.build_sensor_context(instance=instance, resources=built.resources))
        assert isinstance(first, dg.SensorResult)
        (request,) = first.run_requests or []
        job = built.resolve_job_def(f"{group.name}_borrower")
        run = instance.create_run_for_job(job, tags=request.tags, status=dg.DagsterRunStatus.STARTED)
        ((lease, _),) = take_leases(catalog, group, run.run_id, slots=1)
        time.sleep(max(0.0, lease.deadline_ms / 1000 - time.time()) + 0.5)

        again = sensor(dg.build_sensor_context(instance=instance, resources=built.resources))

        canceled = instance.get_run_by_id(run.run_id)
        assert canceled is not None
        assert canceled.status == dg.DagsterRunStatus.CANCELED
    assert isinstance(again, dg.SensorResult)
    assert len(again.run_requests or []) == 1, "a new Borrower for the re-granted lease"
    regranted = load_state(catalog, group.name).state.leases[lease.lease_id]  # type: ignore[union-attr]
    assert (regranted.attempt, regranted.owner_run_id) == (1, None)
