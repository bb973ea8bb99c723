"""The Dagster side: definitions load, the Leader sensor starts warm Borrowers, they take and commit leases."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg
import pytest
from pyiceberg.catalog import Catalog
from pyspark.sql import SparkSession

from icegroup.dagster_project.assets import DATA_VERSION_TAG, complete_events
from icegroup.dagster_project.checks import DEAD_LETTERS, EXACTLY_ONCE, LAG
from icegroup.dagster_project.definitions import build_definitions, defs
from icegroup.dagster_project.runs.tags import ROLE_BORROWER, TAG_CODE, TAG_GROUP, TAG_ROLE, TAG_WARM
from icegroup.dagster_project.sensors import minimum_interval_s
from icegroup.dagster_project.table_metadata import COLUMN_SCHEMA, ROW_COUNT, TABLE_NAME, URI
from icegroup.dagster_project.tick_events import LeaderCursor
from icegroup.iceberg.borrower import take_leases
from icegroup.iceberg.config.lakehouse import LakehouseConfig
from icegroup.iceberg.errors import ReplayConflict
from icegroup.iceberg.failpoints import ENV
from icegroup.iceberg.leader import tick
from icegroup.iceberg.pause import set_paused
from icegroup.iceberg.protocol.borrower import ungranted
from icegroup.iceberg.protocol.completion import CLOSE_GRACE_MS
from icegroup.iceberg.protocol.dead_letters import STOPPED
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.liveness import RunState
from icegroup.iceberg.protocol.shards import DAY_MS, parse_window_label, window_label
from icegroup.iceberg.protocol.sink_commit import ROW_LINEAGE
from icegroup.iceberg.replay_ticket import begin_replay
from icegroup.iceberg.store.dead_letters import record
from icegroup.iceberg.store.heartbeats import beat, ensure_table
from icegroup.iceberg.store.registry import load_state
from icegroup.iceberg.verify import verify_group
from tests.factories import MakeGroup, append_batches, create_source, dead_letter
from tests.integration.helpers import consumed
from tests.sink_commits import commit_lease
from tests.stack_env import use_home

pytestmark = [pytest.mark.spark, pytest.mark.dagster]


@pytest.fixture
def instance(lake_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dg.DagsterInstance]:
    """A temporary Dagster instance, with the resource pointed at the test lakehouse."""
    use_home(monkeypatch, lake_home)
    with dg.instance_for_test() as test_instance:
        yield test_instance


def test_packaged_definitions_load() -> None:
    loaded = defs()
    loaded.get_repository_def().load_all_definitions()
    assert loaded.resolve_sensor_def("demo_leader") is not None
    assert loaded.resolve_job_def("demo_borrower") is not None
    sink = loaded.resolve_assets_def(dg.AssetKey(["lake", "demo", "events_enriched"]))
    assert dg.AssetKey(["lake", "demo", "events"]) in sink.dependency_keys
    assert isinstance(sink.partitions_def, dg.DailyPartitionsDefinition)
    assert sink.descriptions_by_key[sink.key]


def test_the_leader_sensor_ticks_at_the_groups_interval(make_group: MakeGroup) -> None:
    group = make_group(sensor_interval_s=2)
    built = build_definitions({group.name: group}, "lake")

    assert built.resolve_sensor_def(f"{group.name}_leader").minimum_interval_seconds == minimum_interval_s(2)
    assert make_group().sensor_interval_s == 5, "the default notices a new snapshot within seconds"


def test_a_location_with_chained_groups_loads_as_one_graph(make_group: MakeGroup) -> None:
    upstream = make_group(name="first")
    downstream = make_group(name="second", source=upstream.sink, sink=f"{upstream.sink}_2", replay_window="hour")
    built = build_definitions({g.name: g for g in (upstream, downstream)}, "lake")

    built.get_repository_def().load_all_definitions()

    graph = built.resolve_asset_graph()
    source, middle, last = (
        dg.AssetKey(["lake", *t.split(".")]) for t in (upstream.source, upstream.sink, downstream.sink)
    )
    assert graph.get(middle).is_materializable, "the upstream sink is the downstream source, built by the first group"
    assert graph.get(last).parent_keys == {middle}
    assert graph.get(middle).parent_keys == {source}
    assert not graph.get(source).is_materializable


def skip_message(result: dg.SensorResult | dg.SkipReason | None) -> str:
    """Why a Leader evaluation launched nothing; it fails the test if it launched something."""
    if isinstance(result, dg.SensorResult):
        assert not result.run_requests
        assert result.skip_reason is not None
        return str(result.skip_reason.skip_message)
    assert isinstance(result, dg.SkipReason)
    return str(result.skip_message)


def test_the_leader_of_a_paused_group_skips_saying_so(
    instance: dg.DagsterInstance, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group(max_borrowers=1, shard_caps={"max_files": 1}, lease_max_shards=1)
    append_batches(create_source(catalog, group.source), 2, 30)
    built = build_definitions({group.name: group}, "lake")
    sensor = built.resolve_sensor_def(f"{group.name}_leader")
    sensor(dg.build_sensor_context(instance=instance, resources=built.resources))  # grants the one slot
    set_paused(catalog, group, paused=True)
    held = load_state(catalog, group.name).state
    assert held is not None
    commit_lease(catalog, group, held, next(iter(held.leases.values())))

    paused = sensor(dg.build_sensor_context(instance=instance, resources=built.resources))

    assert f"group '{group.name}' is paused; `icegroup resume {group.name}` continues it" in skip_message(paused)


def test_scheduled_group_gets_a_schedule_instead_of_a_sensor(make_group: MakeGroup) -> None:
    group = make_group(schedule="0 2 * * *", replay_window="hour")
    built = build_definitions({group.name: group}, "lake")
    schedule = built.resolve_schedule_def(f"{group.name}_schedule")
    assert schedule.cron_schedule == "0 2 * * *"
    assert schedule.job_name == f"{group.name}_consume"
    assert not list(built.sensors or [])
    sink = built.resolve_assets_def(dg.AssetKey(["lake", *group.sink.split(".")]))
    assert isinstance(sink.partitions_def, dg.HourlyPartitionsDefinition)
    (request,) = schedule.evaluate_tick(dg.build_schedule_context()).run_requests or []
    assert request.run_config == {}
    assert request.tags.get("dagster/schedule_name") == schedule.name


def test_the_leader_starts_one_warm_borrower_that_takes_every_lease_and_exits_when_idle(
    spark: SparkSession, instance: dg.DagsterInstance, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group(max_borrowers=4, leases_per_borrower=2, warm_borrowers=0)  # two runs' worth: two leases
    append_batches(create_source(catalog, group.source), 4, 30)
    built = build_definitions({group.name: group}, "lake")
    sensor = built.resolve_sensor_def(f"{group.name}_leader")
    job = built.resolve_job_def(f"{group.name}_borrower")

    first = sensor(dg.build_sensor_context(instance=instance, resources=built.resources))
    assert isinstance(first, dg.SensorResult)
    (request,) = first.run_requests or []  # two leases wait, and one Borrower has two slots
    assert request.tags.items() >= {TAG_GROUP: group.name, TAG_ROLE: ROLE_BORROWER}.items()
    assert set(request.tags) == {TAG_GROUP, TAG_ROLE, TAG_CODE}, "a run for work: not tagged warm"
    state = load_state(catalog, group.name).state
    assert state is not None
    assert len(state.leases) == 2
    assert all(lease.owner_run_id is None for lease in state.leases.values()), "granted, waiting for a Borrower"

    config = {"ops": {f"{group.name}_borrow_op": {"config": {"idle_timeout_s": 0.0, "poll_s": 0.2}}}}
    result = job.execute_in_process(instance=instance, tags=request.tags, run_config=config)

    assert result.success
    observations = result.asset_observations_for_node(f"{group.name}_borrow_op")
    assert sorted(o.metadata["lease"].value for o in observations) == sorted(state.leases)
    for observation in observations:
        meta = observation.metadata
        assert meta["rows_in"].value == meta["rows_out"].value > 0
        assert {"source_from_snapshot", "source_to_snapshot", "lag_rows", "lag_snapshots", "lag_age_s"} <= set(meta)
        assert meta["bytes_in"].value > 0
        assert meta["duration_s"].value > 0
    assert not result.asset_materializations_for_node(f"{group.name}_borrow_op"), "the window is open"
    second = sensor(dg.build_sensor_context(instance=instance, resources=built.resources))
    assert "caught up" in skip_message(second)
    assert verify_group(catalog, group, key="event_id").ok


def test_a_borrower_ticks_itself_when_the_source_moves_and_again_when_its_lease_frees_the_streams(
    spark: SparkSession,
    instance: dg.DagsterInstance,
    catalog: Catalog,
    make_group: MakeGroup,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    group = make_group(max_borrowers=2, leases_per_borrower=2, warm_borrowers=0)
    append_batches(create_source(catalog, group.source), 2, 30)
    built = build_definitions({group.name: group}, "lake")
    sensor = built.resolve_sensor_def(f"{group.name}_leader")
    job = built.resolve_job_def(f"{group.name}_borrower")
    first = sensor(dg.build_sensor_context(instance=instance, resources=built.resources))
    assert isinstance(first, dg.SensorResult)
    (request,) = first.run_requests or []
    monkeypatch.setenv(ENV, str(tmp_path))
    (tmp_path / "borrower.after_stage").touch()  # the sensor's lease holds still once staged, its streams busy
    config = {"ops": {f"{group.name}_borrow_op": {"config": {"idle_timeout_s": 10.0, "poll_s": 0.2}}}}
    ran: list[dg.ExecuteInProcessResult] = []
    borrower = threading.Thread(
        target=lambda: ran.append(job.execute_in_process(instance=instance, tags=request.tags, run_config=config))
    )
    borrower.start()

    def sink_rows() -> int:
        sink = catalog.load_table(group.sink) if catalog.table_exists(group.sink) else None
        return 0 if sink is None or sink.current_snapshot() is None else len(sink.scan().to_arrow())

    def cut_and_ungranted() -> bool:
        # Through the source head: the Borrower's tick may load the source a moment after the append.
        state = load_state(catalog, group.name).state
        head = catalog.load_table(group.source).current_snapshot()
        return state is not None and ungranted(state) and head is not None and state.planned_through == head.snapshot_id

    try:
        wait_for(lambda: any(tmp_path.glob("hit.*")), 120, "the sensor's lease staged")
        # One commit, and no sensor evaluates from here on. With two, the Borrower's watch could look
        # between them while its tick planned both: the watch then saw the second as a move later,
        # and that tick, after the lease ended, granted what the lease's end is to tick for.
        append_batches(catalog.load_table(group.source), 1, 60)
        wait_for(cut_and_ungranted, 60, "the Borrower's own tick to cut the appends for its busy streams")
    finally:
        (tmp_path / "borrower.after_stage").unlink(missing_ok=True)
        for hit in tmp_path.glob("hit.*"):
            hit.unlink()  # the lease commits and frees its streams: the Borrower ticks again and grants the rest
    wait_for(lambda: sink_rows() == 120, 120, "the appends committed by the Borrower's own ticks")
    borrower.join(timeout=120)

    (result,) = ran
    assert result.success
    messages = [event.user_message for event in instance.all_logs(result.run_id)]
    assert any("the source moved; tick here" in message for message in messages), messages
    assert any("a lease ended and shards were left ungranted; tick here" in m for m in messages), messages
    observed = result.asset_observations_for_node(f"{group.name}_borrow_op")
    head = catalog.load_table(group.source).current_snapshot()
    assert head is not None
    source_key = dg.AssetKey(["lake", *group.source.split(".")])
    heads = [o.metadata["snapshot_id"].value for o in observed if o.asset_key == source_key]
    assert heads[-1:] == [str(head.snapshot_id)], "its tick observed the source's version, as a sensor's does"
    assert "caught up" in skip_message(sensor(dg.build_sensor_context(instance=instance, resources=built.resources)))
    assert verify_group(catalog, group, key="event_id").ok


def wait_for(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Poll ``predicate`` until it holds; fail naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_a_caught_up_group_gets_its_warm_borrower_and_a_reload_replaces_an_idle_one_of_older_code(
    instance: dg.DagsterInstance, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group(max_borrowers=2, warm_borrowers=1)
    create_source(catalog, group.source)
    built = build_definitions({group.name: group}, "lake")
    sensor = built.resolve_sensor_def(f"{group.name}_leader")
    job = built.resolve_job_def(f"{group.name}_borrower")

    first = sensor(dg.build_sensor_context(instance=instance, resources=built.resources))

    assert isinstance(first, dg.SensorResult)
    (request,) = first.run_requests or []  # nothing to consume, and one warm Borrower to keep up
    assert request.tags[TAG_WARM] == "1"
    assert request.run_config == {"ops": {f"{group.name}_borrow_op": {"config": {"keep_warm": True}}}}
    up = instance.create_run_for_job(job, tags=request.tags, run_config=request.run_config)
    assert "caught up" in skip_message(sensor(dg.build_sensor_context(instance=instance, resources=built.resources)))

    old = instance.create_run_for_job(job, tags={**request.tags, TAG_CODE: "older"}, run_config=request.run_config)
    instance.report_run_canceled(up)
    again = sensor(dg.build_sensor_context(instance=instance, resources=built.resources))

    ended = instance.get_run_by_id(old.run_id)
    assert ended is not None
    assert ended.status is dg.DagsterRunStatus.CANCELED, "the idle warm run of older code is ended"
    assert isinstance(again, dg.SensorResult)
    (fresh,) = again.run_requests or []
    assert fresh.tags[TAG_CODE] == request.tags[TAG_CODE] != "older", "and one of this code started"
    set_paused(catalog, group, True)
    paused = sensor(dg.build_sensor_context(instance=instance, resources=built.resources))
    assert "paused" in skip_message(paused), "a paused group starts no warm Borrower"


def test_a_queued_borrower_counts_as_live_and_a_failed_ones_leases_wait_for_the_next(
    instance: dg.DagsterInstance, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group(max_borrowers=1, warm_borrowers=0)
    append_batches(create_source(catalog, group.source), 1, 6)
    built = build_definitions({group.name: group}, "lake")
    sensor = built.resolve_sensor_def(f"{group.name}_leader")
    first = sensor(dg.build_sensor_context(instance=instance, resources=built.resources))
    assert isinstance(first, dg.SensorResult)
    (request,) = first.run_requests or []
    queued = instance.create_run_for_job(built.resolve_job_def(f"{group.name}_borrower"), tags=request.tags)

    again = sensor(dg.build_sensor_context(instance=instance, resources=built.resources))
    assert "no Borrower to start" in skip_message(again), "the queued Borrower will take the lease"

    (taken,) = take_leases(catalog, group, queued.run_id, slots=1)
    instance.report_run_failed(queued)
    third = sensor(dg.build_sensor_context(instance=instance, resources=built.resources))

    assert isinstance(third, dg.SensorResult)
    assert len(third.run_requests or []) == 1, "a new Borrower for the re-granted lease"
    state = load_state(catalog, group.name).state
    assert state is not None
    regranted = state.leases[taken[0].lease_id]
    assert (regranted.attempt, regranted.owner_run_id) == (1, None)


def test_a_backfill_run_of_a_group_that_consumed_nothing_fails_saying_so(
    instance: dg.DagsterInstance, make_group: MakeGroup
) -> None:
    group = make_group()
    built = build_definitions({group.name: group}, "lake")
    result = built.resolve_job_def(f"{group.name}_replay").execute_in_process(
        instance=instance,
        partition_key=window_label(int(time.time() * 1000), group.replay_window),
        raise_on_error=False,
    )
    assert not result.success
    failure = result.get_step_failure_events()[0].step_failure_data.error
    assert failure is not None
    assert "has consumed nothing, so there is nothing to replay" in failure.to_string()


def test_a_backfill_run_replays_its_partition_and_materializes_it(
    spark: SparkSession,
    lakehouse: LakehouseConfig,
    instance: dg.DagsterInstance,
    catalog: Catalog,
    make_group: MakeGroup,
) -> None:
    group = make_group()
    consumed(spark, lakehouse, catalog, group, 3, 20)
    window = window_label(int(time.time() * 1000), group.replay_window)
    built = build_definitions({group.name: group}, "lake")

    result = built.resolve_job_def(f"{group.name}_replay").execute_in_process(instance=instance, partition_key=window)

    (materialization,) = [m for node in result.job_def.nodes for m in result.asset_materializations_for_node(node.name)]
    assert materialization.partition == window
    checks = {e.check_name: e for e in result.get_asset_check_evaluations()}
    assert sorted(checks) == [DEAD_LETTERS, EXACTLY_ONCE, LAG], "a run that materializes the sink runs its checks"
    assert checks[LAG].passed, checks[LAG].description
    assert checks[EXACTLY_ONCE].passed, checks[EXACTLY_ONCE].description
    meta = materialization.metadata
    assert meta["replayed_windows"].value == [window]
    assert meta["rows_in"].value == meta["rows_replaced"].value == meta["rows_out"].value == 60
    rows = catalog.load_table(group.sink).scan(selected_fields=("event_id",)).to_arrow()
    assert sorted(rows.column("event_id").to_pylist()) == list(range(1, 61))


def replayed_elsewhere(catalog: Catalog, group: GroupConfig, window: str) -> None:
    """``window`` is being replayed by a live holder, ``replay-first``, of another process."""
    begin_replay(catalog, group, window, holder="replay-first")
    ensure_table(catalog)  # the heartbeats table, which a test run on its own has not made yet
    beat(catalog, group.name, "replay-first")


def test_a_single_run_backfill_of_two_windows_records_the_one_that_replayed_when_the_other_fails(
    spark: SparkSession,
    lakehouse: LakehouseConfig,
    instance: dg.DagsterInstance,
    catalog: Catalog,
    make_group: MakeGroup,
) -> None:
    now_ms = int(time.time() * 1000)
    today, yesterday = (window_label(now_ms - days * DAY_MS, "day") for days in (0, 1))
    group = make_group(window_start=yesterday)
    consumed(spark, lakehouse, catalog, group, 2, 10)
    replayed_elsewhere(catalog, group, yesterday)
    built = build_definitions({group.name: group}, "lake")
    sink = built.resolve_assets_def(dg.AssetKey(["lake", *group.sink.split(".")]))
    assert sink.backfill_policy == dg.BackfillPolicy.single_run()

    result = built.resolve_job_def(f"{group.name}_replay").execute_in_process(
        instance=instance,
        tags={"dagster/asset_partition_range_start": yesterday, "dagster/asset_partition_range_end": today},
        raise_on_error=False,
    )

    assert not result.success, "a window that failed fails the run"
    (done,) = [m for node in result.job_def.nodes for m in result.asset_materializations_for_node(node.name)]
    assert done.partition == today, "the window that replayed is recorded all the same"
    assert done.tags is not None
    head = catalog.load_table(group.sink).current_snapshot()
    assert head is not None
    assert done.tags[DATA_VERSION_TAG] == str(head.snapshot_id), "its replay's commit is its data version"
    failure = result.get_step_failure_events()[0].step_failure_data.error
    assert failure is not None
    assert f"1 of 2 windows of {group.name} failed; the others are replayed: {yesterday}:" in failure.to_string()
    assert "being replayed by replay-first" in failure.to_string()
    assert verify_group(catalog, group, key="event_id").ok


def test_the_canary_job_records_the_difference_on_the_window_then_promotes_it(
    spark: SparkSession,
    lakehouse: LakehouseConfig,
    instance: dg.DagsterInstance,
    catalog: Catalog,
    make_group: MakeGroup,
) -> None:
    group = make_group()
    consumed(spark, lakehouse, catalog, group, 2, 10)
    window = window_label(int(time.time() * 1000), group.replay_window)
    job = build_definitions({group.name: group}, "lake").resolve_job_def(f"{group.name}_canary")
    cents = "tests.integration.transforms:amount_in_cents"
    config = {"transform": cents, "key": "event_id"}
    op = f"{group.name}_canary_op"

    tried = job.execute_in_process(instance=instance, run_config={"ops": {op: {"config": config}}})

    (observed,) = tried.asset_observations_for_node(op)
    assert observed.partition == window
    assert observed.metadata["main_rows"].value == observed.metadata["canary_rows"].value == 20
    assert observed.metadata["rows_added"].value == observed.metadata["rows_removed"].value == 0
    assert "| amount |" in str(observed.metadata["columns"].value)
    switched = group.model_copy(update={"transform": cents, "on_change": "continue"})  # the groups file, edited
    promote = build_definitions({group.name: switched}, "lake").resolve_job_def(f"{group.name}_canary")
    promoted = promote.execute_in_process(instance=instance, run_config={"ops": {op: {"config": {"promote": True}}}})
    (materialized,) = promoted.asset_materializations_for_node(op)
    assert materialized.partition == window
    assert materialized.metadata["rows_replaced"].value == 20


def test_the_leader_reports_each_complete_window_once_an_empty_one_as_empty_and_never_the_open_one(
    instance: dg.DagsterInstance, catalog: Catalog, make_group: MakeGroup
) -> None:
    today = datetime.now(UTC).date()
    group = make_group(window_start=(today - timedelta(days=3)).isoformat())
    append_batches(create_source(catalog, group.source), 1, 10)
    built = build_definitions({group.name: group}, "lake")
    sensor = built.resolve_sensor_def(f"{group.name}_leader")

    context = dg.build_sensor_context(instance=instance, resources=built.resources)
    first = sensor(context)
    second = sensor(dg.build_sensor_context(instance=instance, resources=built.resources, cursor=context.cursor))

    assert isinstance(first, dg.SensorResult)
    source_key = dg.AssetKey(["lake", *group.source.split(".")])
    assert not [e for e in first.asset_events if isinstance(e, dg.AssetMaterialization)], "nothing was made in them"
    empty = [e for e in first.asset_events if isinstance(e, dg.AssetObservation) and e.asset_key != source_key]
    assert [e.partition for e in empty] == [(today - timedelta(days=n)).isoformat() for n in (3, 2, 1)]
    assert all(e.metadata["empty"] == dg.MetadataValue.bool(True) for e in empty), "empty windows are shown as such"
    [observed] = [e for e in first.asset_events if isinstance(e, dg.AssetObservation) and e.asset_key == source_key]
    head = catalog.load_table(group.source).current_snapshot()
    assert head is not None
    assert observed.data_version == str(head.snapshot_id), "the source's version is its snapshot id"
    assert LeaderCursor.read(context.cursor).head == str(head.snapshot_id)
    assert observed.metadata[TABLE_NAME].value == ".".join(source_key.path), "Dagster's standard table metadata"
    assert observed.metadata[ROW_COUNT].value == 10
    assert observed.metadata[URI].value == catalog.load_table(group.source).location()
    columns = observed.metadata[COLUMN_SCHEMA].value.columns
    assert ("event_id", False) in [(c.name, c.constraints.nullable) for c in columns]
    assert not isinstance(second, dg.SensorResult) or not second.asset_events, "each window once; the same source"


def check_events(result: dg.SensorResult | dg.SkipReason | None, name: str) -> list[dg.AssetCheckEvaluation]:
    """The evaluations of check ``name`` a Leader evaluation reported."""
    events = result.asset_events if isinstance(result, dg.SensorResult) else []
    return [e for e in events if isinstance(e, dg.AssetCheckEvaluation) and e.check_name == name]


def test_a_poison_stop_skips_the_leader_saying_so_and_fails_the_dead_letters_check_once(
    instance: dg.DagsterInstance, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group(max_borrowers=1)
    append_batches(create_source(catalog, group.source), 1, 6)
    built = build_definitions({group.name: group}, "lake")
    sensor = built.resolve_sensor_def(f"{group.name}_leader")
    context = dg.build_sensor_context(instance=instance, resources=built.resources)
    first = sensor(context)
    (passed,) = check_events(first, DEAD_LETTERS)
    assert passed.passed, "the check starts out passing"
    (keeping_up,) = check_events(first, LAG)
    assert keeping_up.passed, keeping_up.description
    assert "has not consumed is " in (keeping_up.description or ""), "its lag is seconds old: within the bounds"
    state = load_state(catalog, group.name).state
    assert state is not None
    shard_id = sorted(state.shards)[0]
    record(catalog, group.name, [dead_letter(shard_id, STOPPED)])

    stopped = sensor(context)

    assert f"group '{group.name}' is stopped by poison shards: shard {shard_id}" in skip_message(stopped)
    assert f"icegroup redrive {group.name} --execute" in skip_message(stopped)
    (failed,) = check_events(stopped, DEAD_LETTERS)
    assert (failed.passed, failed.severity) == (False, dg.AssetCheckSeverity.ERROR)
    assert failed.metadata["stopped"] == dg.MetadataValue.int(1)
    (behind,) = check_events(stopped, LAG)
    assert (behind.passed, behind.severity) == (False, dg.AssetCheckSeverity.ERROR), "stopped: an error at once"
    assert behind.description == f"group {group.name} is stopped (poison shard; see icegroup dead-letters)"
    again = sensor(context)
    assert not check_events(again, DEAD_LETTERS), "reported when it changes, not at every tick"
    assert not check_events(again, LAG)


def test_the_exactly_once_check_passes_on_a_consumed_sink_and_fails_naming_the_window_of_a_row_deleted_by_hand(
    spark: SparkSession,
    lakehouse: LakehouseConfig,
    instance: dg.DagsterInstance,
    catalog: Catalog,
    make_group: MakeGroup,
) -> None:
    group = make_group(window_start=datetime.now(UTC).date().isoformat())
    consumed(spark, lakehouse, catalog, group, 2, 30)
    built = build_definitions({group.name: group}, "lake")
    sink_key = dg.AssetKey(["lake", *group.sink.split(".")])
    check = built.get_repository_def().asset_checks_defs_by_key[dg.AssetCheckKey(sink_key, EXACTLY_ONCE)]

    def run_check() -> dg.AssetCheckEvaluation:
        assets = [built.resolve_assets_def(sink_key), check]
        selection = dg.AssetSelection.checks(check)
        ran = dg.materialize(assets, selection=selection, instance=instance)
        (evaluation,) = ran.get_asset_check_evaluations()
        return evaluation

    fine = run_check()
    assert fine.passed, fine.description
    assert fine.metadata["rows"] == dg.MetadataValue.int(60)
    window = window_label(int(time.time() * 1000), group.replay_window)
    source_key = dg.AssetKey(["lake", *group.source.split(".")])
    start = parse_window_label(window, group.replay_window)
    tomorrow = tick(catalog, group, lambda _: RunState.SUCCEEDED, now_ms=start + DAY_MS + CLOSE_GRACE_MS + 1)
    sink = catalog.load_table(group.sink)
    events = complete_events(group, sink_key, source_key, tomorrow.complete, tomorrow.provenance, sink)
    (done,) = [e for e in events if isinstance(e, dg.AssetMaterialization)]
    assert done.metadata[ROW_COUNT].value == 60, "a completed window shows the sink's rows and columns"
    assert {c.name for c in done.metadata[COLUMN_SCHEMA].value.columns} >= {"event_id", *ROW_LINEAGE}
    sink_def = built.resolve_assets_def(sink_key)
    assert sink_def.metadata_by_key[sink_key][TABLE_NAME] == ".".join(sink_key.path)

    catalog.load_table(group.sink).delete("event_id = 7")

    broken = run_check()
    assert not broken.passed
    assert broken.metadata["failing_windows"] == dg.MetadataValue.json([window])
    assert (broken.description or "").startswith(f"window {window} of group {group.name}: ")
    assert f"icegroup replay {group.name} --window {window} --execute" in (broken.description or "")


def test_a_run_of_one_window_that_fails_with_an_icegroup_error_fails_with_that_error(
    spark: SparkSession,
    lakehouse: LakehouseConfig,
    instance: dg.DagsterInstance,
    catalog: Catalog,
    make_group: MakeGroup,
) -> None:
    today = window_label(int(time.time() * 1000), "day")
    group = make_group(window_start=today)
    consumed(spark, lakehouse, catalog, group, 1, 10)
    replayed_elsewhere(catalog, group, today)
    job = build_definitions({group.name: group}, "lake").resolve_job_def(f"{group.name}_replay")

    with pytest.raises(ReplayConflict, match="being replayed by replay-first"):
        job.execute_in_process(
            instance=instance,
            tags={"dagster/asset_partition_range_start": today, "dagster/asset_partition_range_end": today},
        )
    assert verify_group(catalog, group, key="event_id").ok
