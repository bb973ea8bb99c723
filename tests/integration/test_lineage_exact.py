"""Lineage exact both ways and complete at every moment, on real Spark and Iceberg.

Forwards, a source file names exactly the sink rows made from it: each row carries its file's
reference (``_ig_file``). Backwards, the newest commit is answered before the Leader records it.
Every answer is checked against the files and the sink themselves.
"""

from __future__ import annotations

from collections import Counter

import pytest
from pyiceberg.catalog import Catalog
from pyspark.sql import SparkSession

from icegroup.iceberg.config.lakehouse import LakehouseConfig
from icegroup.iceberg.errors import UsageError
from icegroup.iceberg.leader import tick
from icegroup.iceberg.lineage import by_sink_snapshot, by_source_file
from icegroup.iceberg.lineage_rows import by_rows
from icegroup.iceberg.protocol.lineage import CONSUMED, REPLAYED
from icegroup.iceberg.protocol.liveness import RunState
from icegroup.iceberg.store.lineage import load_lineage
from icegroup.spark_jobs.borrower.lease import run_lease
from icegroup.spark_jobs.replay import replay_window
from tests.factories import MakeGroup, append_batches, create_source, today
from tests.integration.helpers import consumed, drive, quiet
from tests.integration.test_lineage import all_entries, events_by_file

pytestmark = pytest.mark.spark


def test_forward_lineage_from_every_source_file_names_exactly_the_rows_made_from_it(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group(transform="icegroup.spark_jobs.transforms:enrich_events", shard_caps={"max_files": 3})
    consumed(spark, lakehouse, catalog, group, 6, 30)
    held = events_by_file(catalog, group.source)
    sink = catalog.load_table(group.sink)
    assert max(Counter(e.shard_id for e in all_entries(catalog, group)).values()) > 1, "shards of several files"

    for path, events in held.items():
        forward = by_source_file(catalog, group, path)
        assert forward.sink_filter is not None
        named = sink.scan(row_filter=forward.sink_filter, selected_fields=("event_id",)).to_arrow()

        assert set(named.column("event_id").to_pylist()) == events, f"{path}: precision and recall 1.0"
        assert sum(forward.sink_rows.values()) == len(events) == named.num_rows
        assert forward.note == ""


def test_an_aggregations_rows_come_from_no_one_file_so_their_shard_is_named_and_the_note_says_why(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group(transform="tests.integration.transforms:totals_by_region", shard_caps={"max_files": 3})
    consumed(spark, lakehouse, catalog, group, 3, 30)
    path = sorted(events_by_file(catalog, group.source))[0]

    forward = by_source_file(catalog, group, path)

    [shard] = {e.shard_id for e in forward.found}
    assert forward.sink_rows == {shard: 1}, "the shard's one total, made from this file and others"
    assert "1 of the 1 sink rows named carry no source-file reference" in forward.note


def test_the_newest_commits_are_answered_from_the_commits_before_the_leader_records_them(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group(shard_caps={"max_files": 2})
    append_batches(create_source(catalog, group.source), 2, 12)
    granted = tick(catalog, group, lambda _: RunState.MISSING)
    for lease in granted.launch:
        shards = [granted.state.shards[shard_id] for shard_id in lease.shard_ids]
        run_lease(spark, lakehouse, group, lease, shards, progress=quiet)
    assert load_lineage(catalog, group.name) is None, "no tick has recorded anything yet"
    held = events_by_file(catalog, group.source)
    head = catalog.load_table(group.sink).current_snapshot()
    assert head is not None

    newest = by_sink_snapshot(catalog, group, head.snapshot_id)
    assert newest.found, "the commit just made is answered, not an empty list"
    assert newest.unrecorded >= 1
    assert {e.kind for e in newest.found} == {CONSUMED}
    assert {e.source_file for e in newest.found} <= set(held)
    path, events = sorted(held.items())[0]
    assert sum(by_source_file(catalog, group, path).sink_rows.values()) == len(events)
    event_id = min(events)
    assert {e.source_file for e in by_rows(catalog, group, f"event_id = {event_id}").found} == {path}

    report = replay_window(spark, lakehouse, group, today(group), progress=quiet)
    assert report.sink_snapshot is not None
    replayed = by_sink_snapshot(catalog, group, report.sink_snapshot)
    assert {e.kind for e in replayed.found} == {REPLAYED}
    assert {e.source_file for e in replayed.found} == set(held)
    after_replay = by_source_file(catalog, group, path)
    assert "carry no source-file reference" not in after_replay.note, "a replay's rows keep their source file"
    assert sum(after_replay.sink_rows.values()) == len(events), "the replayed file's rows, exactly"

    drive(spark, lakehouse, group)
    recorded = by_sink_snapshot(catalog, group, report.sink_snapshot)
    assert recorded.unrecorded == 0
    assert set(recorded.found) == set(replayed.found), "the tick records what was answered before it"


def test_a_sink_snapshot_nobody_knows_is_an_error_that_names_where_to_look(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group()
    consumed(spark, lakehouse, catalog, group, 1, 6)

    with pytest.raises(UsageError, match=f"icegroup checkpoints {group.name}"):
        by_sink_snapshot(catalog, group, 12345)
