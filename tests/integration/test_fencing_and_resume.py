"""A lease commits each shard once: re-runs add nothing, a second commit is refused, a new attempt resumes."""

from __future__ import annotations

import pytest
from pyiceberg.catalog import Catalog
from pyspark.sql import SparkSession

from icegroup.iceberg.config.lakehouse import LakehouseConfig
from icegroup.iceberg.errors import AlreadyCommitted, StaleLease
from icegroup.iceberg.leader import tick
from icegroup.iceberg.protocol.fences import fence_key
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.liveness import RunState
from icegroup.iceberg.protocol.shards import Shard, sink_window
from icegroup.iceberg.protocol.sink_commit import COL_SHARD, KEY_FENCE, commit_properties
from icegroup.iceberg.protocol.state import Lease
from icegroup.iceberg.verify import verify_group
from icegroup.spark_jobs.borrower.lease import fetch_lease, run_lease
from icegroup.spark_jobs.shards import read_shard
from icegroup.spark_jobs.sink.fenced_commit import publish_shard, stage_shard
from icegroup.spark_jobs.sink.shape import with_lineage
from tests.factories import BORROWER_RUN, MakeGroup, append_batches, create_source
from tests.integration.helpers import drive, quiet

pytestmark = pytest.mark.spark


def single_stream_group(make_group: MakeGroup) -> GroupConfig:
    """One borrower and one file per shard, so a lease holds several shards of a stream in order."""
    return make_group(max_borrowers=1, shard_caps={"max_files": 1}, lease_max_shards=4)


def sink_snapshot_count(catalog: Catalog, group: GroupConfig) -> int:
    """How many snapshots the sink has."""
    return len(catalog.load_table(group.sink).snapshots())


def first_lease(catalog: Catalog, group: GroupConfig) -> tuple[Lease, list[Shard]]:
    """Tick once and take the first lease granted, with its shards in order."""
    result = tick(catalog, group, lambda lease: RunState.MISSING, owner_run_id=BORROWER_RUN)
    lease = result.launch[0]
    return lease, [result.state.shards[sid] for sid in lease.shard_ids]


def test_rerunning_a_committed_lease_adds_nothing(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = single_stream_group(make_group)
    append_batches(create_source(catalog, group.source), 3, 9)
    lease, shards = first_lease(catalog, group)

    done = run_lease(spark, lakehouse, group, lease, shards, progress=quiet)
    snapshots = sink_snapshot_count(catalog, group)
    again = run_lease(spark, lakehouse, group, lease, shards, progress=quiet)

    assert len(done.committed) == len(shards)
    assert not done.resumed
    assert again.committed == []
    assert again.resumed == [s.shard_id for s in shards]
    assert sink_snapshot_count(catalog, group) == snapshots
    assert verify_group(catalog, group, key="event_id").missing == 27 - sum(s.rows for s in shards)
    assert verify_group(catalog, group, key="event_id").duplicates == 0


def test_second_commit_of_a_shard_is_refused_at_commit_time(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    """The check that matters is the commit's own validation, not the Borrower's look at history."""
    group = single_stream_group(make_group)
    source = create_source(catalog, group.source)
    append_batches(source, 1, 9)
    result = tick(catalog, group, lambda lease: RunState.MISSING, owner_run_id=BORROWER_RUN)
    lease = result.launch[0]
    shard = result.state.shards[lease.shard_ids[0]]
    root = catalog.load_table(group.source).snapshots()[0].snapshot_id
    sink_table = f"{lakehouse.catalog_name}.{group.sink}"
    run_lease(spark, lakehouse, group, lease, [shard], progress=quiet)
    snapshots = sink_snapshot_count(catalog, group)

    rows = with_lineage(
        read_shard(spark, f"{lakehouse.catalog_name}.{group.source}", shard, root, None),
        shard.shard_id,
        sink_window(shard.window_start_ms, group.replay_window),
    )
    props = commit_properties(group.name, group.source, lease.lease_id, lease.epoch, lease.attempt, [shard])
    token = stage_shard(rows, sink_table)
    assert sink_snapshot_count(catalog, group) == snapshots + 1  # staged, not on main
    with pytest.raises(AlreadyCommitted, match=shard.shard_id):
        publish_shard(spark, sink_table, token, group.name, lease, [shard.shard_id], props)

    assert sink_snapshot_count(catalog, group) == snapshots  # the refused stage is discarded
    check = verify_group(catalog, group, key="event_id")
    assert check.found == shard.rows
    assert check.duplicates == 0


def test_a_new_attempt_resumes_after_the_last_committed_shard(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = single_stream_group(make_group)
    append_batches(create_source(catalog, group.source), 3, 9)
    lease, shards = first_lease(catalog, group)
    assert len(shards) >= 2
    run_lease(spark, lakehouse, group, lease, shards[:1], progress=quiet)

    second = tick(catalog, group, lambda lease: RunState.FAILED, owner_run_id=BORROWER_RUN)
    regranted = second.state.leases[lease.lease_id]
    assert regranted.attempt == 1
    assert second.regranted == 1
    assert [s.shard_id for s in second.committed] == [shards[0].shard_id]
    lease1, pending = fetch_lease(catalog, group.name, lease.lease_id, attempt=1)
    assert [s.shard_id for s in pending] == [s.shard_id for s in shards[1:]]
    fence = catalog.load_table(group.sink).current_snapshot()
    assert fence is not None
    assert fence.summary is not None
    assert fence.summary.additional_properties[KEY_FENCE] == fence_key(group.name, lease.lease_id), "the re-grant"
    assert lease1.sink_snapshot_at_grant == fence.parent_snapshot_id, "the head the Leader granted at, under the fence"
    report = run_lease(spark, lakehouse, group, lease1, pending, progress=quiet)

    assert report.committed == [s.shard_id for s in shards[1:]]
    drive(spark, lakehouse, group)
    assert verify_group(catalog, group, key="event_id").ok


def test_a_stale_attempt_is_refused_before_it_reads(catalog: Catalog, make_group: MakeGroup) -> None:
    group = single_stream_group(make_group)
    append_batches(create_source(catalog, group.source), 1, 9)
    lease = tick(catalog, group, lambda lease: RunState.MISSING, owner_run_id=BORROWER_RUN).launch[0]
    tick(catalog, group, lambda lease: RunState.FAILED, owner_run_id=BORROWER_RUN)

    with pytest.raises(StaleLease, match="attempt 1"):
        fetch_lease(catalog, group.name, lease.lease_id, attempt=0)


def test_a_compacted_sink_keeps_consuming(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    """Shard commits are appends that delete nothing, so files mixing shards do not get in the way."""
    group = make_group(max_borrowers=3)
    source = create_source(catalog, group.source)
    append_batches(source, 2, 30)
    drive(spark, lakehouse, group)
    spark.sql(
        f"CALL {lakehouse.catalog_name}.system.rewrite_data_files("
        f"table => '{group.sink}', options => map('min-input-files', '2', 'rewrite-all', 'true'))"
    ).collect()
    sink = catalog.load_table(group.sink)
    assert len(sink.inspect.files()) == 1
    assert len(set(sink.scan(selected_fields=(COL_SHARD,)).to_arrow()[COL_SHARD].to_pylist())) == 3

    append_batches(source, 2, 30)
    drive(spark, lakehouse, group)

    check = verify_group(catalog, group, key="event_id")
    assert check.ok
    assert check.found == 120
