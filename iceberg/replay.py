"""Replays, the catalog half: the plan of what a replay of a window covers, from the sink's history.

The ticket (``replay_ticket.py``) holds the window while a replay runs. ``plan_replay`` reads
what the window's replay covers from the sink's history and finds every covered source file; a
file that is gone makes the plan incomplete, and nothing is replaced. Spark does the rest
(``spark_jobs/replay.py``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import pyarrow.parquet as pq
from pyiceberg.catalog import Catalog
from pyiceberg.manifest import ManifestContent
from pyiceberg.table import Table

from icegroup.iceberg.errors import ReplayIncomplete
from icegroup.iceberg.protocol.cascade import superseding
from icegroup.iceberg.protocol.drift import refuse_other_table
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.replay import check_window, window_coverage
from icegroup.iceberg.protocol.shards import snapshot_range
from icegroup.iceberg.protocol.sink_commit import (
    COL_SHARD,
    COL_WINDOW,
    ShardRange,
    parse_resets,
    resets_key,
    shard_texts,
)
from icegroup.iceberg.shards import stream_key
from icegroup.iceberg.store.registry import load_state
from icegroup.iceberg.store.sink_history import sink_history
from icegroup.iceberg.store.tables import load_optional, load_source, table_uuid

# The data files live in a snapshot, keyed by (the snapshot that added them, stream): path and rows.
LiveFiles = dict[tuple[int, str], list[tuple[str, int]]]


@dataclass(frozen=True)
class ReplayShard:
    """One covered shard, and where its rows are read from now.

    ``files`` are read whole. ``replaced_files`` hold the new version of upstream commits a replay of
    the source replaced (chained groups): only their rows of ``replaced_shards`` (upstream ``_ig_shard``
    ids) belong to this shard.
    """

    shard: ShardRange
    read_snapshot: int
    files: tuple[str, ...]
    found_rows: int
    replaced_files: tuple[str, ...] = ()
    replaced_shards: tuple[str, ...] = ()


@dataclass
class ReplayPlan:
    """What replaying one window reads and replaces."""

    group: str
    window: str
    window_start_ms: int
    sink_head: int | None
    shards: list[ReplayShard] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    sink_rows: int = 0

    @property
    def rows(self) -> int:
        """Source rows the replay reads, before the group's filter."""
        return sum(s.found_rows for s in self.shards)

    def check_complete(self) -> None:
        """``ReplayIncomplete`` listing every gap; a window is never replaced with part of its data."""
        if self.missing:
            gaps = "; ".join(self.missing)
            raise ReplayIncomplete(
                f"group {self.group!r}: window {self.window} cannot be replayed exactly, so nothing was replaced: "
                f"{gaps}. Restore the missing source files or sink history, or leave the window's output as it is"
            )


@dataclass(frozen=True)
class Upstream:
    """What replays of the source (another group's sink) changed: where replaced commits' rows are now.

    ``holder`` maps each replaced upstream commit to the replay commit holding its rows now, and
    ``shard_ids`` each upstream commit to the shard ids it committed. ``intact`` holds the replay
    commits whose files are all still live: compacting or deleting from the source after a replay
    rewrites them, and their rows can then no longer be told apart by file.
    """

    holder: dict[int, int] = field(default_factory=dict)
    shard_ids: dict[int, tuple[str, ...]] = field(default_factory=dict)
    intact: frozenset[int] = frozenset()


def upstream_of(source: Table, current: int | None, live: dict[int, LiveFiles]) -> Upstream:
    """The replays of the source that replaced commits, and whether their files are still as they wrote them."""
    commits, replays = sink_history(source, None)
    if not replays or current is None:
        return Upstream()
    holder = superseding(replays, commits)
    if current not in live:
        live[current] = live_files(source, current)
    files_by_snapshot: dict[int, int] = {}
    for (added_by, _), entries in live[current].items():
        files_by_snapshot[added_by] = files_by_snapshot.get(added_by, 0) + len(entries)
    intact = set()
    for replay_id in set(holder.values()):
        snapshot = source.snapshot_by_id(replay_id)
        props = snapshot.summary.additional_properties if snapshot is not None and snapshot.summary else {}
        if files_by_snapshot.get(replay_id, 0) == int(props.get("added-data-files", "-1")):
            intact.add(replay_id)
    return Upstream(holder, {c.snapshot_id: tuple(s.shard_id for s in c.shards) for c in commits}, frozenset(intact))


