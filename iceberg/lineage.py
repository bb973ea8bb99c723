"""Lineage questions, both ways, answered from the lineage tables and the commits they have not recorded yet.

Backwards, from output to input: a sink snapshot or a window gives the shards that made them, with
their source snapshot ranges and source files. Forwards, from input to output: a source file or a
source snapshot gives the sink snapshots, windows and sink rows made from it. Questions at the
grain of rows (sink rows matching a filter, source rows by ``_row_id``) are in
``iceberg/lineage_rows.py``. Through chained groups (a group whose source is another group's sink),
``iceberg/lineage_chain.py`` follows each answer upstream to the first source, or downstream to the
last sink; ``window_provenance`` (``iceberg/protocol/lineage.py``) sums a complete window's entries for Dagster.

Sink rows carry their shard id (``_ig_shard``), so rows still resolve after the sink was compacted,
and their source file's reference (``_ig_file``), so a file names its rows; entries keep their
files, so they still resolve after the source's snapshots expired. The entries come from
``iceberg/store/lineage.py``: the lineage table, and the sink's newest commits that the Leader has
not recorded yet.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from pyiceberg.catalog import Catalog

from icegroup.iceberg.errors import UsageError
from icegroup.iceberg.protocol.file_ref import file_ref, unambiguous
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.lineage import LineageEntry
from icegroup.iceberg.protocol.locations import file_forms
from icegroup.iceberg.protocol.shards import window_label, window_start_ms
from icegroup.iceberg.protocol.sink_commit import (
    COL_FILE,
    COL_SHARD,
    COL_WINDOW,
    parse_commit,
    parse_replay,
    shard_filter,
    shard_texts,
)
from icegroup.iceberg.store.lineage import LineageNow, is_in, lineage_now, quoted
from icegroup.iceberg.store.tables import load_optional, shards_as_numbers


@dataclass
class Answer:
    """The entries that answer a question about one group, and how current the group's lineage is.

    ``sink_rows`` counts, per shard, the rows the sink holds now (forwards answers); ``unrecorded``
    is the number of the group's sink commits the Leader has not recorded yet. ``hops`` holds the
    answers for the groups upstream or downstream, with ``through``. ``source_filter`` names the
    source rows themselves by ``_row_id``, where the sink rows carry it (a format-v3 source).
    """

    group: str
    question: str
    found: list[LineageEntry]
    recorded_through: int | None
    unrecorded: int
    sink_rows: dict[str, int] = field(default_factory=dict)
    note: str = ""
    hops: list[Answer] = field(default_factory=list)
    row_filter: str | None = None
    sink_filter: str | None = None
    source_filter: str | None = None


def answer(lineage: LineageNow, group: GroupConfig, question: str, row_filter: str, note: str = "") -> Answer:
    """The entries matching ``row_filter``, with the lineage table's freshness."""
    return Answer(
        group=group.name,
        question=question,
        found=lineage.entries(row_filter),
        recorded_through=lineage.through,
        unrecorded=lineage.unrecorded,
        note=note,
    )


def by_window(catalog: Catalog, group: GroupConfig, window: str) -> Answer:
    """Backwards from a replay window: one partition of the lineage table."""
    return answer(lineage_now(catalog, group), group, f"window {window}", f"window = {quoted(window)}")


def by_sink_snapshot(catalog: Catalog, group: GroupConfig, snapshot_id: int) -> Answer:
    """Backwards from a sink snapshot; its windows prune the read while the snapshot is in the sink's metadata."""
    sink = load_optional(catalog, group.sink)
    snapshot = sink.snapshot_by_id(snapshot_id) if sink is not None else None
    props = snapshot.summary.additional_properties if snapshot is not None and snapshot.summary is not None else {}
    commit = parse_commit(snapshot_id, 0, props, 0)
    replay = parse_replay(snapshot_id, 0, props, 0, 0)
    windows: set[str] = set()
    if commit is not None:
        windows = {window_label(s.window_start_ms, group.replay_window) for s in commit.shards if s.window_start_ms}
    elif replay is not None:
        windows = {replay.window}
    where = f"sink_snapshot = {snapshot_id}"
    if windows:
        where = f"{is_in('window', windows)} AND {where}"
    found = answer(lineage_now(catalog, group), group, f"sink snapshot {snapshot_id}", where)
    if not found.found and snapshot is None:
        raise UsageError(
            f"--sink-snapshot: {snapshot_id} is not in {group.sink}'s metadata (expired, or never one of its "
            f"snapshots), and no current lineage entry of group {group.name} names it (its output may have been "
            f"replaced since); `icegroup checkpoints {group.name}` lists the group's sink commits"
        )
    if not found.found and snapshot is not None and commit is None and replay is None:
        operation = snapshot.summary.operation.value if snapshot.summary is not None else "unknown"
        found.note = (
            f"sink snapshot {snapshot_id} is a {operation} snapshot that group {group.name} did not commit "
            "(compaction or another writer); ask for the rows it holds with --row"
        )
    elif not found.found and (commit is not None or replay is not None):
        found.note = (
            f"the output of sink snapshot {snapshot_id} was replaced since (a replay of its window, or a reset); "
            f"ask by --window {', '.join(sorted(windows))} for what holds it now"
        )
    return found


def by_source_file(catalog: Catalog, group: GroupConfig, path: str) -> Answer:
    """Forwards from a source data file, named in any of its forms: its entries, and the sink rows made from it."""
    lineage = lineage_now(catalog, group)
    found = answer(lineage, group, f"source file {path}", is_in("source_file", file_forms(path)))
    forward_rows(catalog, group, lineage, found)
    return found


