"""A shard's staged output expired before its publish: the consume stages it again, exactly once.

A staged snapshot is on no branch of the sink until the fenced commit publishes it, so the sink's
maintenance (another engine's ``expire_snapshots``) can take it in between. A real ``icegroup
consume`` is held at a fail point with its shard staged; the staged snapshot is expired; once let
go, the publish finds nothing to publish and commits nothing, and the Borrower stages the shard again.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from pyiceberg.catalog import Catalog

from icegroup.dagster_project.cli import Exit
from icegroup.iceberg.protocol.sink_commit import KEY_STAGE
from icegroup.iceberg.store.tables import expire_snapshots
from icegroup.iceberg.verify import verify_group
from tests.factories import MakeGroup, create_source, events, write_groups
from tests.integration.helpers import held_at
from tests.stack_env import home_env

pytestmark = [pytest.mark.spark, pytest.mark.dagster, pytest.mark.chaos]

ICEGROUP = str(Path(sys.executable).with_name("icegroup"))


def staged_snapshots(catalog: Catalog, sink: str) -> list[int]:
    """The sink's snapshots that carry a stage token and are not on main: output staged, not published."""
    table = catalog.load_table(sink)
    head = table.current_snapshot()
    on_main: set[int] = set()
    while head is not None:
        on_main.add(head.snapshot_id)
        head = table.snapshot_by_id(head.parent_snapshot_id) if head.parent_snapshot_id is not None else None
    return [s.snapshot_id for s in table.snapshots() if KEY_STAGE in s.summary.additional_properties
            and s.snapshot_id not in on_main]  # fmt: skip


def test_a_shard_whose_staged_output_expired_before_its_publish_is_staged_again(
    tmp_path: Path, lake_home: Path, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group(max_borrowers=1, commit_batch_rows=0)
    create_source(catalog, group.source).append(events(1, 100, seed=1, regions=("eu",)))
    groups = write_groups(tmp_path / "groups.yaml", group)
    points = tmp_path / "points"
    points.mkdir()
    env = {**os.environ, **home_env(lake_home), "DAGSTER_HOME": str(tmp_path / "dagster")}
    consume = [ICEGROUP, "--verbose", "--groups", str(groups), "consume", group.name, "--until-caught-up"]

    with held_at("borrower.after_stage", consume, env, points, "the consumer to stage") as held:
        staged = staged_snapshots(catalog, group.sink)
        assert len(staged) == 1, staged
        expire_snapshots(catalog, group.sink, staged)
        assert staged_snapshots(catalog, group.sink) == []
        held.release()
        out, said = held.process.communicate(timeout=180)

    assert held.process.returncode == Exit.OK, out + said[-3000:]
    assert "is gone (expired before it was published?); nothing was committed; staging again (2/3)" in out + said
    check = verify_group(catalog, group, key="event_id")
    assert check.ok, check.line()
    assert check.found == 100