def plan_replay(catalog: Catalog, group: GroupConfig, window: str, now_ms: int | None = None) -> ReplayPlan:
    """What replaying ``window`` covers, where each covered shard's rows are, and what is missing.

    Coverage comes from the sink's history. It is checked against the sink's rows: a shard whose
    rows are in the window but whose commit is no longer in the history (expired sink snapshots)
    would be deleted and not replayed, so it makes the plan incomplete. Each shard's files are read
    at its last source snapshot while that exists, else from the source's current files; a shard
    whose files hold fewer rows than it committed (expired and deleted, or compacted into files of
    other snapshots) is missing. A source table dropped and created again is refused, naming the
    cause (``refuse_other_table``), rather than planned as missing files.
    """
    start = check_window(group, window, now_ms)
    sink = load_optional(catalog, group.sink)
    head = sink.current_snapshot() if sink is not None else None
    plan = ReplayPlan(group.name, window, start, sink_head=head.snapshot_id if head else None)
    if sink is None or head is None:
        return plan
    commits, replays = sink_history(sink, group.name)
    resets = parse_resets(sink.properties.get(resets_key(group.name), ""))
    covered = window_coverage(start, window, commits, replays, resets)
    check_sink_rows(sink, plan, covered)
    source = load_source(catalog, group.source)
    refuse_other_table(load_state(catalog, group.name).state, table_uuid(source), group)  # its files: the old table's
    current = source.current_snapshot()
    live: dict[int, LiveFiles] = {}
    deletes = current is not None and any(m.content != ManifestContent.DATA for m in current.manifests(source.io))
    current_id = current.snapshot_id if current else None
    upstream = upstream_of(source, current_id, live)
    counted: dict[str, Counter[str]] = {}
    for shard in covered:
        if shard.found_by == "row_ids":
            plan.missing.append(
                f"shard {shard.shard_id} (stream {shard.stream}) was read by a row-id watermark across expired "
                "history: its files also hold rows of earlier shards, which a replay by file would read again"
            )
            continue
        if current_id is not None and any(snap in upstream.holder for snap in shard.snapshots):
            locate_replaced(source, shard, current_id, live, upstream, plan, counted)
            continue
        read_at, files = locate(source, shard, current_id, live, deletes)
        found = sum(rows for _, rows in files)
        if read_at is None:
            plan.missing.append(
                f"shard {shard.shard_id} (stream {shard.stream}, source snapshots "
                f"{snapshot_range(shard.from_snapshot, shard.to_snapshot)}) committed {shard.rows} rows; "
                f"the source's files hold {found} of them"
            )
            continue
        plan.shards.append(ReplayShard(shard, read_at, tuple(path for path, _ in files), found))
    return plan


def locate_replaced(
    source: Table,
    shard: ShardRange,
    current: int,
    live: dict[int, LiveFiles],
    upstream: Upstream,
    plan: ReplayPlan,
    counted: dict[str, Counter[str]],
) -> None:
    """A shard some of whose upstream commits were replaced since: their rows are read in their new version.

    The shard's other commits are read from their own files, which must all still be live now (one
    snapshot serves the whole shard). The new version of a replaced commit is the rows of its upstream
    shard ids in the files the newest replay of its window added to the shard's stream. That replay's
    files must all be live, or the rows cannot be told apart by file, and written under the shard's
    partition spec, or they cannot be matched to the shard's stream; else the shard is missing.
    ``counted`` caches the rows per upstream shard of each file read.
    """
    files = live[current]
    plain = [snap for snap in shard.snapshots if snap not in upstream.holder]
    replaced = [snap for snap in shard.snapshots if snap in upstream.holder]
    holders = sorted({upstream.holder[snap] for snap in replaced})
    span = snapshot_range(shard.from_snapshot, shard.to_snapshot)
    where = f"shard {shard.shard_id} (stream {shard.stream}, source snapshots {span})"
    broken = sorted(set(holders) - upstream.intact)
    if broken:
        plan.missing.append(
            f"{where} reads rows an upstream replay replaced, and that replay's files were rewritten since "
            f"(source snapshots {', '.join(map(str, broken))}: compacted or deleted from); replay the upstream "
            "window again, then this one"
        )
        return
    spec = shard.stream.split(":", 1)[0]
    elsewhere = sorted(
        {stream for added_by, stream in files if added_by in holders and not stream.startswith(f"{spec}:")}
    )
    if elsewhere:
        plan.missing.append(
            f"{where} reads rows an upstream replay replaced, and the replay wrote them under another partition "
            f"spec of the source ({elsewhere[0]}), so they cannot be matched to this stream; consume the upstream "
            "sink with a new group to take its new version"
        )
        return
    if any((snap, shard.stream) not in files for snap in plain):
        plan.missing.append(
            f"{where}: part of it was replaced upstream, and its other source files are not live now (compacted "
            "or expired); replay the upstream window again so that all of them are, then this one"
        )
        return
    whole = [entry for snap in plain for entry in files[(snap, shard.stream)]]
    new_files = [path for holder in holders for path, _ in files.get((holder, shard.stream), [])]
    ids = tuple(sorted({shard_id for snap in replaced for shard_id in upstream.shard_ids.get(snap, ())}))
    for path in new_files:
        if path not in counted:
            counted[path] = rows_by_shard(source, path)
    found = sum(rows for _, rows in whole) + sum(counted[path][i] for path in new_files for i in ids)
    plan.shards.append(
        ReplayShard(
            shard,
            current,
            tuple(path for path, _ in whole),
            found,
            replaced_files=tuple(new_files),
            replaced_shards=ids,
        )
    )


