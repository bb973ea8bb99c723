"""Exactly once for every sink window, read from the sink's manifests and snapshot summaries; no row is read.

The verdict's rules are ``iceberg/protocol/window_audit.py``. This reads what they need: the live
data and delete files of each window's partition, keyed by the snapshot that added them; those
snapshots' summaries (the group that wrote each, its rows, its shards); and the group's commits
that should hold each window's rows, from the summaries of the sink's history (not from the
lineage table, which the Leader fills a tick later). One pass over the current snapshot's manifests
and one over the snapshot log, whatever the number of windows.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date, timedelta

from pyiceberg.catalog import Catalog
from pyiceberg.manifest import ManifestContent, ManifestEntryStatus
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot

from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.shards import window_label
from icegroup.iceberg.protocol.sink_commit import COL_WINDOW, KEY_GROUP, KEY_MIGRATE, KEY_RESET
from icegroup.iceberg.protocol.window_audit import COMPACTION, MIGRATE, RESET, CommitFacts, SinkAudit, audit_window
from icegroup.iceberg.store.sink_history import Written, deleted_through, walk_commits
from icegroup.iceberg.store.tables import load_optional

EPOCH = date(1970, 1, 1)


@dataclass
class LiveFiles:
    """The rows of the current snapshot's files, by window and by the snapshot that added each file.

    ``unplaced`` counts rows in files with no window: a sink before ``icegroup migrate``, whose
    rows cannot be judged by window yet.
    """

    data: dict[str, dict[int, int]] = field(default_factory=lambda: defaultdict(lambda: defaultdict(int)))
    deletes: dict[str, dict[int, int]] = field(default_factory=lambda: defaultdict(lambda: defaultdict(int)))
    unplaced: dict[int, int] = field(default_factory=lambda: defaultdict(int))


def audit_sink(catalog: Catalog, group: GroupConfig) -> SinkAudit:
    """Judge every window of the group's sink as it is now: each commit intact, none written by hand, no shard twice."""
    return audit_table(load_optional(catalog, group.sink), group)


def audit_table(sink: Table | None, group: GroupConfig) -> SinkAudit:
    """Judge every window of ``sink`` (None: not made yet) as the table was read: a tick audits the sink it read."""
    head = sink.current_snapshot() if sink is not None else None
    if sink is None or head is None:
        return SinkAudit(group=group.name, windows=[])
    files = live_files(sink, head)
    every = list(walk_commits(sink, None))  # newest first
    ids = [written.snapshot.snapshot_id for written in every]
    since = deleted_through(sink, group.name)
    history = every[: ids.index(since)] if since in ids else every  # a deleted group's commits are not this one's
    expected = holding_commits(history, group)
    windows_of = {written.snapshot.snapshot_id: commit_windows(written, group) for written in history}
    order = {snapshot.snapshot_id: index for index, snapshot in enumerate(sink.snapshots())}
    kinds = {written.snapshot.snapshot_id: rewrite_kind(written) for written in every}
    rewrites = [written for written in every if kinds[written.snapshot.snapshot_id] is not None]
    by_id = dict(zip(ids, every, strict=True))
    audits = []
    for window in sorted(files.data.keys() | files.deletes.keys() | expected.keys()):
        found, hidden = files.data.get(window, {}), files.deletes.get(window, {})
        holding = {s for s in expected.get(window, set()) if s not in files.unplaced}  # unplaced: not judged yet
        named = [by_id[s] for s in found.keys() | hidden.keys() | holding if s in by_id] + rewrites
        facts = {
            w.snapshot.snapshot_id: commit_facts(sink, w, window, order, windows_of.get(w.snapshot.snapshot_id, set()))
            for w in named
        }
        audits.append(audit_window(group.name, window, found, hidden, facts, holding))
    return SinkAudit(group=group.name, windows=audits, unplaced_rows=sum(files.unplaced.values()))


def commit_windows(written: Written, group: GroupConfig) -> set[str]:
    """The windows a commit of icegroup wrote to, as its summary names them (none for other snapshots)."""
    if written.replay is not None:
        return {written.replay.window}
    if written.commit is not None:
        starts = {shard.window_start_ms for shard in written.commit.shards if shard.window_start_ms is not None}
        return {window_label(start, group.replay_window) for start in starts}
    return set()


