"""Re-driving isolated rows: read them again, transform them with the group's (fixed) transform, commit once.

The rows a shard's commit left out (``on_poison: isolate``) are named in that commit's summary by
source file and position (``isolated_in_sink``). A re-drive reads exactly those rows from the
source, applies the group's filter and transform, gives them their shard's lineage (its shard id
and window, so lineage and replay treat them as the shard's rows), and appends them in one fenced
commit under the shard's re-drive id (``redrive_id``). The fence refuses a second commit of that
id, so two re-drives of a shard cannot both land; one whose marking was lost (a crash after its
commit) is found in the sink's history and only marked. Like a replay, the commit carries no shard
ranges, so the Leader's progress never sees it. The rows' dead-row records are then marked
``redriven`` with the sink snapshot that took them in.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from pyspark.sql import SparkSession

from iceberg.config.lakehouse import LakehouseConfig
from iceberg.errors import AlreadyCommitted, ConfigError
from iceberg.protocol.group import GroupConfig
from iceberg.protocol.isolation import redrive_id
from iceberg.protocol.shards import sink_window
from iceberg.protocol.sink_commit import KEY_EPOCH, KEY_GROUP, KEY_REDRIVE, KEY_RUN, KEY_SHARD_IDS, KEY_SOURCE
from iceberg.protocol.state import Lease
from iceberg.store.dead_rows import ISOLATED, IsolatedShard, isolated_in_sink, latest_rows, mark_redriven
from iceberg.store.registry import load_state
from iceberg.store.tables import load_optional, load_source
from spark_jobs.borrower.isolation import except_rows
from spark_jobs.code_shipping import ship_transform
from spark_jobs.shards import FILE_COLUMN, POS_COLUMN
from spark_jobs.sink.fenced_commit import publish_shard, stage_shard
from spark_jobs.sink.shape import align_to_sink, with_lineage
from spark_jobs.transforms import load_transform


@dataclass(frozen=True)
class RowRedrive:
    """One shard's isolated rows re-driven: how many, and the sink snapshot that holds them now."""

    shard_id: str
    rows: int
    sink_snapshot: int
    already: bool = False


def redrive_rows(
    spark: SparkSession, lakehouse: LakehouseConfig, group: GroupConfig, run_id: str, progress: Callable[[str], None]
) -> list[RowRedrive]:
    """Commit every shard's isolated rows that are not in the sink yet, each shard in one fenced commit."""
    catalog = lakehouse.catalog()
    sink = load_optional(catalog, group.sink)
    if sink is None:
        return []
    done = []
    for shard in sorted(isolated_in_sink(sink, group.name).values(), key=lambda s: s.committed_in):
        if shard.redriven_in is not None:
            marked = mark_rows(lakehouse, group, shard, shard.redriven_in)
            if marked:
                done.append(RowRedrive(shard.shard_id, marked, shard.redriven_in, already=True))
            continue
        try:
            snapshot = commit_rows(spark, lakehouse, group, shard, run_id)
        except AlreadyCommitted:
            progress(f"{group.name}: the isolated rows of shard {shard.shard_id} were re-driven meanwhile; skipped")
            continue
        mark_rows(lakehouse, group, shard, snapshot)
        progress(
            f"{group.name}: {shard.rows} isolated rows of shard {shard.shard_id} re-driven in sink snapshot {snapshot}"
        )
        done.append(RowRedrive(shard.shard_id, shard.rows, snapshot))
    return done


def commit_rows(
    spark: SparkSession, lakehouse: LakehouseConfig, group: GroupConfig, shard: IsolatedShard, run_id: str
) -> int:
    """Read, transform and commit one shard's isolated rows; returns the sink snapshot."""
    catalog = lakehouse.catalog()
    state = load_state(catalog, group.name).state
    if state is None:
        raise ConfigError(f"group {group.name!r} has no registry; its isolated rows cannot be re-driven")
    source_table = f"{lakehouse.catalog_name}.{group.source}"
    sink_table = f"{lakehouse.catalog_name}.{group.sink}"
    head = load_source(catalog, group.source).current_snapshot()
    sink_head = catalog.load_table(group.sink).current_snapshot()
    if head is None or sink_head is None:
        raise ConfigError(f"group {group.name!r}: its source or sink has no snapshot to re-drive rows from or to")
    ship_transform(spark, group.transform)
    rows = (
        spark.read.format("iceberg")
        .option("snapshot-id", str(head.snapshot_id))
        .load(source_table)
        .select("*", FILE_COLUMN, POS_COLUMN)
        .where(~except_rows(shard.positions))
    )
    if group.filter:
        rows = rows.where(group.filter)
    out = load_transform(group.transform)(rows.drop(FILE_COLUMN, POS_COLUMN))
    window = sink_window(shard.window_start_ms or 0, group.replay_window)
    aligned, evolve = align_to_sink(spark, sink_table, with_lineage(out, shard.shard_id, window))
    token = stage_shard(aligned, sink_table, evolve=evolve)
    rid = redrive_id(shard.shard_id)
    now = int(time.time() * 1000)
    lease = Lease(
        lease_id=rid, epoch=state.epoch, window_start_ms=shard.window_start_ms or 0, shard_ids=[rid],
        streams=[shard.stream], granted_at_ms=now, deadline_ms=now, sink_snapshot_at_grant=sink_head.snapshot_id,
    )  # fmt: skip
    props = {
        KEY_GROUP: group.name,
        KEY_SOURCE: group.source,
        KEY_EPOCH: str(state.epoch),
        KEY_REDRIVE: shard.shard_id,
        KEY_SHARD_IDS: rid,
        KEY_RUN: run_id,
    }
    return publish_shard(spark, sink_table, token, group.name, lease, [rid], props).snapshot_id


def mark_rows(lakehouse: LakehouseConfig, group: GroupConfig, shard: IsolatedShard, sink_snapshot: int) -> int:
    """Mark the shard's isolated dead rows re-driven in ``sink_snapshot``; returns how many were still open."""
    catalog = lakehouse.catalog()
    wanted = {(shard.shard_id, path, pos) for path, positions in shard.positions.items() for pos in positions}
    still = [row for key, row in latest_rows(catalog, group.name).items() if key in wanted and row.action == ISOLATED]
    mark_redriven(catalog, group.name, still, sink_snapshot)
    return len(still)
