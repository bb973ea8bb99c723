"""Chained groups and upstream replays: a downstream group follows a replay of its source, exactly.

The upstream group replays today's window with a changed transform (amounts in cents). The
downstream group consumed the old version; following the replay remakes its windows from the new
rows, and its Leader then steps over the replay commit. Real Spark, Iceberg and Dagster runs.
"""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pytest
from prometheus_client import CollectorRegistry
from pyiceberg.catalog import Catalog
from pyspark.sql import SparkSession

from icegroup.dagster_project.checks import LAG
from icegroup.dagster_project.cli import main
from icegroup.dagster_project.definitions import build_definitions
from icegroup.iceberg.cascade import plan_follows, record_follows
from icegroup.iceberg.config.lakehouse import LakehouseConfig
from icegroup.iceberg.describe import describe_group
from icegroup.iceberg.errors import ReplayIncomplete, SourceError
from icegroup.iceberg.leader import tick
from icegroup.iceberg.metrics import GroupCollector
from icegroup.iceberg.pause import set_paused
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.liveness import RunState
from icegroup.iceberg.protocol.reset import ResetTarget
from icegroup.iceberg.protocol.sink_commit import COL_WINDOW
from icegroup.iceberg.reset import execute_reset
from icegroup.iceberg.store.registry import load_state
from icegroup.iceberg.verify import verify_group
from icegroup.spark_jobs.replay import replay_window
from tests.consuming import consume
from tests.factories import BORROWER_RUN, append_batches, write_groups
from tests.integration.helpers import Chain, consumed, drive, quiet

pytestmark = [pytest.mark.spark, pytest.mark.dagster]


def amounts(catalog: Catalog, table: str) -> dict[int, float]:
    """event_id -> amount, failing on a duplicate event."""
    rows = catalog.load_table(table).scan(selected_fields=("event_id", "amount")).to_arrow()
    ids = rows.column("event_id").to_pylist()
    assert len(ids) == len(set(ids)), f"{table} holds an event twice"
    return dict(zip(ids, rows.column("amount").to_pylist(), strict=True))


def leader_skip(group: GroupConfig) -> tuple[str, dg.AssetCheckEvaluation]:
    """Why the group's Leader sensor, evaluated once on a test instance, launched nothing; and its lag check."""
    built = build_definitions({group.name: group}, "lake")
    with dg.instance_for_test() as instance:
        result = built.resolve_sensor_def(f"{group.name}_leader")(
            dg.build_sensor_context(instance=instance, resources=built.resources)
        )
    assert isinstance(result, dg.SensorResult), result
    assert not result.run_requests
    assert result.skip_reason is not None
    (lag,) = [e for e in result.asset_events if isinstance(e, dg.AssetCheckEvaluation) and e.check_name == LAG]
    return str(result.skip_reason.skip_message), lag


def metric(catalog: Catalog, group: GroupConfig, name: str, **labels: str) -> float | None:
    """One sample of ``icegroup metrics`` for ``group``, as a scrape would read it."""
    registry = CollectorRegistry()
    registry.register(GroupCollector(lambda: catalog, {group.name: group}))
    return registry.get_sample_value(name, {"group": group.name, **labels})


def test_replay_cascade_remakes_the_downstream_windows_from_the_new_rows(
    spark: SparkSession,
    lakehouse: LakehouseConfig,
    env: Path,
    tmp_path: Path,
    catalog: Catalog,
    chain: Chain,
    capsys: pytest.CaptureFixture[str],
) -> None:
    first, second, window = chain.first, chain.second, chain.window
    chain.consume(spark, lakehouse, catalog, 3)
    before = amounts(catalog, second.sink)
    fixed = write_groups(tmp_path / "fixed.yaml", chain.cents, second)

    replay = ["replay", first.name, "--window", window, "--cascade", "--execute", "--json"]
    assert main(["--groups", str(fixed), *replay]) == 0

    report = json.loads(capsys.readouterr().out)
    assert [(r["group"], r["window"]) for r in report["replays"]] == [(first.name, window), (second.name, window)]
    (follow,) = report["follows"]
    assert (follow["group"], follow["windows"]) == (second.name, [window])
    assert follow["status"] == "followed"
    upstream = amounts(catalog, first.sink)
    assert upstream == {k: round(v * 100) for k, v in before.items()}, "the upstream window is in cents now"
    assert amounts(catalog, second.sink) == upstream, "the downstream window was remade from the new rows"
    assert verify_group(catalog, second, key="event_id").ok

    append_batches(catalog.load_table(first.source), 1, 12)
    drive(spark, lakehouse, chain.cents)
    drive(spark, lakehouse, second)
    assert amounts(catalog, second.sink) == amounts(catalog, first.sink), "the Leader stepped over the replay"
    assert len(amounts(catalog, second.sink)) == 48
    assert plan_follows(catalog, second) == [], "nothing left to follow"


