"""A fence moves main, so the REST server itself refuses a zombie's commit built on metadata from before it.

The first test is pyiceberg alone against the server; the second a paused Spark Borrower (the zombie
of tests/integration/test_zombie.py) on the REST catalog, its lease re-granted and done meanwhile.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.table.update import AssertRefSnapshotId, AssertTableUUID

from icegroup.dagster_project.cli import Exit
from icegroup.iceberg.leader import tick
from icegroup.iceberg.protocol.fences import fence_key
from icegroup.iceberg.protocol.liveness import RunState
from icegroup.iceberg.protocol.sink_commit import KEY_FENCE, KEY_STAGE
from icegroup.iceberg.store.fences import raise_fences
from icegroup.iceberg.store.sink_history import read_sink_history
from icegroup.iceberg.verify import verify_group
from tests.chaos.worker import STALE_EXIT
from tests.conftest import repo_root
from tests.factories import BORROWER_RUN, MakeGroup, append_batches, create_source
from tests.integration.helpers import wait_for
from tests.rest.helpers import ICEGROUP, REST, RestLake
from tests.sink_commits import ID_SCHEMA, create_sink

pytestmark = REST


def ids(*values: int) -> pa.Table:
    return pa.Table.from_pylist([{"id": v} for v in values], schema=ID_SCHEMA.as_arrow())


def staged(table: Table) -> list[Snapshot]:
    """Snapshots staged by a Borrower (write-audit-publish), not on main."""
    return [s for s in table.snapshots() if s.summary is not None and KEY_STAGE in s.summary.additional_properties]


def test_a_zombie_commit_is_refused_by_the_servers_requirement_naming_it(
    rest_lake: RestLake, make_group: MakeGroup
) -> None:
    catalog = rest_lake.catalog()
    group = make_group()
    create_sink(catalog, group).append(ids(1, 2, 3))
    stale = catalog.load_table(group.sink)  # the zombie's handle, loaded before the fence
    before = stale.current_snapshot()
    assert before is not None
    key = fence_key(group.name, "0123456789abcdef")

    assert raise_fences(catalog.load_table(group.sink), {key: 1}) == {key: 1}

    fenced = catalog.load_table(group.sink)
    fence = fenced.current_snapshot()
    assert fence is not None
    assert fence.parent_snapshot_id == before.snapshot_id, "the fence commit moved main by one snapshot"
    assert fence.summary is not None
    assert fence.summary[KEY_FENCE] == key
    assert "added-data-files" not in fence.summary.additional_properties, "no files: it only moves main"
    assert fenced.properties[key] == "1"
    zombie = stale.transaction()
    zombie.append(ids(4, 5))
    with pytest.raises(CommitFailedException) as refused:
        stale.catalog.commit_table(
            stale,
            requirements=(
                AssertTableUUID(uuid=stale.metadata.table_uuid),
                AssertRefSnapshotId(ref="main", snapshot_id=before.snapshot_id),
            ),
            updates=zombie._updates,
        )

    expected = f"Requirement failed: branch main has changed: expected id {before.snapshot_id} != {fence.snapshot_id}"
    assert str(refused.value) == f"CommitFailedException: {expected}"
    after = catalog.load_table(group.sink)
    assert after.current_snapshot() == fence, "main is where the fence left it"
    assert len(after.snapshots()) == 2
    assert sorted(after.scan().to_arrow().column("id").to_pylist()) == [1, 2, 3]


@pytest.mark.spark
@pytest.mark.dagster
def test_a_zombie_borrower_on_the_rest_catalog_is_fenced_and_every_row_lands_once(
    rest_lake: RestLake, make_group: MakeGroup, tmp_path: Path
) -> None:
    """As tests/integration/test_zombie.py, on the REST catalog: both attempts are processes of their own."""
    catalog = rest_lake.lakehouse().catalog()  # with the heartbeat store, as a Leader opens it
    group = make_group(max_borrowers=1, shard_caps={"max_files": 1}, lease_max_shards=3)
    append_batches(create_source(catalog, group.source), 3, 50)
    groups = str(rest_lake.groups_file(group))
    first = tick(catalog, group, lambda _: RunState.MISSING, owner_run_id=BORROWER_RUN)
    lease = first.launch[0]
    assert len(lease.shard_ids) == 3
    points = tmp_path / "failpoints"
    points.mkdir()
    (points / "borrower.after_stage").touch()

    def attempt(number: int, log: Path, **env: str) -> subprocess.Popen[bytes]:
        command = [sys.executable, "-m", "tests.chaos.worker", "lease", "--groups", groups, "--group", group.name,
                   "--lease", lease.lease_id, "--attempt", str(number)]  # fmt: skip
        with log.open("wb") as out:
            return subprocess.Popen(command, cwd=repo_root(), env=rest_lake.env(**env), stdout=out, stderr=out)

    zombie = attempt(0, tmp_path / "attempt0.log", ICEGROUP_FAILPOINTS=str(points))
    try:
        wait_for(lambda: list(points.glob("hit.*")) or zombie.poll() is not None, 180, "the zombie to stage")
        assert zombie.poll() is None, (tmp_path / "attempt0.log").read_text()
        assert len(staged(catalog.load_table(group.sink))) == 1, "the paused Borrower staged output, not on main"

        revoked = tick(
            catalog, group, lambda _: RunState.RUNNING, owner_run_id=BORROWER_RUN, now_ms=lease.deadline_ms + 1
        )
        assert [old.attempt for old in revoked.terminate] == [0]
        sink = catalog.load_table(group.sink)
        assert sink.properties[fence_key(group.name, lease.lease_id)] == "1"
        head = sink.current_snapshot()
        assert head is not None
        assert head.summary is not None
        assert head.summary[KEY_FENCE] == fence_key(group.name, lease.lease_id), "the re-grant's fence moved main"
        retaken = attempt(1, tmp_path / "attempt1.log")
        assert retaken.wait(300) == 0, (tmp_path / "attempt1.log").read_text()
        assert "committed 3" in (tmp_path / "attempt1.log").read_text()

        next(points.glob("hit.*")).unlink()  # wake the zombie up
        zombie.wait(180)
    finally:
        zombie.kill()

    out = (tmp_path / "attempt0.log").read_text()
    assert zombie.returncode == STALE_EXIT, out
    assert f"lease fenced: {fence_key(group.name, lease.lease_id)} is at attempt 1" in out
    history = read_sink_history(catalog, group.sink, group.name, None)
    assert {c.attempt for c in history.commits} == {1}, "nothing of attempt 0 reached main"
    assert not staged(catalog.load_table(group.sink)), "the fenced attempt's staged output is dropped"
    done = subprocess.run(
        [ICEGROUP, "--groups", groups, "consume", group.name, "--until-caught-up"],
        cwd=repo_root(), env=rest_lake.env(), capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == Exit.OK, done.stdout[-3000:] + done.stderr[-3000:]
    check = verify_group(rest_lake.catalog(), group, key="event_id")
    assert check.ok, check.line()
    assert check.found == 150
