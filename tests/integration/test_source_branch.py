"""A group's branch on its source keeps what it still reads through another engine's snapshot expiry.

Spark's own ``expire_snapshots`` procedure, run on the source with an age of "now" and
``retain_last => 1`` while the group lags four snapshots behind, takes the history the group has
consumed and keeps the four it has not (branch ``icegroup-<group>``); the group then catches up,
exactly once. ``icegroup expire`` removes the branch of a group that is no longer active.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest
from pyiceberg.catalog import Catalog
from pyspark.sql import SparkSession

from icegroup.iceberg.config.lakehouse import LakehouseConfig
from icegroup.iceberg.describe import describe_group
from icegroup.iceberg.leader import tick
from icegroup.iceberg.protocol.liveness import RunState
from icegroup.iceberg.protocol.retention import StateRetention
from icegroup.iceberg.protocol.source_branch import ref_name
from icegroup.iceberg.retention import expire
from icegroup.iceberg.store.source_branch import read_ref
from icegroup.iceberg.verify import verify_group
from tests.consuming import consume
from tests.factories import MakeGroup, append_batches, create_source
from tests.integration.helpers import quiet, sink_ids

pytestmark = pytest.mark.spark


def test_sparks_expire_snapshots_keeps_every_snapshot_a_lagging_group_still_reads(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group()
    source = create_source(catalog, group.source)
    append_batches(source, 3, 12)
    consume(lambda: spark, lakehouse, group, "run-1", lambda _: RunState.MISSING, progress=quiet)
    consumed = [s.snapshot_id for s in source.refresh().snapshots()]
    append_batches(source, 4, 12)
    pending = [s.snapshot_id for s in source.refresh().snapshots()][len(consumed) :]
    tick(catalog, group, lambda _: RunState.MISSING)  # plans the four: the group lags, nothing of them consumed

    ref = read_ref(source.refresh(), group.name)
    assert ref is not None
    assert ref.snapshot_id == pending[-1]
    assert ref.keep == len(pending) + 1, "the four pending snapshots and the low watermark they start after"
    older = (datetime.now(UTC) + timedelta(minutes=1)).strftime("%Y-%m-%d %H:%M:%S")
    spark.sql(
        f"CALL {lakehouse.catalog_name}.system.expire_snapshots(table => '{group.source}', "
        f"older_than => TIMESTAMP '{older}', retain_last => 1)"
    ).collect()

    left = {s.snapshot_id for s in source.refresh().snapshots()}
    assert set(pending) <= left, "every snapshot the group still reads survived"
    assert not set(consumed[:-1]) & left, "the expiry was aggressive: what the group consumed is gone"
    retention = describe_group(catalog, group).retention
    said = f"source branch {ref_name(group.name)}: at snapshot {pending[-1]}; any engine's expire_snapshots keeps it"
    said += " and the 4 before it"
    assert any(line.startswith(said) for line in retention), retention

    summary = consume(lambda: spark, lakehouse, group, "run-2", lambda _: RunState.MISSING, progress=quiet)

    assert summary.caught_up
    assert verify_group(catalog, group, key="event_id").ok
    assert sum(sink_ids(catalog, group).values()) == 7 * 12


def test_icegroup_expire_removes_the_branch_of_a_group_no_longer_registered(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group()
    source = create_source(catalog, group.source)
    append_batches(source, 2, 6)
    tick(catalog, group, lambda _: RunState.MISSING)
    head = source.refresh().current_snapshot()
    assert head is not None
    source.manage_snapshots().create_branch(head.snapshot_id, ref_name("gone"), min_snapshots_to_keep=2).commit()

    plans = expire(catalog, {group.name: group}, StateRetention(), execute=True, now_ms=int(time.time() * 1000))

    (plan,) = [p for p in plans if p.table == group.source]
    assert plan.stray_refs == ["gone"]
    refs = source.refresh().metadata.refs
    assert ref_name("gone") not in refs, "a branch no active group holds keeps nothing"
    assert ref_name(group.name) in refs, "the configured group keeps its own"
