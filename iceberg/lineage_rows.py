"""Lineage at the grain of rows: the shards and source files (and, on a format-v3 source, source rows) behind sink rows.

Sink rows carry their shard id (``_ig_shard``) and their source file's reference (``_ig_file``), so a
filter on sink rows names the shards and the very files they were read from, however the sink was
compacted since. Where a shard's rows cannot be told apart by file, the source files are asked
for rows matching the filter themselves (``narrowed``). On a format-v3 source, a sink row also
carries its source row's own ``_row_id`` (``_ig_row``, kept through the source's compaction): sink
rows name their source rows, and source rows, asked by id, name exactly the sink rows made from them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pyarrow.parquet as pq
from pyiceberg.catalog import Catalog
from pyiceberg.expressions.parser import parse as parse_filter
from pyiceberg.expressions.visitors import bind
from pyiceberg.io.pyarrow import expression_to_pyarrow
from pyiceberg.table import Table
from pyparsing import ParseException

from icegroup.iceberg.errors import UsageError
from icegroup.iceberg.lineage import Answer
from icegroup.iceberg.protocol.file_ref import file_ref
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.lineage import LineageEntry
from icegroup.iceberg.protocol.shards import window_texts
from icegroup.iceberg.protocol.sink_commit import (
    COL_FILE,
    COL_ROW,
    COL_SHARD,
    COL_WINDOW,
    ROW_ID,
    row_id_filter,
    shard_texts,
)
from icegroup.iceberg.store.lineage import lineage_now
from icegroup.iceberg.store.tables import load_optional

# A filter on sink rows that matches more shards than this is answered for these only, and says so.
MAX_ROW_SHARDS = 1000
# Sink rows that name more source rows than this name them by shard and file only, and say so.
MAX_ROW_IDS = 1000


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