def rows_by_shard(table: Table, path: str) -> Counter[str]:
    """Rows per ``_ig_shard`` in one data file of an icegroup sink (the plan's row counts)."""
    with table.io.new_input(path).open() as stream:
        shards = shard_texts(pq.read_table(stream, columns=[COL_SHARD]).column(COL_SHARD).to_pylist())
    return Counter(shard_id for shard_id in shards if shard_id is not None)


def locate(
    source: Table, shard: ShardRange, current: int | None, live: dict[int, LiveFiles], deletes: bool = False
) -> tuple[int | None, list[tuple[str, int]]]:
    """The snapshot to read a shard's files at, and the files; None when they hold fewer rows than it committed.

    The current snapshot comes first, so one scan serves every shard whose files are still live;
    then the shard's own last snapshot while it exists (its files were compacted away since). When
    the source has delete files now (rows deleted after they were consumed, under ``non_append:
    skip``), the shard's own snapshot comes first: the replay reads the rows the group consumed.
    """
    places = [current] if current is not None else []
    if source.snapshot_by_id(shard.to_snapshot) is not None and shard.to_snapshot != current:
        places.insert(0 if deletes else len(places), shard.to_snapshot)
    files: list[tuple[str, int]] = []
    for read_at in places:
        if read_at not in live:
            live[read_at] = live_files(source, read_at)
        files = [entry for snap in shard.snapshots for entry in live[read_at].get((snap, shard.stream), [])]
        if shard.snapshots and (shard.rows is None or sum(rows for _, rows in files) == shard.rows):
            return read_at, files
    return None, files


def check_sink_rows(sink: Table, plan: ReplayPlan, covered: list[ShardRange]) -> None:
    """Every shard with rows in the window must be covered, and no covered row may lack the window column."""
    if COL_WINDOW not in {f.name for f in sink.schema().fields}:
        plan.missing.append(
            f"the sink has no {COL_WINDOW} column yet (it was written by an older icegroup); run "
            f"`icegroup migrate {plan.group} --execute` first"
        )
        return
    window_rows = sink.scan(row_filter=f"{COL_WINDOW} = '{plan.window}'", selected_fields=(COL_SHARD,)).to_arrow()
    plan.sink_rows = window_rows.num_rows
    ids = {shard.shard_id for shard in covered}
    unknown = sorted({s for s in shard_texts(window_rows.column(COL_SHARD).to_pylist()) if s is not None} - ids)
    if unknown:
        plan.missing.append(
            f"the sink holds rows of shards {', '.join(unknown[:5])}{' ...' if len(unknown) > 5 else ''} in the "
            "window whose commits are no longer in the sink's history (expired sink snapshots)"
        )
    legacy = sink.scan(row_filter=f"{COL_WINDOW} IS NULL", selected_fields=(COL_SHARD,)).to_arrow()
    stranded = sum(1 for shard_id in shard_texts(legacy.column(COL_SHARD).to_pylist()) if shard_id in ids)
    if stranded:
        plan.missing.append(
            f"{stranded} sink rows of the window were written before the sink had the {COL_WINDOW} "
            f"column; run `icegroup migrate {plan.group} --execute` first, so that a replay can replace them"
        )


def live_files(table: Table, snapshot_id: int) -> LiveFiles:
    """The data files live in a snapshot, keyed by (the snapshot that added them, stream): path and rows.

    A manifest entry keeps the id of the snapshot that added its file after that snapshot expired,
    so this finds the files of expired snapshots too, as long as they are still in the table.
    """
    snapshot = table.snapshot_by_id(snapshot_id)
    out: dict[tuple[int, str], list[tuple[str, int]]] = {}
    if snapshot is None:
        return out
    specs, schema = table.specs(), table.schema()
    for manifest in snapshot.manifests(table.io):
        if manifest.content != ManifestContent.DATA:
            continue
        spec = specs[manifest.partition_spec_id]
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
            data_file = entry.data_file
            stream = stream_key(spec.spec_id, spec.partition_to_path(data_file.partition, schema))
            added_by = entry.snapshot_id if entry.snapshot_id is not None else snapshot_id
            out.setdefault((added_by, stream), []).append((data_file.file_path, data_file.record_count))
    return out
