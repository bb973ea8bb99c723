"""Resetting a group's positions on real Spark and Iceberg, with the sink checked row by row."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from pyiceberg.catalog import Catalog
from pyspark.sql import SparkSession

from icegroup.dagster_project.cli import Exit, main
from icegroup.iceberg.config.lakehouse import LakehouseConfig
from icegroup.iceberg.errors import ResetInterrupted, StaleLease, UsageError
from icegroup.iceberg.leader import tick
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.liveness import RunState
from icegroup.iceberg.protocol.reset import ResetTarget
from icegroup.iceberg.replay_ticket import begin_replay
from icegroup.iceberg.reset import execute_reset, plan_reset, reset_marker
from icegroup.iceberg.store.heartbeats import beat, ensure_table
from icegroup.iceberg.store.registry import load_state
from icegroup.iceberg.verify import verify_group
from icegroup.spark_jobs.borrower.lease import run_lease
from icegroup.spark_jobs.replay import replay_window
from tests.conftest import repo_root
from tests.factories import MakeGroup, append_batches, write_groups
from tests.integration.helpers import consumed, drive, quiet, sink_ids
from tests.stack_env import home_env, use_home

pytestmark = pytest.mark.spark
ICEGROUP = str(Path(sys.executable).with_name("icegroup"))


def test_a_backward_reset_replaces_what_it_consumes_again(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group(shard_caps={"max_files": 1})
    consumed(spark, lakehouse, catalog, group, 4, 12)

    dry = plan_reset(catalog, group, ResetTarget("earliest"))
    assert sum(m.reconsumed_rows for m in dry.moves) == 48
    assert {m.direction for m in dry.moves} == {"back"}
    assert load_state(catalog, group.name).state.epoch == 0, "a plan changes nothing"  # type: ignore[union-attr]
    state = execute_reset(catalog, group, dry.target).state

    assert state.epoch == 1
    assert sink_ids(catalog, group) == Counter(), "the re-consumed output is deleted"
    drive(spark, lakehouse, group)
    assert sink_ids(catalog, group) == Counter(range(1, 49)), "consumed again, once"
    assert verify_group(catalog, group, key="event_id").ok


def test_a_forward_reset_skips_and_says_how_many_rows(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group()
    consumed(spark, lakehouse, catalog, group, 2, 12)
    append_batches(catalog.load_table(group.source), 3, 12)

    plan = plan_reset(catalog, group, ResetTarget("latest"))
    assert sum(m.skipped_rows for m in plan.moves) == 36
    assert sum(m.reconsumed_rows for m in plan.moves) == 0
    execute_reset(catalog, group, plan.target)
    append_batches(catalog.load_table(group.source), 1, 12)
    drive(spark, lakehouse, group)

    assert sink_ids(catalog, group) == Counter([*range(1, 25), *range(61, 73)]), "the 36 rows are skipped"


def test_shift_by_and_to_checkpoint_move_each_stream_and_the_sink_stays_exact(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group(shard_caps={"max_files": 1})
    consumed(spark, lakehouse, catalog, group, 3, 9)
    sink = catalog.load_table(group.sink)
    checkpoint = next(
        s.snapshot_id for s in sink.snapshots() if s.summary and "icegroup.shards" in s.summary.additional_properties
    )
    append_batches(catalog.load_table(group.source), 2, 9)
    drive(spark, lakehouse, group)

    shifted = plan_reset(catalog, group, ResetTarget("shift", "-1"))
    assert [m.reconsumed_snapshots for m in shifted.moves] == [1, 1, 1], "one snapshot of each stream"
    execute_reset(catalog, group, shifted.target)
    drive(spark, lakehouse, group)
    assert sink_ids(catalog, group) == Counter(range(1, 46))

    back = plan_reset(catalog, group, ResetTarget("checkpoint", str(checkpoint)))
    assert sum(m.reconsumed_rows for m in back.moves) > 0
    execute_reset(catalog, group, back.target)
    drive(spark, lakehouse, group)
    assert sink_ids(catalog, group) == Counter(range(1, 46))


def test_a_lease_of_the_old_epoch_cannot_commit_after_a_reset(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group(max_borrowers=1)
    consumed(spark, lakehouse, catalog, group, 1, 9)
    append_batches(catalog.load_table(group.source), 1, 9)
    granted = tick(catalog, group, lambda _: RunState.MISSING)
    (lease,) = granted.launch

    execute_reset(catalog, group, ResetTarget("earliest"))

    with pytest.raises(StaleLease, match="epoch fenced"):
        run_lease(spark, lakehouse, group, lease, [granted.state.shards[s] for s in lease.shard_ids], progress=quiet)
    drive(spark, lakehouse, group)
    assert sink_ids(catalog, group) == Counter(range(1, 19))


def test_resets_refuse_bad_targets_and_replays_in_flight(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup,
    tmp_path: Path, lake_home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    group = make_group()
    consumed(spark, lakehouse, catalog, group, 1, 9)
    use_home(monkeypatch, lake_home)
    groups = str(write_groups(tmp_path / "g.yaml", group))

    assert main(["--groups", groups, "reset", group.name, "--to-snapshot", "42"]) == Exit.ERROR
    assert "--to-snapshot: 42 is not in the history of" in capsys.readouterr().err
    assert main(["--groups", groups, "reset", group.name, "--by-duration", "soon"]) == Exit.ERROR
    assert "'soon' is not a duration; write it like PT1H" in capsys.readouterr().err
    begin_replay(catalog, group, time.strftime("%Y-%m-%d", time.gmtime()), holder="replay-x")
    ensure_table(catalog)
    beat(catalog, group.name, "replay-x")
    with pytest.raises(UsageError, match="replays are in flight"):
        execute_reset(catalog, group, ResetTarget("earliest"))


def kill_reset_at(
    point: str, group: GroupConfig, option: list[str], tmp_path: Path, lake_home: Path
) -> tuple[list[str], dict[str, str]]:
    """Run ``icegroup reset GROUP OPTION --execute`` and ``kill -9`` it at fail point ``point``.

    Returns the command and an environment without fail points, to run it again as an operator would.
    """
    points = tmp_path / "points"
    points.mkdir()
    (points / point).touch()
    groups = str(write_groups(tmp_path / "g.yaml", group))
    env = {**os.environ, **home_env(lake_home)}
    command = [ICEGROUP, "--groups", groups, "reset", group.name, *option, "--execute"]
    killed = subprocess.Popen(
        command, cwd=repo_root(), env={**env, "ICEGROUP_FAILPOINTS": str(points)},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while not list(points.glob("hit.*")):
        assert killed.poll() is None, killed.communicate()[0]
        assert time.monotonic() < deadline
        time.sleep(0.05)
    os.kill(killed.pid, signal.SIGKILL)
    killed.wait()
    return command, env


@pytest.mark.parametrize(
    ("option", "target"),
    [(["--to-earliest"], ResetTarget("earliest")), (["--shift-by", "-1"], ResetTarget("shift", "-1"))],
)
def test_a_reset_killed_between_fence_and_registry_is_recognised_and_completed_by_running_it_again(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup,
    tmp_path: Path, lake_home: Path, option: list[str], target: ResetTarget,
) -> None:  # fmt: skip
    group = make_group(shard_caps={"max_files": 2})
    consumed(spark, lakehouse, catalog, group, 3, 9)
    kill_reset_at("reset.after_delete", group, option, tmp_path, lake_home)

    with pytest.raises(ResetInterrupted, match=f"run `icegroup reset {group.name} {' '.join(option)} --execute` again"):
        tick(catalog, group, lambda _: RunState.MISSING)
    with pytest.raises(UsageError, match="complete it first"):
        plan_reset(catalog, group, ResetTarget("latest"))
    again = plan_reset(catalog, group, target)
    assert again.completes_interrupted
    assert again.epoch == 1
    assert sum(m.reconsumed_rows for m in again.moves) > 0, "the recorded positions, not positions moved again"
    execute_reset(catalog, group, target)
    drive(spark, lakehouse, group)
    assert sink_ids(catalog, group) == Counter(range(1, 28))
    assert load_state(catalog, group.name).state.epoch == 1  # type: ignore[union-attr]


def test_a_reset_killed_after_its_registry_commit_is_completed_without_moving_the_group_again(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup,
    tmp_path: Path, lake_home: Path,
) -> None:  # fmt: skip
    group = make_group(shard_caps={"max_files": 2})
    consumed(spark, lakehouse, catalog, group, 3, 9)
    command, env = kill_reset_at("reset.after_registry", group, ["--shift-by", "-1"], tmp_path, lake_home)
    moved = load_state(catalog, group.name).state
    assert moved is not None
    assert moved.epoch == 1, "the registry commit won before the kill"
    assert reset_marker(catalog.load_table(group.sink), group) == (1, "--shift-by -1"), "its marker is left"

    again = subprocess.run(command, cwd=repo_root(), env=env, capture_output=True, text=True, check=False)

    assert again.returncode == 0, again.stdout + again.stderr
    assert "epoch 1 was committed before the run that made it stopped" in again.stdout
    assert load_state(catalog, group.name).state == moved, "the group is not moved a second time"
    assert reset_marker(catalog.load_table(group.sink), group) is None
    drive(spark, lakehouse, group)
    assert sink_ids(catalog, group) == Counter(range(1, 28))


def test_a_reset_moves_back_from_what_the_sink_holds_when_the_registry_lags_it(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group(max_borrowers=1)
    consumed(spark, lakehouse, catalog, group, 2, 9)
    append_batches(catalog.load_table(group.source), 1, 9)
    granted = tick(catalog, group, lambda _: RunState.MISSING)
    (lease,) = granted.launch
    run_lease(spark, lakehouse, group, lease, [granted.state.shards[s] for s in lease.shard_ids], progress=quiet)
    head = catalog.load_table(group.source).snapshots()[1].snapshot_id  # committed in the sink, not reconciled

    plan = execute_reset(catalog, group, ResetTarget("snapshot", str(head)))

    assert {m.direction for m in plan.moves} == {"back"}, "the sink's commits are past the registry's positions"
    assert sum(m.reconsumed_rows for m in plan.moves) == 9
    drive(spark, lakehouse, group)
    assert sink_ids(catalog, group) == Counter(range(1, 28))


def test_a_replay_after_a_backward_reset_covers_each_range_once(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group(shard_caps={"max_files": 1})
    consumed(spark, lakehouse, catalog, group, 3, 12)
    execute_reset(catalog, group, ResetTarget("shift", "-2"))
    drive(spark, lakehouse, group)

    again = plan_reset(catalog, group, ResetTarget("shift", "-1"))
    assert sum(m.reconsumed_rows for m in again.moves) == 12, "ranges deleted by the first reset are not counted"
    report = replay_window(spark, lakehouse, group, time.strftime("%Y-%m-%d", time.gmtime()), progress=quiet)

    assert report.rows_in == 36, "the first consumption's shards of the re-consumed ranges are void"
    assert sink_ids(catalog, group) == Counter(range(1, 37))
