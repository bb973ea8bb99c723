"""Small shards of a lease share one fenced sink commit; progress, the shard check and lineage stay exact."""

from __future__ import annotations

import pytest
from pyiceberg.catalog import Catalog
from pyspark.sql import SparkSession

from icegroup.iceberg.config.lakehouse import LakehouseConfig
from icegroup.iceberg.errors import AlreadyCommitted
from icegroup.iceberg.protocol.file_ref import file_ref
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.shards import sink_window
from icegroup.iceberg.protocol.sink_commit import (
    COL_FILE,
    COL_SHARD,
    KEY_SHARD_IDS,
    commit_properties,
    parse_commit,
    shard_texts,
)
from icegroup.iceberg.store.registry import load_state
from icegroup.iceberg.verify import verify_group
from icegroup.spark_jobs.borrower.lease import run_lease
from icegroup.spark_jobs.shards import read_shard
from icegroup.spark_jobs.sink.fenced_commit import publish_shard, stage_shard
from icegroup.spark_jobs.sink.shape import with_lineage
from tests.factories import MakeGroup, append_batches, create_source
from tests.integration.helpers import drive, quiet
from tests.integration.test_fencing_and_resume import first_lease

pytestmark = pytest.mark.spark


def icegroup_commits(catalog: Catalog, group: GroupConfig) -> list[list[str]]:
    """The shard ids of each sink commit on main, oldest first."""
    sink = catalog.load_table(group.sink)
    commits = []
    for snapshot in sink.snapshots():
        decoded = parse_commit(snapshot.snapshot_id, snapshot.timestamp_ms, snapshot.summary or {}, 0)
        if decoded is not None:
            commits.append([s.shard_id for s in decoded.shards])
    return commits


