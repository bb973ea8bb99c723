"""Lineage questions, both ways, answered from the lineage tables and the commits they have not recorded yet.

Backwards, from output to input: a sink snapshot, a window, or sink rows matching a filter give the
shards that made them, with their source snapshot ranges and source files. Forwards, from input to
output: a source file or a source snapshot gives the sink snapshots, windows and sink rows made
from it. On a format-v3 source, sink rows also carry their source row's own ``_row_id`` (``_ig_row``,
kept by the source's compaction): sink rows name their source rows, and source rows, asked by id,
name exactly the sink rows made from them. Through chained groups (a group whose source is another group's sink),
``iceberg/lineage_chain.py`` follows each answer upstream to the first source, or downstream to the
last sink; ``window_provenance`` (``iceberg/protocol/lineage.py``) sums a complete window's entries for Dagster.

Sink rows carry their shard id (``_ig_shard``), so rows still resolve after the sink was compacted,
and their source file's reference (``_ig_file``), so a row names its file and a file its rows;
entries keep their files, so they still resolve after the source's snapshots expired. The entries
come from ``iceberg/store/lineage.py``: the lineage table, and the sink's newest commits that
the Leader has not recorded yet.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pyarrow.parquet as pq
from pyiceberg.catalog import Catalog
from pyiceberg.expressions.parser import parse as parse_filter
from pyiceberg.expressions.visitors import bind
from pyiceberg.io.pyarrow import expression_to_pyarrow
from pyiceberg.table import Table
from pyparsing import ParseException

from icegroup.iceberg.errors import UsageError
from icegroup.iceberg.protocol.file_ref import file_ref, unambiguous
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.lineage import LineageEntry
from icegroup.iceberg.protocol.locations import file_forms
from icegroup.iceberg.protocol.shards import window_label, window_start_ms, window_texts
from icegroup.iceberg.protocol.sink_commit import (
    COL_FILE,
    COL_ROW,
    COL_SHARD,
    COL_WINDOW,
    ROW_ID,
    parse_commit,
    parse_replay,
    row_id_filter,
    shard_filter,
    shard_texts,
)
from icegroup.iceberg.store.lineage import LineageNow, is_in, lineage_now, quoted
from icegroup.iceberg.store.tables import load_optional, shards_as_numbers

# A filter on sink rows that matches more shards than this is answered for these only, and says so.
MAX_ROW_SHARDS = 1000
# Sink rows that name more source rows than this name them by shard and file only, and say so.
MAX_ROW_IDS = 1000


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


def by_rows(catalog: Catalog, group: GroupConfig, row_filter: str) -> Answer:
    """Backwards from sink rows: their shard ids, however the sink's files were compacted since."""
    sink = load_optional(catalog, group.sink)
    if sink is None:
        raise UsageError(f"--row: group {group.name!r} has no sink table {group.sink} yet")
    columns = {f.name for f in sink.schema().fields}
    by_file = COL_FILE in columns
    selected = (COL_SHARD, COL_WINDOW, *([COL_FILE] if by_file else []), *([COL_ROW] if COL_ROW in columns else []))
    try:
        rows = sink.scan(row_filter=row_filter, selected_fields=selected).to_arrow()
    except (ValueError, TypeError, ParseException) as exc:
        raise UsageError(
            f'--row: {row_filter!r} is not a filter on {group.sink}\'s columns ({exc}); write it like "id = 42"'
        ) from None
    counts: dict[tuple[str, str], int] = {}
    refs: dict[str, set[int | None]] = {}
    unwindowed = 0
    files = rows.column(COL_FILE).to_pylist() if by_file else [None] * rows.num_rows
    for shard, window, ref in zip(
        shard_texts(rows.column(COL_SHARD).to_pylist()),
        window_texts(rows.column(COL_WINDOW).to_pylist()),
        files,
        strict=True,
    ):
        if shard is not None and window is None:
            unwindowed += 1
        elif shard is not None and window is not None:
            counts[(shard, window)] = counts.get((shard, window), 0) + 1
            refs.setdefault(shard, set()).add(ref)
    chosen = sorted(counts)[:MAX_ROW_SHARDS]
    note = f"{rows.num_rows} sink rows match, from {len(counts)} shards"
    if len(counts) > MAX_ROW_SHARDS:
        note += f"; the first {MAX_ROW_SHARDS} are shown, narrow the filter for the rest"
    if unwindowed:
        note += (
            f"; {unwindowed} of them have no {COL_WINDOW} (written before the sink had one), so their shards are not "
            f"named: run `icegroup migrate {group.name} --execute`"
        )
    lineage = lineage_now(catalog, group)
    found = Answer(
        group=group.name,
        question=f"sink rows where {row_filter}",
        found=lineage.shard_entries({shard: window for shard, window in chosen}),
        recorded_through=lineage.through,
        unrecorded=lineage.unrecorded,
        sink_rows={shard: count for (shard, _), count in counts.items()},
        note=note,
        row_filter=row_filter,
    )
    if COL_ROW in columns:
        source_rows(found, rows.column(COL_ROW).to_pylist())
    kept, rest = by_their_files(found.found, refs)
    if not rest:
        found.found = kept
        found.note += "; only the source files the rows were read from are listed"
        return found
    found.found = rest
    narrowed(catalog, group, found, row_filter)
    if kept:
        found.found = kept + found.found
        found.note += f" ({len({e.shard_id for e in kept})} shard(s) by the files their rows were read from)"
    return found


