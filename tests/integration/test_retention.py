"""``icegroup expire`` while groups consume: it expires only what no group needs, and no group stops or loses data."""

from __future__ import annotations

import json
import threading
import time
from datetime import timedelta
from pathlib import Path

import dagster as dg
import pytest
import yaml
from pyiceberg.catalog import Catalog
from pyspark.sql import SparkSession

from icegroup.dagster_project.cli import main
from icegroup.dagster_project.definitions import build_definitions
from icegroup.iceberg.config.lakehouse import LakehouseConfig
from icegroup.iceberg.protocol.liveness import RunState
from icegroup.iceberg.protocol.reset import ResetTarget
from icegroup.iceberg.protocol.retention import StateRetention
from icegroup.iceberg.protocol.sink_commit import KEY_STAGE
from icegroup.iceberg.reset import execute_reset
from icegroup.iceberg.retention import STAGED_AFTER_MS, expire
from icegroup.iceberg.store.registrations import REFRESH_MS, read_registrations, register
from icegroup.iceberg.store.registry import load_state, registry_identifier
from icegroup.iceberg.store.tables import walk_back
from icegroup.iceberg.verify import verify_group
from icegroup.spark_jobs.sink.fenced_commit import stage_shard
from tests.consuming import consume
from tests.factories import MakeGroup, append_batches, create_source
from tests.integration.helpers import consumed, drive, quiet

pytestmark = pytest.mark.spark

NO_HORIZON = {"replay_retention": "0s"}


def sequences(catalog: Catalog, identifier: str) -> list[int]:
    """Sequence numbers of a table's snapshots still in its metadata."""
    return sorted(s.sequence_number or 0 for s in catalog.load_table(identifier).snapshots())


def leftovers(catalog: Catalog, sink: str) -> set[int]:
    """Staged snapshots of the sink that are not on main."""
    table = catalog.load_table(sink)
    on_main = {s.snapshot_id for s in walk_back(table, None)}
    return {
        s.snapshot_id
        for s in table.snapshots()
        if s.snapshot_id not in on_main and s.summary is not None and KEY_STAGE in s.summary.additional_properties
    }


def test_expiry_keeps_each_groups_unconsumed_history_and_both_groups_finish_exactly(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup, ns: str
) -> None:
    ahead = make_group(**NO_HORIZON)
    behind = make_group(name=f"g_{ns}_behind", sink=f"{ns}.behind_out", **NO_HORIZON)
    source = create_source(catalog, ahead.source)
    append_batches(source, 2, 12)
    drive(spark, lakehouse, behind)
    append_batches(catalog.load_table(ahead.source), 3, 12)
    drive(spark, lakehouse, ahead)
    state = load_state(catalog, behind.name).state
    assert state is not None
    watermark = state.low_watermark()
    assert watermark is not None

    plans = expire(catalog, {g.name: g for g in (ahead, behind)}, StateRetention(), execute=True)

    [on_source] = [p for p in plans if p.table == ahead.source]
    assert on_source.done
    assert sequences(catalog, ahead.source) == list(range(watermark[1], 6)), "from the slower group's watermark on"
    assert on_source.judged.held_by == (f"group {behind.name}",)
    append_batches(catalog.load_table(ahead.source), 1, 12)
    for group in (ahead, behind):
        drive(spark, lakehouse, group)
        assert verify_group(catalog, group, key="event_id").ok, f"{group.name} consumed every row exactly once"