def test_a_chained_group_consumes_up_to_an_upstream_replay_stops_there_and_follows_on_request(
    spark: SparkSession,
    lakehouse: LakehouseConfig,
    env: Path,
    tmp_path: Path,
    catalog: Catalog,
    chain: Chain,
    capsys: pytest.CaptureFixture[str],
) -> None:
    first, second, window = chain.first, chain.second, chain.window
    consumed(spark, lakehouse, catalog, first, 2, 12)
    replay_window(spark, lakehouse, chain.cents, window, progress=quiet)

    with pytest.raises(SourceError, match=f"icegroup replay {second.name} --follow-upstream"):
        drive(spark, lakehouse, second)
    old = amounts(catalog, second.sink)
    assert len(old) == 24, "everything before the replay was consumed, in its old version"
    assert old != amounts(catalog, first.sink)
    replayed = catalog.load_table(first.sink).snapshots()[-1].snapshot_id
    stopped_at = f"stopped at source snapshot {replayed}, a replay of window {window} upstream"
    follow = f"icegroup replay {second.name} --follow-upstream --execute"
    view = describe_group(catalog, second)
    status = view.status
    assert status.startswith(stopped_at), "not caught up: stopped, and saying where"
    assert view.lag_rows == 24, "the replay's new rows are the lag under the stop line, not 0"
    assert follow in status
    skipped, lag = leader_skip(second)
    assert skipped.endswith(status), "the sensor skips saying so, where it used to fail every tick"
    assert (lag.passed, lag.severity) == (False, dg.AssetCheckSeverity.ERROR), "the sink's lag check fails"
    assert lag.description == f"group {second.name} is {status}"
    assert metric(catalog, second, "icegroup_state", icegroup_state="stopped") == 1

    path = write_groups(tmp_path / "groups.yaml", chain.cents, second)
    assert main(["--groups", str(path), "replay", second.name, "--follow-upstream", "--json"]) == 0
    (planned,) = json.loads(capsys.readouterr().out)["follows"]
    assert (planned["windows"], planned["status"], planned["reason"]) == ([window], "ready", "replays 1 window")
    assert amounts(catalog, second.sink) == old, "a preview changes nothing"

    assert main(["--groups", str(path), "replay", second.name, "--follow-upstream", "--execute"]) == 0
    assert "followed: 1 window replayed" in capsys.readouterr().out
    drive(spark, lakehouse, second)
    assert amounts(catalog, second.sink) == amounts(catalog, first.sink)
    assert describe_group(catalog, second).status == "caught up"
    caught_up, lag = leader_skip(second)
    assert (caught_up, lag.passed) == (f"{second.name}: caught up", True), "caught up again, everywhere"
    assert metric(catalog, second, "icegroup_state", icegroup_state="caught up") == 1
    window_rows = catalog.load_table(second.sink).scan(row_filter=f"{COL_WINDOW} = '{window}'").to_arrow()
    assert isinstance(window_rows, pa.Table)
    assert window_rows.num_rows == 24


def test_follow_upstream_waits_for_a_group_that_has_not_consumed_up_to_the_replay(
    spark: SparkSession,
    lakehouse: LakehouseConfig,
    env: Path,
    tmp_path: Path,
    catalog: Catalog,
    chain: Chain,
    capsys: pytest.CaptureFixture[str],
) -> None:
    first, second = chain.first, chain.second
    chain.consume(spark, lakehouse, catalog, 2)
    append_batches(catalog.load_table(first.source), 1, 12)
    drive(spark, lakehouse, first)
    replay_window(spark, lakehouse, chain.cents, chain.window, progress=quiet)
    path = write_groups(tmp_path / "groups.yaml", chain.cents, second)

    assert main(["--groups", str(path), "replay", second.name, "--follow-upstream", "--execute"]) == 3, "waiting"

    assert "waits:" in capsys.readouterr().out
    with pytest.raises(SourceError, match="--follow-upstream"):
        drive(spark, lakehouse, second)
    assert main(["--groups", str(path), "replay", second.name, "--follow-upstream", "--execute"]) == 0
    drive(spark, lakehouse, second)
    assert amounts(catalog, second.sink) == amounts(catalog, first.sink)
    assert len(amounts(catalog, second.sink)) == 36


