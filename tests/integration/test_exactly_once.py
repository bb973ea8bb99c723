"""Exactly once on real Spark and Iceberg: the sink equals the expected output, row for row."""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.types import LongType
from pyspark.sql import SparkSession

from icegroup.iceberg.config.lakehouse import LakehouseConfig
from icegroup.iceberg.leader import tick
from icegroup.iceberg.protocol.liveness import RunState
from icegroup.iceberg.protocol.sink_commit import COL_SHARD, ROW_LINEAGE, shard_texts
from icegroup.iceberg.store.registry import load_state
from icegroup.iceberg.verify import verify_group
from icegroup.spark_jobs.shards import read_shard
from tests.consuming import consume
from tests.factories import REGIONS, MakeGroup, append_batches, create_source
from tests.integration.helpers import consumed, drive, scans, sink_ids

pytestmark = pytest.mark.spark


def test_two_borrowers_consume_many_snapshots_across_streams_exactly_once(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group(max_borrowers=2, leases_per_borrower=1, shard_caps={"max_files": 3}, lease_max_shards=2)
    source = create_source(catalog, group.source)
    append_batches(source, 12, 30)

    ticks, reports = drive(spark, lakehouse, group, borrowers=2)
    append_batches(catalog.load_table(group.source), 4, 30)
    _, more_reports = drive(spark, lakehouse, group, borrowers=2)

    ids = sink_ids(catalog, group)
    assert sorted(ids) == list(range(1, 16 * 30 + 1))
    assert set(ids.values()) == {1}
    assert verify_group(catalog, group, key="event_id").ok
    assert max(len(t.launch) for t in ticks) == 2, "two borrowers held leases at the same time"
    shards = {s for r in reports + more_reports for s in r.committed}
    assert len(shards) >= 3 * 4, "12 snapshots in 3 streams with 3 files per shard give at least 4 shards each"
    state = load_state(catalog, group.name).state
    assert state is not None
    assert state.is_idle()
    assert sorted(state.streams) == sorted(f"0:region={r}" for r in REGIONS)
    assert all(s.committed_rows == 16 * 10 for s in state.streams.values())


def test_sink_rows_carry_lineage_and_commits_carry_progress(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group(transform="icegroup.spark_jobs.transforms:enrich_events")
    append_batches(create_source(catalog, group.source), 2, 30)

    drive(spark, lakehouse, group)

    sink = catalog.load_table(group.sink)
    rows = sink.scan().to_arrow()
    assert set(rows.column_names) == {
        "event_id",
        "region",
        "event_ts",
        "amount",
        "amount_cents",
        "is_large",
        *ROW_LINEAGE,
    }
    assert sink.schema().find_field(COL_SHARD).field_type == LongType(), "a shard id is one number per row"
    summaries = [s.summary.additional_properties for s in sink.snapshots() if s.summary]
    mine = [p for p in summaries if p.get("icegroup.group") == group.name]
    assert mine
    assert all(len(p["icegroup.lease"]) == 16 and p["icegroup.epoch"].isdigit() for p in mine), "the commit's lease"
    committed_shards = {item["id"] for p in mine for item in json.loads(p["icegroup.shards"])}
    assert committed_shards == set(shard_texts(rows.column(COL_SHARD).to_pylist()))


def test_row_filter_limits_what_the_group_consumes(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group(filter="region = 'eu' and amount >= 50")
    append_batches(create_source(catalog, group.source), 3, 60)

    drive(spark, lakehouse, group)

    source = catalog.load_table(group.source).scan(row_filter="region = 'eu' and amount >= 50").to_arrow()
    assert sink_ids(catalog, group) == Counter(source.column("event_id").to_pylist())
    assert verify_group(catalog, group, key="event_id").ok


def test_a_shard_read_scans_its_own_files_only(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    """Other streams' files are not pruned at planning: never planned, the read is a task set of the shard's own."""
    group = make_group()
    append_batches(create_source(catalog, group.source), 2, 9)
    result = tick(catalog, group, lambda lease: RunState.MISSING)
    shard = next(s for s in result.state.shards.values() if s.stream == "0:region=eu")
    root = catalog.load_table(group.source).snapshots()[0].snapshot_id

    df = read_shard(spark, f"{lakehouse.catalog_name}.{group.source}", shard, root, None)

    assert scans(df) == ["SparkStagedScan"]
    assert sorted(r.region for r in df.collect()) == ["eu"] * 6


def test_consume_logs_say_where_time_goes_and_name_the_group_and_lease(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group(commit_batch_rows=0)  # a line per shard
    append_batches(create_source(catalog, group.source), 1, 9)
    lines: list[str] = []

    consume(lambda: spark, lakehouse, group, "run-1", lambda _: RunState.MISSING, progress=lines.append)

    assert any(re.fullmatch(rf"{group.name}: tick 1 in \d+ ms: \d+ new shards, .*", line) for line in lines)
    shard_lines = [line for line in lines if "committed: " in line]
    assert len(shard_lines) == len(REGIONS), lines
    pattern = (
        rf"{group.name} lease [0-9a-f]{{16}}#0: shard \S+ \(\S+, 3 rows\) committed: "
        r"read, transformed and staged in [\d.]+s, published in [\d.]+s"
    )
    assert all(re.fullmatch(pattern, line) for line in shard_lines), shard_lines


def test_a_group_renamed_onto_its_sink_is_verified_by_its_own_rows(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    """A changed transform's remedy is a new name: the sink then holds both names' rows, told apart by shard."""
    group = make_group(max_borrowers=1)
    consumed(spark, lakehouse, catalog, group, 2, 12)
    renamed = group.model_copy(update={"name": f"{group.name}_v2"})

    drive(spark, lakehouse, renamed)

    assert set(sink_ids(catalog, group).values()) == {2}, "each name consumed every row once"
    for each in (group, renamed):
        check = verify_group(catalog, each, key="event_id")
        assert check.ok, check.line()
        assert check.found == 24


def test_a_consume_plans_ahead_while_its_leases_run_and_stays_exactly_once(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group(max_borrowers=1, max_snapshots_per_tick=2, shard_caps={"max_files": 3}, lease_max_shards=1)
    append_batches(create_source(catalog, group.source), 8, 12)
    lines: list[str] = []

    consume(lambda: spark, lakehouse, group, "run-ahead", lambda _: RunState.MISSING, progress=lines.append)

    ids = sink_ids(catalog, group)
    assert sorted(ids) == list(range(1, 8 * 12 + 1))
    assert set(ids.values()) == {1}
    planned = [int(m.group(1)) for line in lines if (m := re.search(r": tick \d+ in \d+ ms: (\d+) new shards", line))]
    # After tick 1 granted the one lease, a tick that cut shards with nothing committed yet planned while it ran.
    ahead = [line for line in lines if re.search(r"tick (?!1 )\d+ in \d+ ms: [1-9]\d* new shards, 0 committed", line)]
    assert sum(1 for n in planned if n) == 4, lines  # 8 snapshots, 2 a tick
    assert ahead, f"no tick planned while the one lease ran: {lines}"
