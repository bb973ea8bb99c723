"""A Leader killed with kill -9 at each point of a tick is recovered by the next tick: nothing lost or doubled."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pyiceberg.catalog import Catalog
from pyspark.sql import SparkSession

from icegroup.iceberg.config.lakehouse import LakehouseConfig
from icegroup.iceberg.leader import tick
from icegroup.iceberg.protocol.fences import fence_key
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.liveness import RunState
from icegroup.iceberg.store.registry import load_state
from icegroup.iceberg.verify import verify_group
from icegroup.spark_jobs.borrower.lease import fetch_lease, run_lease
from tests.conftest import repo_root
from tests.factories import BORROWER_RUN, MakeGroup, append_batches, create_source, write_groups
from tests.integration.helpers import drive, quiet
from tests.stack_env import home_env

pytestmark = pytest.mark.spark


def kill_tick_at(point: str, group: GroupConfig, lake_home: Path, tmp_path: Path, observe: str) -> None:
    """Run one tick in a process of its own and kill -9 it when it reaches ``point``."""
    points = tmp_path / "points"
    points.mkdir()
    (points / point).touch()
    env = {**os.environ, **home_env(lake_home), "ICEGROUP_FAILPOINTS": str(points)}
    leader = subprocess.Popen(
        [sys.executable, "-m", "tests.chaos.worker", "tick", "--groups", str(write_groups(tmp_path / "g.yaml", group)),
         "--group", group.name, "--observe", observe],
        cwd=repo_root(), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while not list(points.glob(f"hit.*.{point}")):
        assert leader.poll() is None, leader.communicate()[0]
        assert time.monotonic() < deadline, f"{point} not reached"
        time.sleep(0.05)
    os.kill(leader.pid, signal.SIGKILL)
    assert leader.wait() == -signal.SIGKILL


def test_killed_after_liveness_before_any_commit(
    spark: SparkSession, lakehouse: LakehouseConfig, lake_home: Path, catalog: Catalog,
    make_group: MakeGroup, tmp_path: Path,
) -> None:  # fmt: skip
    group = make_group(max_borrowers=2)
    append_batches(create_source(catalog, group.source), 2, 9)

    kill_tick_at("leader.after_liveness", group, lake_home, tmp_path, "missing")

    assert load_state(catalog, group.name).state is None, "the killed tick committed nothing"
    drive(spark, lakehouse, group)
    assert verify_group(catalog, group, key="event_id").ok


def test_killed_after_raising_a_fence_before_the_registry_commit(
    spark: SparkSession, lakehouse: LakehouseConfig, lake_home: Path, catalog: Catalog,
    make_group: MakeGroup, tmp_path: Path,
) -> None:  # fmt: skip
    group = make_group(max_borrowers=1, shard_caps={"max_files": 1}, lease_max_shards=3)
    append_batches(create_source(catalog, group.source), 2, 9)
    first = tick(catalog, group, lambda _: RunState.MISSING, owner_run_id=BORROWER_RUN)
    lease = first.launch[0]
    run_lease(spark, lakehouse, group, lease, [first.state.shards[lease.shard_ids[0]]], progress=quiet)

    kill_tick_at("leader.after_fence", group, lake_home, tmp_path, "failed")

    sink = catalog.load_table(group.sink)
    assert sink.metadata.properties[fence_key(group.name, lease.lease_id)] == "1", "fence raised"
    assert load_state(catalog, group.name).state.leases[lease.lease_id].attempt == 0, "registry not"  # type: ignore[union-attr]
    again = tick(catalog, group, lambda _: RunState.FAILED, owner_run_id=BORROWER_RUN)
    assert again.state.leases[lease.lease_id].attempt == 1
    lease1, shards = fetch_lease(catalog, group.name, lease.lease_id, 1)
    run_lease(spark, lakehouse, group, lease1, shards, progress=quiet)
    drive(spark, lakehouse, group)
    check = verify_group(catalog, group, key="event_id")
    assert check.ok
    assert check.found == 18


def test_killed_after_the_registry_commit_before_the_launch(
    spark: SparkSession, lakehouse: LakehouseConfig, lake_home: Path, catalog: Catalog,
    make_group: MakeGroup, tmp_path: Path,
) -> None:  # fmt: skip
    group = make_group(max_borrowers=2, leases_per_borrower=1)
    append_batches(create_source(catalog, group.source), 2, 9)

    kill_tick_at("leader.after_registry", group, lake_home, tmp_path, "missing")

    granted = load_state(catalog, group.name).state
    assert granted is not None
    assert len(granted.leases) == 2
    relaunch = tick(catalog, group, lambda _: RunState.MISSING, owner_run_id=BORROWER_RUN)
    assert {x.lease_id for x in relaunch.launch} == set(granted.leases), "the same grants, launched again"
    assert all(x.attempt == 0 for x in relaunch.launch)
    drive(spark, lakehouse, group)
    check = verify_group(catalog, group, key="event_id")
    assert check.ok
    assert check.found == 18