def test_follow_upstream_names_no_windows(
    env: Path, tmp_path: Path, chain: Chain, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_groups(tmp_path / "groups.yaml", chain.first, chain.second)

    assert (
        main(["--groups", str(path), "replay", chain.second.name, "--follow-upstream", "--window", "2026-01-31"]) == 2
    )
    assert "--follow-upstream: the upstream replays decide which windows" in capsys.readouterr().err


def test_following_refuses_when_the_upstream_replays_files_were_compacted_since(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, chain: Chain
) -> None:
    chain.consume(spark, lakehouse, catalog, 2)
    replay_window(spark, lakehouse, chain.cents, chain.window, progress=quiet)
    spark.sql(
        f"CALL {lakehouse.catalog_name}.system.rewrite_data_files(table => '{chain.first.sink}', "
        "options => map('min-input-files', '1', 'rewrite-all', 'true'))"
    ).collect()
    before = amounts(catalog, chain.second.sink)

    with pytest.raises(ReplayIncomplete, match=r"that replay's files were rewritten since .*compacted or deleted from"):
        replay_window(spark, lakehouse, chain.second, chain.window, progress=quiet)
    assert amounts(catalog, chain.second.sink) == before, "nothing was replaced"


def test_a_leader_stopped_at_an_upstream_replay_still_re_grants_a_dead_lease_before_it(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, chain: Chain
) -> None:
    first, second = chain.first, chain.second
    consumed(spark, lakehouse, catalog, first, 2, 12)
    replay_window(spark, lakehouse, chain.cents, chain.window, progress=quiet)
    granted = tick(catalog, second, lambda _: RunState.MISSING, owner_run_id=BORROWER_RUN)
    assert granted.launch, "the commits before the replay are planned and granted"

    regranted = tick(catalog, second, lambda _: RunState.FAILED, owner_run_id=BORROWER_RUN)

    assert {(lease.lease_id, lease.attempt) for lease in regranted.launch} == {
        (lease.lease_id, 1) for lease in granted.launch
    }, "the failed runs' leases are re-granted, although planning stops at the replay"
    with pytest.raises(SourceError, match="--follow-upstream"):
        drive(spark, lakehouse, second)
    assert len(amounts(catalog, second.sink)) == 24
    stopped = load_state(catalog, second.name).state
    assert stopped is not None
    assert stopped.is_idle(), "the stopping tick committed its reconciling first"
    set_paused(catalog, second, paused=True)
    paused = tick(catalog, second, lambda _: RunState.SUCCEEDED)
    assert paused.paused, "a pause is said first, not the stop at the replay"


def test_a_reset_back_before_a_followed_replay_makes_the_group_follow_it_again(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, chain: Chain
) -> None:
    first, second = chain.first, chain.second
    consumed(spark, lakehouse, catalog, first, 2, 12)
    replay_window(spark, lakehouse, chain.cents, chain.window, progress=quiet)
    with pytest.raises(SourceError):
        drive(spark, lakehouse, second)
    replay_window(spark, lakehouse, second, chain.window, progress=quiet)
    record_follows(catalog, second, {p.replay.snapshot_id for p in plan_follows(catalog, second)})
    drive(spark, lakehouse, second)
    assert amounts(catalog, second.sink) == amounts(catalog, first.sink)

    execute_reset(catalog, second, ResetTarget("earliest"))

    with pytest.raises(SourceError, match="--follow-upstream"):
        drive(spark, lakehouse, second)
    assert amounts(catalog, second.sink) != amounts(catalog, first.sink), "consumed again, in the old version"
    (again,) = plan_follows(catalog, second)
    assert again.ready
    replay_window(spark, lakehouse, second, chain.window, progress=quiet)
    record_follows(catalog, second, {again.replay.snapshot_id})
    drive(spark, lakehouse, second)
    assert amounts(catalog, second.sink) == amounts(catalog, first.sink)


def test_a_group_set_to_follow_upstream_replays_follows_one_by_itself_in_consume_and_from_its_leader(
    spark: SparkSession, lakehouse: LakehouseConfig, env: Path, catalog: Catalog, chain: Chain
) -> None:
    first, window = chain.first, chain.window
    second = chain.second.model_copy(update={"follow_upstream": True})
    consumed(spark, lakehouse, catalog, first, 2, 12)
    drive(spark, lakehouse, second)
    replay_window(spark, lakehouse, chain.cents, window, progress=quiet)
    lines: list[str] = []

    consume(lambda: spark, lakehouse, second, "run-follow", lambda _: RunState.MISSING, progress=lines.append)

    assert any("following it (follow_upstream)" in line for line in lines), lines
    assert any(f"followed 1 upstream replays, replaying {window}" in line for line in lines), lines
    assert amounts(catalog, second.sink) == amounts(catalog, first.sink), "the downstream window holds the new rows"
    assert describe_group(catalog, second).status == "caught up"
    assert verify_group(catalog, second, key="event_id").ok

    replay_window(spark, lakehouse, chain.cents, window, progress=quiet)  # once more: the Leader follows this one
    built = build_definitions({second.name: second}, "lake")
    with dg.instance_for_test() as instance:
        sensor = built.resolve_sensor_def(f"{second.name}_leader")
        launched = sensor(dg.build_sensor_context(instance=instance, resources=built.resources))
        assert isinstance(launched, dg.SensorResult)
        (request,) = launched.run_requests or []
        assert request.job_name == f"{second.name}_follow"
        follow = built.resolve_job_def(f"{second.name}_follow")
        ran = follow.execute_in_process(instance=instance, tags=request.tags)
        (made,) = [m for node in ran.job_def.nodes for m in ran.asset_materializations_for_node(node.name)]
        assert made.partition == window
        after = sensor(dg.build_sensor_context(instance=instance, resources=built.resources))
        assert isinstance(after, dg.SensorResult)
        assert after.skip_reason is not None
        assert after.skip_reason.skip_message == f"{second.name}: caught up"
    assert amounts(catalog, second.sink) == amounts(catalog, first.sink)
    assert describe_group(catalog, second).status == "caught up", "followed, and caught up again"
