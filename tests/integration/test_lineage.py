"""Lineage on real Spark and Iceberg: recorded once by the Leader, answered both ways, checked against the data.

Every answer is checked against the source files themselves: the file a sink row's lineage names
must hold that row's event id, and a source file's forward answer must count the sink rows its
events became.
"""

from __future__ import annotations

import json
import random
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog import Catalog
from pyspark.sql import SparkSession

from icegroup.dagster_project.assets import DATA_VERSION_TAG, complete_events, source_observation
from icegroup.dagster_project.cli import main
from icegroup.iceberg.config.lakehouse import LakehouseConfig
from icegroup.iceberg.errors import RegistryConflict
from icegroup.iceberg.leader import tick
from icegroup.iceberg.lineage import (
    by_sink_snapshot,
    by_source_file,
    by_source_snapshot,
    by_window,
)
from icegroup.iceberg.lineage_chain import trace_back, trace_forward
from icegroup.iceberg.lineage_rows import by_rows
from icegroup.iceberg.protocol.completion import CLOSE_GRACE_MS
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.lineage import CONSUMED, REPLAYED, LineageEntry
from icegroup.iceberg.protocol.liveness import RunState
from icegroup.iceberg.protocol.reset import ResetTarget
from icegroup.iceberg.protocol.shards import DAY_MS, window_start_ms
from icegroup.iceberg.protocol.sink_commit import COL_SHARD, shard_number, shard_texts
from icegroup.iceberg.reset import execute_reset
from icegroup.iceberg.store.lineage import commit_entries, entries, load_lineage, record_lineage, window_entries
from icegroup.iceberg.store.registry import load_state
from icegroup.spark_jobs.replay import replay_window
from tests.factories import MakeGroup, append_batches, create_source, tables_of, today, write_groups
from tests.integration.helpers import consumed, drive, quiet

pytestmark = pytest.mark.spark


def events_by_file(catalog: Catalog, identifier: str) -> dict[str, set[int]]:
    """Every live data file of a table and the event ids it really holds, read from the file itself."""
    table = catalog.load_table(identifier)
    held = {}
    for path in table.inspect.files().column("file_path").to_pylist():
        with table.io.new_input(path).open() as stream:
            held[path] = set(pq.read_table(stream, columns=["event_id"]).column("event_id").to_pylist())
    return held


def all_entries(catalog: Catalog, group: GroupConfig) -> list[LineageEntry]:
    """Every entry of the group's lineage table."""
    table = load_lineage(catalog, group.name)
    assert table is not None, "the Leader created the lineage table"
    return entries(table, "epoch >= 0")


