"""A reset and a consume at the same moment, each a real ``icegroup`` process, as an operator runs them in two shells.

The consume holds a lease and is held at a fail point with its first shard staged; the reset
executes meanwhile. The reset ends the runs of the leases it leaves behind, but not a run whose
process still beats: that consume sees the new epoch by itself (its staged shard can no longer
commit) and goes on in it. So its run is never marked canceled while it still commits, and it exits
0 (caught up in the new epoch), never 1.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest
from pyiceberg.catalog import Catalog

from icegroup.dagster_project.cli import Exit
from icegroup.dagster_project.runs.tags import TAG_GROUP
from icegroup.iceberg.protocol.group import ShardCaps
from icegroup.iceberg.verify import verify_group
from tests.conftest import repo_root
from tests.factories import MakeGroup, create_source, events, next_event_id, write_groups
from tests.integration.helpers import held_at
from tests.stack_env import home_env

pytestmark = [pytest.mark.spark, pytest.mark.dagster, pytest.mark.chaos]

ICEGROUP = str(Path(sys.executable).with_name("icegroup"))
SHARDS = 4
ROWS = 20


def test_a_consume_running_while_a_reset_executes_goes_on_in_the_new_epoch_and_exits_0(
    tmp_path: Path, lake_home: Path, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group(shard_caps=ShardCaps(max_rows=ROWS), commit_batch_rows=0, max_borrowers=1)
    source = create_source(catalog, group.source)
    for batch in range(SHARDS):
        source.append(events(next_event_id(source), ROWS, seed=batch, regions=("eu",)))
    groups = write_groups(tmp_path / "groups.yaml", group)
    points = tmp_path / "points"
    points.mkdir()
    env = {**os.environ, **home_env(lake_home), "DAGSTER_HOME": str(tmp_path / "dagster")}

    consume = [ICEGROUP, "--groups", str(groups), "consume", group.name, "--until-caught-up"]
    with held_at("borrower.after_stage", consume, env, points, "the consume to stage") as held:
        reset = subprocess.run(
            [ICEGROUP, "--groups", str(groups), "reset", group.name, "--to-latest", "--execute"],
            cwd=repo_root(), env=env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        held.release()  # the staged shard goes on to its commit, which the new epoch's fence refuses
        out, said = held.process.communicate(timeout=300)

    assert reset.returncode == Exit.OK, reset.stderr[-3000:]
    assert held.process.returncode == Exit.OK, out + said[-3000:]
    assert "caught up" in out
    with dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        (run,) = instance.get_runs(filters=dg.RunsFilter(tags={TAG_GROUP: group.name}))
        assert run.status == dg.DagsterRunStatus.SUCCESS, "a run that went on is not marked canceled"
        canceled = instance.all_logs(run.run_id, of_type=dg.DagsterEventType.RUN_CANCELED)
        assert canceled == [], "not even for a while: its outcome must not depend on which event came last"
    check = verify_group(catalog, group, key="event_id")
    assert (check.found, check.duplicates) == (0, 0), "--to-latest skipped every row, and the staged shard is fenced"