def test_a_registration_on_the_source_pins_it_for_a_group_defined_elsewhere_until_it_lapses(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup, ns: str
) -> None:
    here = make_group(**NO_HORIZON)
    elsewhere = make_group(name=f"g_{ns}_far", sink=f"{ns}.far_out", inactive_after="1h", **NO_HORIZON)
    append_batches(create_source(catalog, here.source), 2, 12)
    drive(spark, lakehouse, elsewhere)
    append_batches(catalog.load_table(here.source), 2, 12)
    drive(spark, lakehouse, here)
    first = read_registrations(catalog.load_table(here.source))[elsewhere.name]
    assert first.pin_sequence == 0, "registered at its first tick, before it consumed anything: it keeps all"
    state = load_state(catalog, elsewhere.name).state
    assert state is not None
    now = int(time.time() * 1000)
    assert not register(catalog.load_table(here.source), elsewhere, state, now), "fresh enough: not rewritten"
    assert register(catalog.load_table(here.source), elsewhere, state, first.seen_ms + REFRESH_MS)
    registration = read_registrations(catalog.load_table(here.source))[elsewhere.name]
    assert registration.pin_sequence == 2, "refreshed with its watermark"

    kept = expire(catalog, {here.name: here}, StateRetention(), execute=True)
    [source_plan] = [p for p in kept if p.table == here.source]
    assert source_plan.judged.held_by == (f"group {elsewhere.name} (registered, sink {elsewhere.sink})",)
    assert sequences(catalog, here.source)[0] == 2

    old = now - 2 * 3_600_000
    source = catalog.load_table(here.source)
    source.transaction().remove_properties(f"icegroup.consumer.{elsewhere.name}").commit_transaction()
    assert register(catalog.load_table(here.source), elsewhere, state, old)
    lapsed = expire(catalog, {here.name: here}, StateRetention(), execute=True)
    [source_plan] = [p for p in lapsed if p.table == here.source]
    assert source_plan.lapsed == [elsewhere.name], "silent for longer than inactive_after: it no longer pins"
    assert sequences(catalog, here.source)[0] > 2