def by_source_snapshot(catalog: Catalog, group: GroupConfig, snapshot_id: int) -> Answer:
    """Forwards from a source snapshot; its commit time prunes the read to one window while it has not expired."""
    source = load_optional(catalog, group.source)
    snapshot = source.snapshot_by_id(snapshot_id) if source is not None else None
    where = f"source_snapshot = {snapshot_id}"
    if snapshot is not None:
        window = window_label(window_start_ms(snapshot.timestamp_ms, group.replay_window), group.replay_window)
        where = f"window = {quoted(window)} AND {where}"
    lineage = lineage_now(catalog, group)
    found = answer(lineage, group, f"source snapshot {snapshot_id}", where)
    forward_rows(catalog, group, lineage, found)
    return found


def forward_rows(catalog: Catalog, group: GroupConfig, lineage: LineageNow, found: Answer) -> None:
    """The sink rows made from the answer's source files, exactly where rows name their file: counts, filter, note.

    Sink rows carry their source file's reference (``_ig_file``). The filter keeps, per shard, the
    rows whose reference is one of the answer's files, and those whose reference is null: an
    aggregating transform's output, or rows written before the sink had the column, came from the
    shard but no one file, so they are named too, and the note counts them. A shard whose files
    would share a reference, or an entry without a file, is named whole.
    """
    sink = load_optional(catalog, group.sink)
    if not found.found or sink is None:
        return
    columns = {f.name for f in sink.schema().fields}
    by_file = COL_FILE in columns
    asked = shard_files(lineage, found)
    windows = {e.window for e in found.found} if COL_WINDOW in columns else set()
    found.sink_filter = forward_filter(asked, windows, by_file, shards_as_numbers(sink))
    selected = (COL_SHARD, COL_FILE) if by_file else (COL_SHARD,)
    rows = sink.scan(row_filter=found.sink_filter, selected_fields=selected).to_arrow()
    counts = {e.shard_id: 0 for e in found.found}
    for shard in shard_texts(rows.column(COL_SHARD).to_pylist()):
        if shard is not None:
            counts[shard] += 1
    found.sink_rows = counts
    if not by_file:
        found.note = (
            f"{group.sink} has no {COL_FILE} column yet (it was written before icegroup recorded each row's source "
            "file): every row of the shards that read the file is named"
        )
    elif unknown := rows.column(COL_FILE).null_count:
        found.note = (
            f"{unknown} of the {rows.num_rows} sink rows named carry no source-file reference (an aggregating "
            "transform's output, a replay of a chained group's window an upstream replay rewrote, or rows written "
            "before icegroup recorded it): they are named "
            "because their shard read the file"
        )
    whole = sorted(shard for shard, (_, exact) in asked.items() if not exact)
    if by_file and whole:
        found.note += (
            f"{'; ' if found.note else ''}shard(s) {', '.join(whole)} are named whole: their files are not recorded "
            "(or two share a reference), so their rows cannot be told apart by file"
        )


def shard_files(lineage: LineageNow, found: Answer) -> dict[str, tuple[list[str], bool]]:
    """Per shard of the answer: the files it asks about, and whether a reference names one file of the shard."""
    asked: dict[str, list[str]] = {}
    whole: set[str] = set()
    for entry in found.found:
        if entry.source_file is None:
            whole.add(entry.shard_id)
        asked.setdefault(entry.shard_id, []).append(entry.source_file or "")
    windows = {e.shard_id: e.window for e in found.found}
    all_files: dict[str, list[str]] = {}
    for entry in lineage.shard_entries(windows):
        all_files.setdefault(entry.shard_id, []).append(entry.source_file or "")
    return {
        shard: (files, shard not in whole and unambiguous(all_files.get(shard, files)))
        for shard, files in asked.items()
    }


def forward_filter(asked: Mapping[str, tuple[list[str], bool]], windows: set[str], by_file: bool, numeric: bool) -> str:
    """The sink rows made from the asked files: of exact shards by file reference, of the others all their rows.

    One ``IN`` of references serves every exact shard: a source file is read by one shard, so a
    reference names rows of that shard only. The windows prune the sink's partitions (rows written
    before the sink had its window column have none, and are kept). ``numeric``: the sink stores
    shard ids as numbers (``shard_number``), as sinks created now do.
    """
    exact = sorted(shard for shard, (_, ok) in asked.items() if by_file and ok)
    whole = sorted(shard for shard, (_, ok) in asked.items() if not (by_file and ok))
    parts = [shard_filter(whole, numeric)] if whole else []
    if exact:
        refs = ", ".join(str(r) for r in sorted({file_ref(path) for shard in exact for path in asked[shard][0]}))
        parts.append(f"({shard_filter(exact, numeric)} AND ({COL_FILE} IN ({refs}) OR {COL_FILE} IS NULL))")
    rows = " OR ".join(parts)
    if not windows:
        return rows
    return f"({is_in(COL_WINDOW, windows)} OR {COL_WINDOW} IS NULL) AND ({rows})"


def name_sink_rows(catalog: Catalog, groups: Mapping[str, GroupConfig], found: Answer) -> None:
    """Give each answer, and its hops', the filter of its rows in its group's sink, where it has none yet.

    Forwards answers name their rows by file (``forward_rows``); the others name their shards'
    rows, written as the sink stores shard ids: numbers, or text in an older sink.
    """
    ids = sorted({e.shard_id for e in found.found})
    group = groups.get(found.group)
    if found.sink_filter is None and ids and group is not None:
        sink = load_optional(catalog, group.sink)
        found.sink_filter = shard_filter(ids, sink is None or shards_as_numbers(sink))
    for hop in found.hops:
        name_sink_rows(catalog, groups, hop)