def source_rows(found: Answer, row_ids: list[int | None]) -> None:
    """Name the source rows behind the answer's sink rows by their ``_row_id``; the note counts rows without one.

    A sink row carries its source row's id where the source is format v3 and the transform hands
    rows on one by one; an aggregation's rows, or rows written before, carry none.
    """
    known = [i for i in row_ids if i is not None]
    if len(known) > MAX_ROW_IDS:
        found.note += f"; {len(known)} source rows by {ROW_ID}, more than {MAX_ROW_IDS}: narrow the filter to name them"
    elif known:
        found.source_filter = row_id_filter(ROW_ID, known)
    if missing := len(row_ids) - len(known):
        found.note += (
            f"; {missing} of them carry no source row id (from a transform that holds rows back, written before "
            "the sink had the column or with source_row_ids off, replayed shard by shard or re-driven), so only "
            "their shards and files say"
        )


def by_their_files(
    found: list[LineageEntry], refs: Mapping[str, set[int | None]]
) -> tuple[list[LineageEntry], list[LineageEntry]]:
    """The entries of the files the rows name by reference, and the entries of shards that cannot be told so.

    A shard cannot when one of its rows names no file, one of its entries has none, two of its files
    share a reference, or a row names a file it did not read: those are asked of the source files.
    """
    by_shard: dict[str, list[LineageEntry]] = {}
    for entry in found:
        by_shard.setdefault(entry.shard_id, []).append(entry)
    kept: list[LineageEntry] = []
    rest: list[LineageEntry] = []
    for shard, shard_found in by_shard.items():
        named = refs.get(shard, set())
        paths = [e.source_file for e in shard_found]
        known = {file_ref(p) for p in paths if p is not None}
        if None in named or None in paths or len(known) != len(paths) or not named <= known:
            rest += shard_found
            continue
        kept += [e for e in shard_found if e.source_file is not None and file_ref(e.source_file) in named]
    return kept, rest


def by_source_file(catalog: Catalog, group: GroupConfig, path: str) -> Answer:
    """Forwards from a source data file, named in any of its forms: its entries, and the sink rows made from it."""
    lineage = lineage_now(catalog, group)
    found = answer(lineage, group, f"source file {path}", is_in("source_file", file_forms(path)))
    forward_rows(catalog, group, lineage, found)
    return found


