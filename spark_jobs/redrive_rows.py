"""Re-driving isolated rows: read them again, transform them with the group's (fixed) transform, commit once.

The rows a shard's commit left out (``on_poison: isolate``) are named in that commit's summary by
source file and position (``isolated_in_sink``). A re-drive reads exactly those rows from the
source, applies the group's filter and transform, gives them their shard's lineage (its shard id
and window, so lineage and replay treat them as the shard's rows), and appends them in one fenced
commit under the shard's re-drive id (``redrive_id``). The fence refuses a second commit of that
id, so two re-drives of a shard cannot both land. The re-drive holds the window's replay ticket, so
no replay or canary promotion of the window (whose output would hold the rows already) runs
meanwhile, and it looks at the sink again once it holds it. A re-drive whose marking was lost (a
crash after its commit) is found in the sink's history and only marked. Like a replay, the commit
carries no shard ranges, so the Leader's progress never sees it. The rows' dead-row records are
then marked ``redriven`` with the sink snapshot that took them in. Under ``on_change: fail`` a fix
that changed the transform's path is refused, as a replay with it is.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from dataclasses import dataclass

from pyiceberg.exceptions import CommitFailedException
from pyspark.sql import SparkSession

from icegroup.iceberg.config.lakehouse import LakehouseConfig
from icegroup.iceberg.errors import AlreadyCommitted, IcegroupError, PoisonShard, ReplayIncomplete
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.isolation import redrive_id
from icegroup.iceberg.protocol.shards import sink_window, window_label
from icegroup.iceberg.protocol.sink_commit import (
    KEY_EPOCH,
    KEY_GROUP,
    KEY_REDRIVE,
    KEY_RUN,
    KEY_SHARD_IDS,
    KEY_SOURCE,
    LINEAGE_COLUMNS,
)
from icegroup.iceberg.protocol.state import Lease
from icegroup.iceberg.replay_ticket import replay_ticket
from icegroup.iceberg.store.dead_rows import IsolatedShard, isolated_in_sink, mark_taken_in
from icegroup.iceberg.store.heartbeats import heartbeat
from icegroup.iceberg.store.registry import load_state
from icegroup.iceberg.store.tables import load_optional, load_source
from icegroup.spark_jobs.borrower.isolation import except_rows
from icegroup.spark_jobs.borrower.user_errors import describe_error, is_platform_failure
from icegroup.spark_jobs.code_shipping import ship_transform
from icegroup.spark_jobs.row_files import FILE_COLUMN, POS_COLUMN
from icegroup.spark_jobs.sink.fenced_commit import Published, publish_shard, stage_aligned
from icegroup.spark_jobs.sink.shape import with_lineage
from icegroup.spark_jobs.transforms import load_transform


@dataclass(frozen=True)
class RowRedrive:
    """One shard's isolated rows re-driven: how many, and the sink snapshot that holds them now."""

    shard_id: str
    rows: int
    sink_snapshot: int
    already: bool = False


def redrive_rows(
    spark: SparkSession,
    lakehouse: LakehouseConfig,
    group: GroupConfig,
    run_id: str,
    progress: Callable[[str], None],
    shards: Collection[str] = (),
) -> list[RowRedrive]:
    """Commit the isolated rows not in the sink yet (of ``shards`` only, if given), each shard in one fenced commit."""
    catalog = lakehouse.catalog()
    sink = load_optional(catalog, group.sink)
    state = load_state(catalog, group.name).state
    if sink is None or state is None:
        return []
    done = []
    found = isolated_in_sink(sink, group.name, group.replay_window, state.epoch).values()
    for shard in sorted(found, key=lambda s: s.committed_in):
        if shards and shard.shard_id not in shards:
            continue
        if shard.redriven_in is not None:
            marked = mark_taken_in(catalog, group.name, shard, shard.redriven_in)
            if marked:
                done.append(RowRedrive(shard.shard_id, marked, shard.redriven_in, already=True))
            continue
        window = window_label(shard.window_start_ms or 0, group.replay_window)
        holder = f"{run_id}-{shard.shard_id}"
        with (
            replay_ticket(catalog, group, window, holder),
            heartbeat(catalog, group.name, holder, interval_s=group.session_timeout_s / 3),
        ):
            # Holding the window's ticket, no replay or promotion of it runs: look again, since one may have just
            # landed (its output holds the rows already).
            fresh = isolated_in_sink(catalog.load_table(group.sink), group.name, group.replay_window, state.epoch)
            since = fresh[shard.shard_id].redriven_in if shard.shard_id in fresh else None
            if since is not None:
                mark_taken_in(catalog, group.name, shard, since)
                continue
            try:
                published = commit_rows(spark, lakehouse, group, shard, state.epoch, run_id)
            except AlreadyCommitted:
                progress(f"{group.name}: the isolated rows of shard {shard.shard_id} were re-driven meanwhile; skipped")
                continue
            except Exception as exc:  # the rows' read, transform and stage failed: the rows fail it still
                if is_platform_failure(exc) or isinstance(exc, IcegroupError | CommitFailedException):
                    raise
                raise still_failing(group, shard, exc) from exc
        mark_taken_in(catalog, group.name, shard, published.snapshot_id)
        progress(f"{group.name}: {published.added_records} isolated rows of shard {shard.shard_id} re-driven")
        done.append(RowRedrive(shard.shard_id, published.added_records, published.snapshot_id))
    return done