def test_lineage_of_random_sink_rows_names_the_source_files_that_hold_them(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group(shard_caps={"max_files": 2})
    consumed(spark, lakehouse, catalog, group, 5, 24)
    held = events_by_file(catalog, group.source)

    recorded = all_entries(catalog, group)
    assert Counter(e.source_file for e in recorded) == Counter(list(held)), "each source file is recorded exactly once"
    sizes = {e.source_file: e.file_records for e in recorded}
    assert sizes == {path: len(ids) for path, ids in held.items()}, "record counts are the files' own"

    sink_ids = catalog.load_table(group.sink).scan(selected_fields=("event_id",)).to_arrow().column("event_id")
    for event_id in random.Random(5).sample(sink_ids.to_pylist(), 8):
        found = by_rows(catalog, group, f"event_id = {event_id}")
        assert len({e.shard_id for e in found.found}) == 1, "a row comes from one shard"
        files = {e.source_file for e in found.found}
        assert files == {f for f, ids in held.items() if event_id in ids}, f"event {event_id}: exactly its file"
        assert sum(found.sink_rows.values()) == 1
        assert found.unrecorded == 0

    path = sorted(held)[0]
    forward = by_source_file(catalog, group, path)
    assert {e.source_file for e in forward.found} == {path}
    assert sum(forward.sink_rows.values()) == len(held[path]), "the rows made from that file, no others"
    sink = catalog.load_table(group.sink)
    commit = sink.snapshot_by_id(forward.found[0].sink_snapshot)
    assert commit is not None
    assert forward.found[0].shard_id in commit.summary["icegroup.shard-ids"]

    backwards = by_sink_snapshot(catalog, group, forward.found[0].sink_snapshot)
    assert forward.found[0] in backwards.found
    assert {e.shard_id for e in by_window(catalog, group, today(group)).found} == {e.shard_id for e in recorded}
    by_snapshot = by_source_snapshot(catalog, group, forward.found[0].source_snapshot)
    assert path in {e.source_file for e in by_snapshot.found}


def test_recording_is_idempotent_and_a_stale_recorder_loses_the_swap(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group()
    consumed(spark, lakehouse, catalog, group, 2, 12)
    before = all_entries(catalog, group)
    state = load_state(catalog, group.name).state
    assert state is not None
    tables = tables_of(catalog, group)
    recorded = record_lineage(catalog, group, state.shards, tables.sink, tables.open_lineage())
    assert recorded.added == 0, "nothing new in the sink: nothing recorded"

    stale = load_lineage(catalog, group.name)
    assert stale is not None
    append_batches(catalog.load_table(group.source), 1, 12)
    drive(spark, lakehouse, group)
    assert len(all_entries(catalog, group)) == len(before) + 3
    with pytest.raises(RegistryConflict, match="moved while recording"):
        commit_entries(stale, before[:1], set(), set(), 1, 1)
    assert len(all_entries(catalog, group)) == len(before) + 3


def test_lineage_outlives_source_expiry_and_sink_compaction(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group(shard_caps={"max_files": 1})
    consumed(spark, lakehouse, catalog, group, 4, 12)
    held = events_by_file(catalog, group.source)
    first_commit = min(all_entries(catalog, group), key=lambda e: e.committed_at_ms).sink_snapshot

    catalog.load_table(group.source).maintenance.expire_snapshots().older_than(datetime.now(UTC)).commit()
    compact = "options => map('min-input-files','2')"
    spark.sql(f"CALL {lakehouse.catalog_name}.system.rewrite_data_files(table => '{group.sink}', {compact})")
    spark.sql(
        f"CALL {lakehouse.catalog_name}.system.expire_snapshots(table => '{group.sink}', retain_last => 1, "
        f"older_than => TIMESTAMP '{datetime.now(UTC).strftime('%Y-%m-%d %H:%M:%S.%f')}')"
    )
    sink = catalog.load_table(group.sink)
    assert sink.snapshot_by_id(first_commit) is None, "the commit itself expired"
    assert len(sink.inspect.files()) < len(held), "the sink's files were merged"

    assert by_sink_snapshot(catalog, group, first_commit).found, "an expired sink commit still resolves"
    for event_id in (1, 20, 48):
        files = {e.source_file for e in by_rows(catalog, group, f"event_id = {event_id}").found}
        assert [f for f in files if event_id in held[f]], f"event {event_id} resolves after compaction"


def test_a_replay_supersedes_its_windows_entries_and_a_reset_voids_what_it_deleted(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group(shard_caps={"max_files": 2})
    append_batches(create_source(catalog, group.source), 3, 12)
    drive(spark, lakehouse, group)
    files = len(catalog.load_table(group.source).inspect.files())
    consumed = all_entries(catalog, group)
    assert {e.kind for e in consumed} == {CONSUMED}
    assert len(consumed) == files

    report = replay_window(spark, lakehouse, group, today(group), progress=quiet)
    drive(spark, lakehouse, group)
    table = load_lineage(catalog, group.name)
    assert table is not None
    replayed = window_entries(table, today(group))
    assert len(replayed) == files, "superseded, not duplicated"
    assert {(e.kind, e.sink_snapshot, e.generation) for e in replayed} == {(REPLAYED, report.sink_snapshot, 1)}
    assert {(e.shard_id, e.source_file) for e in replayed} == {(e.shard_id, e.source_file) for e in consumed}
    superseded = by_sink_snapshot(catalog, group, consumed[0].sink_snapshot)
    assert superseded.found == []
    assert f"was replaced since (a replay of its window, or a reset); ask by --window {today(group)}" in superseded.note

    execute_reset(catalog, group, ResetTarget("earliest"))
    drive(spark, lakehouse, group)
    after = all_entries(catalog, group)
    state = load_state(catalog, group.name).state
    assert state is not None
    assert len(after) == files, "the reset's deleted output left the lineage; its new output entered it"
    assert {(e.kind, e.epoch) for e in after} == {(CONSUMED, state.epoch)}
    sink = catalog.load_table(group.sink).scan(selected_fields=(COL_SHARD,)).to_arrow()
    sink_shards = set(shard_texts(sink.column(COL_SHARD).to_pylist()))
    assert {e.shard_id for e in after} == sink_shards, "lineage names exactly the shards the sink holds"


def test_through_follows_a_row_to_the_first_source_and_a_file_to_the_last_sink(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup, ns: str
) -> None:
    first = make_group(shard_caps={"max_files": 2})
    second = make_group(name=f"g_{ns}_next", source=first.sink, sink=f"{ns}.events_next")
    groups = {g.name: g for g in (first, second)}
    consumed(spark, lakehouse, catalog, first, 3, 12)
    drive(spark, lakehouse, second)
    held = events_by_file(catalog, first.source)

    found = by_rows(catalog, second, "event_id = 7")
    trace_back(catalog, groups, second, found)
    assert [hop.group for hop in found.hops] == [first.name]
    files = {e.source_file for e in found.hops[0].found}
    assert files == {f for f, ids in held.items() if 7 in ids}, "the first source's file that holds the row"

    path = next(p for p, ids in held.items() if 7 in ids)
    forward = by_source_file(catalog, first, path)
    trace_forward(catalog, groups, first, forward)
    assert [hop.group for hop in forward.hops] == [second.name]
    made = forward.hops[0].sink_filter
    assert made is not None
    rows = catalog.load_table(second.sink).scan(row_filter=made).to_arrow()
    # Downstream, rows are named by the upstream sink files they were read from, which mix source files.
    assert held[path] <= set(rows.column("event_id").to_pylist()), "the last sink's rows made from the file"
    assert sum(forward.hops[0].sink_rows.values()) == rows.num_rows


def test_icegroup_lineage_answers_as_json_and_names_the_fix_for_a_bad_question(
    spark: SparkSession,
    lakehouse: LakehouseConfig,
    catalog: Catalog,
    make_group: MakeGroup,
    env: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    group = make_group()
    groups = ["--groups", str(write_groups(tmp_path / "groups.yaml", group))]
    append_batches(create_source(catalog, group.source), 2, 12)
    assert main([*groups, "lineage", group.name, "--window", today(group)]) == 2
    assert "no lineage recorded yet" in capsys.readouterr().err

    drive(spark, lakehouse, group)
    assert main([*groups, "lineage", group.name, "--row", "event_id = 5", "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["unrecorded_sink_commits"] == 0
    [shard] = answer["shards"]
    assert shard["sink_rows_now"] == 1
    assert shard["files"], answer
    assert answer["sink_filter"] == f"{COL_SHARD} IN ({shard_number(shard['shard'])})"

    assert main([*groups, "lineage", group.name, "--window", today(group)]) == 0
    text = capsys.readouterr().out
    assert f"group {group.name}: window {today(group)}" in text
    assert "source files (" in text

    assert main([*groups, "lineage", group.name, "--window", "x", "--row", "event_id = 5"]) == 2
    assert "ask one question" in capsys.readouterr().err
    assert main([*groups, "lineage", group.name, "--row", "no_such_column = 5"]) == 2
    assert "--row: 'no_such_column = 5' is not a filter" in capsys.readouterr().err
    assert main([*groups, "lineage", group.name, "--row", "event_id =="]) == 2
    assert "--row: 'event_id ==' is not a filter" in capsys.readouterr().err
    assert main([*groups, "lineage", group.name, "--window", "2026-13-01"]) == 2
    assert "--window:" in capsys.readouterr().err


@pytest.mark.dagster
def test_a_complete_windows_materialization_carries_its_provenance_and_source_version(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group(shard_caps={"max_files": 2}, window_start=datetime.now(UTC).date().isoformat())
    consumed(spark, lakehouse, catalog, group, 3, 12)
    head = catalog.load_table(group.source).current_snapshot()
    assert head is not None
    start = window_start_ms(int(time.time() * 1000), group.replay_window)

    result = tick(catalog, group, lambda _: RunState.SUCCEEDED, now_ms=start + DAY_MS + CLOSE_GRACE_MS + 1)

    assert result.complete == [start], "tomorrow, today's window is complete"
    made = result.provenance[start]
    recorded = all_entries(catalog, group)
    assert (made.shards, made.source_files, made.source_rows) == (len({e.shard_id for e in recorded}), 9, 36)
    assert made.source_snapshot == head.snapshot_id
    assert set(made.sink_snapshots) == {e.sink_snapshot for e in recorded}

    source_key, sink_key = dg.AssetKey(["lake", group.source]), dg.AssetKey(["lake", group.sink])
    sink = catalog.load_table(group.sink)
    sink_head = sink.current_snapshot()
    assert sink_head is not None
    [event] = complete_events(group, sink_key, source_key, result.complete, result.provenance, sink)
    assert isinstance(event, dg.AssetMaterialization)
    assert event.metadata["source_files"] == dg.MetadataValue.int(9)
    assert event.metadata["lineage"] == dg.MetadataValue.md(f"`icegroup lineage {group.name} --window {today(group)}`")
    assert event.metadata["source_snapshot"] == dg.MetadataValue.text(str(head.snapshot_id)), "made from the head"
    assert event.metadata["code_version"] == dg.MetadataValue.text(group.config_hash), "by the filter and transform"
    assert event.tags == {DATA_VERSION_TAG: str(sink_head.snapshot_id)}, "no tag of Dagster's but the data version"
    with dg.instance_for_test() as instance:
        instance.report_runless_asset_event(source_observation(source_key, head.snapshot_id))
        instance.report_runless_asset_event(event)
        record = instance.get_latest_data_version_record(sink_key, is_source=False, partition_key=today(group))
        assert record is not None
        assert record.asset_materialization is not None
        assert record.asset_materialization.tags[DATA_VERSION_TAG] == str(sink_head.snapshot_id), "the sink snapshot"
        observed = instance.get_latest_data_version_record(source_key, is_source=True)
        assert observed is not None
        assert observed.asset_observation is not None
        assert observed.asset_observation.data_version == str(head.snapshot_id), "the source's snapshot"