def test_a_lease_of_small_shards_publishes_them_in_one_commit_that_names_each(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group(max_borrowers=1, shard_caps={"max_files": 1}, lease_max_shards=8)
    append_batches(create_source(catalog, group.source), 5, 9)
    lease, shards = first_lease(catalog, group)
    assert len(shards) >= 4, "one file per shard: each snapshot's streams make shards of their own"

    report = run_lease(spark, lakehouse, group, lease, shards, progress=quiet)

    assert report.committed == [s.shard_id for s in shards]
    assert len(report.sink_snapshots) == 1
    assert icegroup_commits(catalog, group) == [[s.shard_id for s in shards]]
    rows = shard_texts(
        catalog.load_table(group.sink).scan(selected_fields=(COL_SHARD,)).to_arrow()[COL_SHARD].to_pylist()
    )
    per_shard = {s.shard_id: rows.count(s.shard_id) for s in shards}
    assert per_shard == {s.shard_id: s.rows for s in shards}, "each row keeps its own shard's lineage"
    drive(spark, lakehouse, group)
    state = load_state(catalog, group.name).state
    assert state is not None
    assert state.is_idle()
    assert verify_group(catalog, group, key="event_id").ok


def test_the_row_bound_splits_a_lease_into_several_commits_and_zero_commits_each_shard_alone(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group(max_borrowers=1, shard_caps={"max_files": 1}, lease_max_shards=16, commit_batch_rows=0)
    append_batches(create_source(catalog, group.source), 3, 9)
    lease, shards = first_lease(catalog, group)

    run_lease(spark, lakehouse, group, lease, shards, progress=quiet)

    assert icegroup_commits(catalog, group) == [[s.shard_id] for s in shards]

    bounded = make_group(
        name=f"{group.name}_b", sink=f"{group.sink}_b", max_borrowers=1, shard_caps={"max_files": 1},
        lease_max_shards=16, commit_batch_rows=2 * shards[0].rows,
    )  # fmt: skip
    lease, shards = first_lease(catalog, bounded)
    run_lease(spark, lakehouse, bounded, lease, shards, progress=quiet)

    commits = icegroup_commits(catalog, bounded)
    assert [s for c in commits for s in c] == [s.shard_id for s in shards]
    assert all(sum(next(x.rows for x in shards if x.shard_id == s) for s in c) <= 2 * shards[0].rows for c in commits)
    assert len(commits) < len(shards)


def test_a_batch_holding_one_committed_shard_is_refused_whole(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group(max_borrowers=1, shard_caps={"max_files": 1}, lease_max_shards=8)
    append_batches(create_source(catalog, group.source), 2, 9)
    lease, shards = first_lease(catalog, group)
    run_lease(spark, lakehouse, group, lease, shards[:1], progress=quiet)
    before = len(catalog.load_table(group.sink).snapshots())
    root = catalog.load_table(group.source).snapshots()[0].snapshot_id
    sink_table = f"{lakehouse.catalog_name}.{group.sink}"
    frames = [
        with_lineage(
            read_shard(spark, f"{lakehouse.catalog_name}.{group.source}", s, root, None),
            s.shard_id,
            sink_window(s.window_start_ms, group.replay_window),
        )
        for s in shards[:2]
    ]
    token = stage_shard(frames[1].unionByName(frames[0]), sink_table)
    props = commit_properties(group.name, group.source, lease.lease_id, lease.epoch, lease.attempt, shards[1::-1])
    assert props[KEY_SHARD_IDS] == f"{shards[1].shard_id},{shards[0].shard_id}"

    with pytest.raises(AlreadyCommitted, match=shards[0].shard_id):
        publish_shard(spark, sink_table, token, group.name, lease, [shards[1].shard_id, shards[0].shard_id], props)

    assert len(catalog.load_table(group.sink).snapshots()) == before
    assert icegroup_commits(catalog, group) == [[shards[0].shard_id]]


def test_a_batch_read_in_one_scan_labels_each_row_with_its_own_files_shard(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    """A row-wise transform's batch is one scan: each row's shard and file reference are those of its file."""
    group = make_group(max_borrowers=1, shard_caps={"max_files": 1}, lease_max_shards=8)
    append_batches(create_source(catalog, group.source), 4, 7)
    lease, shards = first_lease(catalog, group)
    assert len({s.stream for s in shards}) > 1, "the batch spans streams, so the scan spans their ranges"
    said: list[str] = []

    report = run_lease(spark, lakehouse, group, lease, shards, progress=said.append)

    assert len(report.sink_snapshots) == 1
    assert not [line for line in said if "alone" in line], "the batch was staged as one, not shard by shard"

    shard_of_ref = {file_ref(path): s.shard_id for s in shards for path in s.files}
    rows = catalog.load_table(group.sink).scan(selected_fields=(COL_SHARD, COL_FILE, "event_id")).to_arrow()
    assert rows.num_rows == sum(s.rows for s in shards)
    labels = list(zip(rows.column(COL_FILE).to_pylist(), shard_texts(rows.column(COL_SHARD).to_pylist()), strict=True))
    assert all(ref is not None for ref, _ in labels), "an identity transform streams rows: every row names its file"
    assert [shard for _, shard in labels] == [shard_of_ref[ref] for ref, _ in labels]
    drive(spark, lakehouse, group)
    assert verify_group(catalog, group, key="event_id").ok


def test_a_batch_whose_transform_aggregates_is_transformed_shard_by_shard(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    """An aggregation sees each shard on its own, as a lone shard would: one total per region and shard."""
    group = make_group(
        max_borrowers=1,
        shard_caps={"max_files": 1},
        lease_max_shards=8,
        transform="tests.integration.transforms:totals_by_region",
    )
    append_batches(create_source(catalog, group.source), 4, 7)
    lease, shards = first_lease(catalog, group)

    report = run_lease(spark, lakehouse, group, lease, shards, progress=quiet)

    assert len(report.sink_snapshots) == 1, "the shards still commit together"
    rows = catalog.load_table(group.sink).scan(selected_fields=(COL_SHARD, COL_FILE)).to_arrow()
    assert sorted(map(str, shard_texts(rows.column(COL_SHARD).to_pylist()))) == sorted(s.shard_id for s in shards)
    assert set(rows.column(COL_FILE).to_pylist()) == {None}