def still_failing(group: GroupConfig, shard: IsolatedShard, exc: BaseException) -> PoisonShard:
    """The isolated rows fail the transform still: the rows' own error, and what to do, not a Spark trace."""
    return PoisonShard(
        f"group {group.name!r}: the {shard.rows} isolated row(s) of shard {shard.shard_id} still fail the transform "
        f"{group.transform}: {describe_error(exc)}. Nothing was committed, and they stay isolated. Fix the "
        f"transform (`icegroup dead-letters {group.name} --rows` shows each row and its error), then run "
        f"`icegroup redrive {group.name} --execute` again"
    )


def commit_rows(
    spark: SparkSession, lakehouse: LakehouseConfig, group: GroupConfig, shard: IsolatedShard, epoch: int, run_id: str
) -> Published:
    """Read, transform and commit one shard's isolated rows; refuses when the source no longer holds them all.

    The rows are read at the shard's own last source snapshot while it exists (its files are live
    there), else at the source's head. The fence's check reaches back to the commit that left them
    out: a re-drive of the shard committed since, by anyone, makes this one ``AlreadyCommitted``.
    """
    catalog = lakehouse.catalog()
    source = load_source(catalog, group.source)
    at = shard.to_snapshot if source.snapshot_by_id(shard.to_snapshot) is not None else None
    head = source.current_snapshot()
    read_at = at if at is not None else head.snapshot_id if head is not None else None
    if read_at is None:
        raise ReplayIncomplete(f"group {group.name!r}: its source has no snapshot to re-drive rows from")
    source_table = f"{lakehouse.catalog_name}.{group.source}"
    sink_table = f"{lakehouse.catalog_name}.{group.sink}"
    ship_transform(spark, group.transform)
    rows = (
        spark.read.format("iceberg")
        .option("snapshot-id", str(read_at))
        .load(source_table)
        .select("*", FILE_COLUMN, POS_COLUMN)
        .where(~except_rows(shard.positions))
    )
    if group.filter:
        rows = rows.where(group.filter)
    rows = rows.drop(FILE_COLUMN, POS_COLUMN, *[c for c in rows.columns if c in LINEAGE_COLUMNS]).persist()
    try:
        found = rows.count()
        if found != shard.rows:
            raise ReplayIncomplete(
                f"group {group.name!r}: the source's files hold {found} of the {shard.rows} rows isolated from shard "
                f"{shard.shard_id} (compacted or expired since); nothing was re-driven. Replay its window instead, "
                "if the source still holds its rows"
            )
        out = load_transform(group.transform)(rows)
        window = sink_window(shard.window_start_ms or 0, group.replay_window)
        token = stage_aligned(spark, sink_table, with_lineage(out, shard.shard_id, window), one_window=False)
    finally:
        rows.unpersist()
    rid = redrive_id(shard.shard_id)
    now = int(time.time() * 1000)
    lease = Lease(
        lease_id=rid, epoch=epoch, window_start_ms=shard.window_start_ms or 0, shard_ids=[rid],
        streams=[shard.stream], granted_at_ms=now, deadline_ms=now, sink_snapshot_at_grant=shard.committed_in,
    )  # fmt: skip
    props = {
        KEY_GROUP: group.name,
        KEY_SOURCE: group.source,
        KEY_EPOCH: str(epoch),
        KEY_REDRIVE: shard.shard_id,
        KEY_SHARD_IDS: rid,
        KEY_RUN: run_id,
    }
    return publish_shard(spark, sink_table, token, group.name, lease, [rid], props)