def test_the_sink_keeps_what_reconciliation_reads_and_loses_staged_leftovers(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group(**NO_HORIZON)
    consumed(spark, lakehouse, catalog, group, 3, 12)
    sink_table = f"{lakehouse.catalog_name}.{group.sink}"
    stage_shard(spark.table(sink_table).limit(1), sink_table)
    staged = leftovers(catalog, group.sink)
    assert staged, "the stage without a publish is off main"
    state = load_state(catalog, group.name).state
    assert state is not None
    assert state.sink_cursor is not None

    now = int(time.time() * 1000)
    young = expire(catalog, {group.name: group}, StateRetention(), execute=True, now_ms=now)
    [plan] = [p for p in young if p.table == group.sink]
    cursor = catalog.load_table(group.sink).snapshot_by_id(state.sink_cursor)
    assert cursor is not None, "the reconciled cursor stays"
    assert plan.staged == [], "a young staged snapshot may still be published"

    later = expire(catalog, {group.name: group}, StateRetention(), execute=True, now_ms=now + STAGED_AFTER_MS + 60_000)
    [plan] = [p for p in later if p.table == group.sink]
    assert set(plan.staged) == staged
    assert leftovers(catalog, group.sink) == set(), "every leftover stage is gone"
    append_batches(catalog.load_table(group.source), 1, 12)
    drive(spark, lakehouse, group)
    assert verify_group(catalog, group, key="event_id").ok


def test_state_tables_keep_their_last_snapshots_and_the_group_goes_on(
    spark: SparkSession,
    lakehouse: LakehouseConfig,
    catalog: Catalog,
    make_group: MakeGroup,
    env: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    group = make_group(shard_caps={"max_files": 1})
    consumed(spark, lakehouse, catalog, group, 4, 12)
    assert len(catalog.load_table(registry_identifier(group.name)).snapshots()) > 2
    groups = tmp_path / "groups.yaml"
    groups.write_text(yaml.safe_dump({"groups": [group.model_dump(mode="json", exclude_defaults=True)]}))

    assert main(["--groups", str(groups), "expire", "--keep-state", "2", "--keep-state-for", "0s"]) == 0
    out = capsys.readouterr().out
    assert "preview: nothing expired" in out
    assert f"group {group.name}" in out, "the preview names what pins the source"
    expire = ["expire", "--keep-state", "2", "--keep-state-for", "0s", "--execute", "--json"]
    assert main(["--groups", str(groups), *expire]) == 0
    report = {row["table"]: row for row in json.loads(capsys.readouterr().out)["tables"]}
    assert report[registry_identifier(group.name)]["keep"] == 2
    assert len(catalog.load_table(registry_identifier(group.name)).snapshots()) == 2

    append_batches(catalog.load_table(group.source), 1, 12)
    drive(spark, lakehouse, group)
    assert verify_group(catalog, group, key="event_id").ok
    assert main(["--groups", str(groups), "expire", "--keep-state-for", "soon"]) == 2
    assert "--keep-state-for: 'soon' is not a duration" in capsys.readouterr().err


def test_expiry_running_all_the_while_a_group_consumes_stops_nothing_and_loses_nothing(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group(shard_caps={"max_files": 1}, **NO_HORIZON)
    append_batches(create_source(catalog, group.source), 3, 12)
    stop = threading.Event()
    rounds: list[int] = []

    def expire_all_the_while() -> None:
        while not stop.is_set():
            plans = expire(catalog, {group.name: group}, StateRetention(keep_last=1, keep_for=timedelta(0)), True)
            rounds.append(sum(len(p.judged.expire) for p in plans if p.done))

    worker = threading.Thread(target=expire_all_the_while)
    worker.start()
    try:
        for _ in range(3):
            consume(lambda: spark, lakehouse, group, "run-1", lambda _: RunState.SUCCEEDED, progress=quiet)
            append_batches(catalog.load_table(group.source), 2, 12)
        consume(lambda: spark, lakehouse, group, "run-1", lambda _: RunState.SUCCEEDED, progress=quiet)
    finally:
        stop.set()
        worker.join()
    assert len(rounds) > 3
    assert sum(rounds) > 0, "expiry ran and expired snapshots while the group consumed"
    assert verify_group(catalog, group, key="event_id").ok


@pytest.mark.dagster
def test_the_expire_job_runs_in_dagster_and_its_schedule_starts_stopped(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup, env: Path
) -> None:
    group = make_group(**NO_HORIZON)
    consumed(spark, lakehouse, catalog, group, 3, 12)
    built = build_definitions({group.name: group}, lakehouse.catalog_name)
    schedule = built.resolve_schedule_def("icegroup_expire_schedule")
    assert schedule.default_status == dg.DefaultScheduleStatus.STOPPED, "retention is the deployment's choice"
    before = len(catalog.load_table(registry_identifier(group.name)).snapshots())

    config = {"ops": {"icegroup_expire_op": {"config": {"keep_state": 1, "keep_state_for": "0s"}}}}
    with dg.instance_for_test() as instance:
        result = built.resolve_job_def("icegroup_expire").execute_in_process(instance=instance, run_config=config)
    assert result.success
    assert len(catalog.load_table(registry_identifier(group.name)).snapshots()) == 1 < before


def test_a_reset_after_expiry_still_replaces_the_output_it_consumes_again(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group(shard_caps={"max_files": 1})
    append_batches(create_source(catalog, group.source), 4, 12)
    for _ in range(4):  # one sink commit per source snapshot, each reconciled: the cursor moves past them
        drive(spark, lakehouse, group)
        append_batches(catalog.load_table(group.source), 1, 12)
    drive(spark, lakehouse, group)
    source_before = sequences(catalog, group.source)

    [sink_plan] = [
        p for p in expire(catalog, {group.name: group}, StateRetention(), execute=True) if p.table == group.sink
    ]

    assert sequences(catalog, group.source) == source_before, "the replay horizon (7 days) keeps the source"
    assert any("output a reset may still replace" in h for h in sink_plan.judged.held_by), sink_plan.judged.held_by
    execute_reset(catalog, group, ResetTarget("earliest"))
    drive(spark, lakehouse, group)
    assert verify_group(catalog, group, key="event_id").ok, "every row once: the reset found every commit to replace"