def by_source_rows(catalog: Catalog, group: GroupConfig, row_ids: Sequence[int]) -> Answer:
    """The sink rows made from the source rows whose ``_row_id`` is one of ``row_ids``, and their shards' entries.

    Each entry keeps only the source files the rows were read from, where their rows name one.
    """
    sink = load_optional(catalog, group.sink)
    if sink is None:
        raise UsageError(f"--source-row-id: group {group.name!r} has no sink table {group.sink} yet")
    columns = {f.name for f in sink.schema().fields}
    if COL_ROW not in columns:
        raise UsageError(
            f"--source-row-id: {group.sink} has no {COL_ROW} column, so its rows do not name their source rows: "
            f"{group.source} is not a format-v3 table, the group sets source_row_ids: false (set it true: new "
            "output gets the column), or it was consumed before icegroup recorded row ids or by an Iceberg runtime "
            "before 1.10; ask by --source-file or --source-snapshot instead"
        )
    sink_filter = row_id_filter(COL_ROW, row_ids)
    selected = (COL_SHARD, COL_WINDOW, *([COL_FILE] if COL_FILE in columns else []))
    rows = sink.scan(row_filter=sink_filter, selected_fields=selected).to_arrow()
    windows: dict[str, str] = {}
    counts: dict[str, int] = {}
    refs: dict[str, set[int | None]] = {}
    files = rows.column(COL_FILE).to_pylist() if COL_FILE in columns else [None] * rows.num_rows
    shards = shard_texts(rows.column(COL_SHARD).to_pylist())
    for shard, window, ref in zip(shards, window_texts(rows.column(COL_WINDOW).to_pylist()), files, strict=True):
        if shard is not None and window is not None:
            windows[shard] = window
            counts[shard] = counts.get(shard, 0) + 1
            refs.setdefault(shard, set()).add(ref)
    lineage = lineage_now(catalog, group)
    kept, rest = by_their_files(lineage.shard_entries(windows), refs)
    note = f"{rows.num_rows} sink rows name these source rows"
    if not rows.num_rows:
        note = (
            "no sink row names these source rows: not consumed yet, left out by the group's filter or transform, "
            "or among the rows that carry no source row id"
        )
    # Files whose null count for the column is 0 are skipped by their metrics: a cheap count.
    if unnamed := sink.scan(row_filter=f"{COL_ROW} IS NULL", selected_fields=(COL_SHARD,)).to_arrow().num_rows:
        note += (
            f"; {unnamed} sink rows carry no source row id (from a transform that holds rows back, written before "
            "the sink had the column or with source_row_ids off, replayed shard by shard or re-driven), so a source "
            "row among theirs is not named here: ask by --source-file for its file"
        )
    return Answer(
        group=group.name,
        question=f"source rows where {row_id_filter(ROW_ID, row_ids)}",
        found=kept + rest,
        recorded_through=lineage.through,
        unrecorded=lineage.unrecorded,
        sink_rows=counts,
        note=note,
        sink_filter=sink_filter,
        source_filter=row_id_filter(ROW_ID, row_ids),
    )


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


def holding(source: Table | None, found: list[LineageEntry], row_filter: str) -> list[LineageEntry] | None:
    """The entries whose source file holds a row matching ``row_filter``: the exact files, not the shard's.

    None when that cannot be told: the filter names columns the source does not have (the transform
    made them), or a file is gone. Each file is read with the filter pushed down into the read.
    """
    if source is None:
        return None
    try:
        pushed = expression_to_pyarrow(bind(source.schema(), parse_filter(row_filter), case_sensitive=True))
    except (ValueError, TypeError, ParseException):
        return None
    kept = []
    for entry in found:
        if entry.source_file is None:
            return None
        try:
            with source.io.new_input(entry.source_file).open() as stream:
                matches = pq.read_table(stream, filters=pushed).num_rows
        except (OSError, ValueError):
            return None
        if matches:
            kept.append(entry)
    return kept


def narrowed(catalog: Catalog, group: GroupConfig, found: Answer, row_filter: str) -> None:
    """Keep only the entries whose files hold the rows, when the source can be asked; say which it was."""
    exact = holding(load_optional(catalog, group.source), found.found, row_filter)
    if exact is None:
        found.note += "; the source files of the whole shard are listed (the filter cannot be asked of the source)"
    else:
        found.found = exact
        found.note += "; only the source files that hold matching rows are listed"


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
