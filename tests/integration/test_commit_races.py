"""Commit races at max_borrowers: conflicting sink commits are retried with backoff, logged, and all land."""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import date

import pytest
from pyiceberg.catalog import Catalog
from pyspark.sql import SparkSession

from icegroup.iceberg.config.lakehouse import LakehouseConfig
from icegroup.iceberg.leader import tick
from icegroup.iceberg.protocol.liveness import RunState
from icegroup.iceberg.protocol.sink_commit import commit_properties
from icegroup.iceberg.store.sink_history import read_sink_history
from icegroup.spark_jobs.session import activate
from icegroup.spark_jobs.shards import read_shard
from icegroup.spark_jobs.sink.fenced_commit import Published, publish_shard, stage_shard
from icegroup.spark_jobs.sink.shape import ensure_sink, with_lineage
from tests.factories import MakeGroup, append_batches, create_source

pytestmark = pytest.mark.spark


def test_sink_commits_racing_at_max_borrowers_are_retried_not_failed(
    spark: SparkSession,
    lakehouse: LakehouseConfig,
    catalog: Catalog,
    make_group: MakeGroup,
    caplog: pytest.LogCaptureFixture,
) -> None:
    group = make_group(max_borrowers=3, leases_per_borrower=1)
    source = create_source(catalog, group.source)
    append_batches(source, 1, 30)
    result = tick(catalog, group, lambda _: RunState.MISSING)
    assert len(result.launch) == group.max_borrowers
    root = catalog.load_table(group.source).snapshots()[0].snapshot_id
    source_table = f"{lakehouse.catalog_name}.{group.source}"
    sink_table = f"{lakehouse.catalog_name}.{group.sink}"
    staged = []
    for lease in result.launch:
        shard = result.state.shards[lease.shard_ids[0]]
        out = with_lineage(read_shard(spark, source_table, shard, root, None), shard.shard_id, date(2026, 1, 1))
        ensure_sink(spark, lakehouse.catalog_name, group.sink, out)
        staged.append((lease, shard, stage_shard(out, sink_table)))
    barrier = threading.Barrier(len(staged), timeout=60)

    def publish(item: tuple) -> Published:  # type: ignore[type-arg]
        lease, shard, token = item
        activate(spark)
        props = commit_properties(group.name, group.source, lease.lease_id, 0, 0, [shard])
        barrier.wait()
        return publish_shard(spark, sink_table, token, group.name, lease, [shard.shard_id], props)

    with (
        caplog.at_level(logging.WARNING, logger="icegroup.spark_jobs.sink.fenced_commit"),
        ThreadPoolExecutor(len(staged)) as pool,
    ):
        published = list(pool.map(publish, staged))

    assert sum(p.conflicts for p in published) >= 1, "the commits really raced"
    assert any("sink commit retried after" in r.getMessage() for r in caplog.records)
    history = read_sink_history(catalog, group.sink, group.name, None)
    assert sorted(s.shard_id for c in history.commits for s in c.shards) == sorted(s.shard_id for _, s, _ in staged)
    assert {p.snapshot_id for p in published} == {c.snapshot_id for c in history.commits}
