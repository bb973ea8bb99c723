"""A zombie Borrower, paused with its output staged, wakes up after its lease was re-granted and done."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pyiceberg.catalog import Catalog
from pyspark.sql import SparkSession

from icegroup.iceberg.config.lakehouse import LakehouseConfig
from icegroup.iceberg.errors import StaleLease
from icegroup.iceberg.leader import tick
from icegroup.iceberg.protocol.fences import epoch_key, fence_key
from icegroup.iceberg.protocol.liveness import RunState
from icegroup.iceberg.store.sink_history import read_sink_history
from icegroup.iceberg.verify import verify_group
from icegroup.spark_jobs.borrower.lease import fetch_lease, run_lease
from tests.chaos.worker import STALE_EXIT
from tests.conftest import repo_root
from tests.factories import BORROWER_RUN, MakeGroup, append_batches, create_source, write_groups
from tests.integration.helpers import drive, quiet, wait_for
from tests.stack_env import home_env

pytestmark = pytest.mark.spark


def test_a_zombie_borrower_cannot_commit_after_its_lease_was_regranted(
    spark: SparkSession,
    lakehouse: LakehouseConfig,
    lake_home: Path,
    catalog: Catalog,
    make_group: MakeGroup,
    tmp_path: Path,
) -> None:
    group = make_group(max_borrowers=1, shard_caps={"max_files": 1}, lease_max_shards=3)
    append_batches(create_source(catalog, group.source), 3, 9)
    first = tick(catalog, group, lambda lease: RunState.MISSING, owner_run_id=BORROWER_RUN)
    lease = first.launch[0]
    assert len(lease.shard_ids) == 3

    points = tmp_path / "failpoints"
    points.mkdir()
    (points / "borrower.after_stage").touch()
    env = {**os.environ, **home_env(lake_home), "ICEGROUP_FAILPOINTS": str(points)}
    zombie = subprocess.Popen(
        [sys.executable, "-m", "tests.chaos.worker", "lease", "--groups", str(write_groups(tmp_path / "g.yaml", group)),
         "--group", group.name, "--lease", lease.lease_id, "--attempt", "0"],
        cwd=repo_root(), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        wait_for(lambda: list(points.glob("hit.*")), 120, "the zombie to stage its first shard")
        hit = next(points.glob("hit.*"))
        staged = [
            s for s in catalog.load_table(group.sink).snapshots() if "icegroup.stage" in s.summary.additional_properties
        ]
        assert len(staged) == 1, "the paused Borrower has staged output, not yet on main"

        # The Leader finds the run still alive past its deadline: revoke (raise the fence), re-grant.
        revoked = tick(
            catalog, group, lambda _: RunState.RUNNING, owner_run_id=BORROWER_RUN, now_ms=lease.deadline_ms + 1
        )
        assert [old.attempt for old in revoked.terminate] == [0]
        assert revoked.state.leases[lease.lease_id].attempt == 1
        sink = catalog.load_table(group.sink)
        assert sink.metadata.properties[fence_key(group.name, lease.lease_id)] == "1"

        lease1, shards = fetch_lease(catalog, group.name, lease.lease_id, 1)
        report = run_lease(spark, lakehouse, group, lease1, shards, progress=quiet)
        assert len(report.committed) == 3

        hit.unlink()  # wake the zombie up
        out, _ = zombie.communicate(timeout=120)
    finally:
        zombie.kill()

    assert zombie.returncode == STALE_EXIT, out
    assert "lease fenced" in out
    assert "attempt 1" in out
    history = read_sink_history(catalog, group.sink, group.name, None)
    assert {c.attempt for c in history.commits} == {1}, "nothing of attempt 0 reached main"
    sink = catalog.load_table(group.sink)
    assert not [s for s in sink.snapshots() if "icegroup.stage" in s.summary.additional_properties]
    drive(spark, lakehouse, group)
    check = verify_group(catalog, group, key="event_id")
    assert check.ok
    assert check.found == 27


def test_a_lease_of_a_stale_epoch_cannot_commit(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    """An epoch raised on the sink (a rebuild, a reset) refuses leases granted before it, at commit time."""
    group = make_group(max_borrowers=1, shard_caps={"max_files": 1}, lease_max_shards=1)
    append_batches(create_source(catalog, group.source), 2, 9)
    first = tick(catalog, group, lambda lease: RunState.MISSING, owner_run_id=BORROWER_RUN)
    lease = first.launch[0]
    done = first.state.shards[lease.shard_ids[0]]
    run_lease(spark, lakehouse, group, lease, [done], progress=quiet)
    second = tick(catalog, group, lambda _: RunState.SUCCEEDED, owner_run_id=BORROWER_RUN)
    nxt = next(x for x in second.launch if x.lease_id != lease.lease_id)
    catalog.load_table(group.sink).transaction().set_properties({epoch_key(group.name): "1"}).commit_transaction()

    with pytest.raises(StaleLease, match="epoch fenced"):
        run_lease(spark, lakehouse, group, nxt, [second.state.shards[nxt.shard_ids[0]]], progress=quiet)

    assert verify_group(catalog, group, key="event_id").found == done.rows
    ticks, _ = drive(spark, lakehouse, group)
    assert ticks[0].rebuilt == "the sink's epoch fence is 1, the registry's epoch is 0"
    assert verify_group(catalog, group, key="event_id").ok