def holding_commits(history: list[Written], group: GroupConfig) -> dict[str, set[int]]:
    """Per window, the group's sink snapshots whose rows it holds now; ``history`` is newest first.

    That is the window's newest replay, if any, and the consumption commits after it: a replay
    replaced everything the window held before it.
    """
    expected: dict[str, set[int]] = defaultdict(set)
    replayed: set[str] = set()
    for written in history:
        made = written.commit or written.replay
        if made is None or made.group != group.name:
            continue
        windows = commit_windows(written, group)
        for window in windows - replayed:
            expected[window].add(written.snapshot.snapshot_id)
        if written.replay is not None:
            replayed |= windows
    return dict(expected)


def live_files(sink: Table, head: Snapshot) -> LiveFiles:
    """The rows of the current snapshot's data and delete files, by window and adding snapshot."""
    found = LiveFiles()
    for manifest in head.manifests(sink.io):
        position = window_position(sink, manifest.partition_spec_id)
        deletes = manifest.content == ManifestContent.DELETES
        for entry in manifest.fetch_manifest_entry(sink.io, discard_deleted=True):
            data_file = entry.data_file
            added_by = entry.snapshot_id if entry.snapshot_id is not None else head.snapshot_id
            value = data_file.partition[position] if position is not None else None
            if value is None:
                found.unplaced[added_by] += data_file.record_count
                continue
            target = found.deletes if deletes else found.data
            target[partition_text(value)][added_by] += data_file.record_count
    return found


def window_position(sink: Table, spec_id: int) -> int | None:
    """Where the window's value sits in the partition tuples of spec ``spec_id``; None if it is not a partition."""
    try:
        column = sink.schema().find_field(COL_WINDOW).field_id
    except ValueError:
        return None  # a sink before the window column (``icegroup migrate`` adds it)
    for position, partition_field in enumerate(sink.specs()[spec_id].fields):
        if partition_field.source_id == column:
            return position
    return None


def partition_text(value: object) -> str:
    """A window partition value as its label: a day window's ``date`` is stored as days since 1970-01-01."""
    if isinstance(value, int):
        return (EPOCH + timedelta(days=value)).isoformat()
    return str(value)


def rewrite_kind(written: Written) -> str | None:
    """What a snapshot rewrote of earlier commits' rows, if anything (``CommitFacts.rewrite``)."""
    summary = written.snapshot.summary
    props = summary.additional_properties if summary is not None else {}
    if KEY_RESET in props:
        return RESET
    if KEY_MIGRATE in props:
        return MIGRATE
    return COMPACTION if summary is not None and summary.operation.value == "replace" else None


def commit_facts(
    sink: Table, written: Written, window: str, order: Mapping[int, int], windows: set[str]
) -> CommitFacts:
    """What a sink snapshot says of itself, with the rows it added to ``window``.

    A commit that names one window (``windows``) added all its rows there, so its summary's
    ``added-records`` is the window's; one that names several is counted from the files it added
    itself. ``order`` places the snapshot in the sink's log, which v1 tables number no other way.
    """
    snapshot = written.snapshot
    summary = snapshot.summary
    props = summary.additional_properties if summary is not None else {}
    added = int(props.get("added-records", "0"))
    if len(windows) > 1:
        added = sum(window_files_added(sink, snapshot, window))
    return CommitFacts(
        snapshot_id=snapshot.snapshot_id,
        sequence=order.get(snapshot.snapshot_id, -1),
        group=props.get(KEY_GROUP),
        operation=summary.operation.value if summary is not None else "?",
        added_rows=added,
        shard_ids=tuple(shard.shard_id for shard in written.commit.shards) if written.commit is not None else (),
        rewrite=rewrite_kind(written),
    )


def window_files_added(sink: Table, snapshot: Snapshot, window: str) -> list[int]:
    """The rows of each data file ``snapshot`` itself added to the window, from the manifests it wrote."""
    rows = []
    for manifest in snapshot.manifests(sink.io):
        if manifest.added_snapshot_id != snapshot.snapshot_id or manifest.content != ManifestContent.DATA:
            continue
        position = window_position(sink, manifest.partition_spec_id)
        for entry in manifest.fetch_manifest_entry(sink.io, discard_deleted=True):
            value = entry.data_file.partition[position] if position is not None else None
            added = entry.status == ManifestEntryStatus.ADDED and entry.snapshot_id == snapshot.snapshot_id
            if added and value is not None and partition_text(value) == window:
                rows.append(entry.data_file.record_count)
    return rows
