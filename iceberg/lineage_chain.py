"""Lineage across chained groups: a group whose source is another group's sink.

``trace_back`` follows a backwards answer upstream, group by group, to the first source;
``trace_forward`` follows a forwards answer downstream to the last sink. Each hop is an answer of
its own (``iceberg/lineage.py``), appended to the first answer's ``hops``.
"""

from __future__ import annotations

from collections.abc import Mapping

import pyarrow.parquet as pq
from pyiceberg.catalog import Catalog
from pyiceberg.table import Table

from icegroup.iceberg.lineage import Answer, answer, forward_rows
from icegroup.iceberg.lineage_rows import narrowed
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.lineage import LineageEntry
from icegroup.iceberg.protocol.shards import window_texts
from icegroup.iceberg.protocol.sink_commit import COL_SHARD, COL_WINDOW, shard_texts
from icegroup.iceberg.store.lineage import lineage_now
from icegroup.iceberg.store.tables import load_optional


def upstream_of(groups: Mapping[str, GroupConfig], group: GroupConfig) -> GroupConfig | None:
    """The group whose sink this group consumes, if any."""
    return next((g for g in groups.values() if g.sink == group.source and g.name != group.name), None)


def downstream_of(groups: Mapping[str, GroupConfig], group: GroupConfig) -> list[GroupConfig]:
    """The groups that consume this group's sink."""
    return [g for g in groups.values() if g.source == group.sink and g.name != group.name]


def trace_back(catalog: Catalog, groups: Mapping[str, GroupConfig], group: GroupConfig, found: Answer) -> None:
    """Follow ``found`` upstream, group by group, to the first source: each hop is the upstream's answer.

    The files of a chained group's source are the upstream sink's files, and their rows carry the
    upstream shard ids: reading those two columns names the upstream shards exactly. A file that is
    gone (expired) falls back to the upstream commit that added it, the entry's source snapshot.
    """
    seen = {group.name}
    current, answer_now = group, found
    while (upstream := upstream_of(groups, current)) is not None and upstream.name not in seen:
        seen.add(upstream.name)
        source = load_optional(catalog, current.source)
        shards: dict[str, str] = {}
        snapshots: set[int] = set()
        for entry in answer_now.found:
            read = shards_in_file(source, entry.source_file) if source is not None and entry.source_file else None
            if read is None:
                if entry.source_snapshot is not None:
                    snapshots.add(entry.source_snapshot)
                continue
            shards.update(read)
        lineage = lineage_now(catalog, upstream)
        hop = lineage.shard_entries(shards)
        if snapshots:
            hop += lineage.entries(f"sink_snapshot IN ({', '.join(str(s) for s in sorted(snapshots))})")
        answer_now = Answer(
            group=upstream.name,
            question=f"upstream of {current.name}",
            found=unique(hop),
            recorded_through=lineage.through,
            unrecorded=lineage.unrecorded,
            row_filter=found.row_filter,
        )
        if found.row_filter is not None:
            narrowed(catalog, upstream, answer_now, found.row_filter)
            answer_now.note = answer_now.note.removeprefix("; ")
        found.hops.append(answer_now)
        current = upstream


def trace_forward(catalog: Catalog, groups: Mapping[str, GroupConfig], group: GroupConfig, found: Answer) -> None:
    """Follow ``found`` downstream: the sink snapshots it names are the source snapshots of the next group."""
    seen = {group.name}
    frontier = [(group, found)]
    while frontier:
        current, answer_now = frontier.pop(0)
        sinks = sorted({e.sink_snapshot for e in answer_now.found})
        for downstream in downstream_of(groups, current):
            if downstream.name in seen or not sinks:
                continue
            seen.add(downstream.name)
            lineage = lineage_now(catalog, downstream)
            hop = answer(
                lineage,
                downstream,
                f"downstream of {current.name}",
                f"source_snapshot IN ({', '.join(str(s) for s in sinks)})",
            )
            forward_rows(catalog, downstream, lineage, hop)
            found.hops.append(hop)
            frontier.append((downstream, hop))


def shards_in_file(source: Table, path: str) -> dict[str, str] | None:
    """The upstream shard ids (with their windows) of the rows in one of the upstream sink's files; None if gone."""
    try:
        with source.io.new_input(path).open() as stream:
            rows = pq.read_table(stream, columns=[COL_SHARD, COL_WINDOW])
    except (OSError, ValueError):
        return None
    windows = window_texts(rows.column(COL_WINDOW).to_pylist())
    pairs = zip(shard_texts(rows.column(COL_SHARD).to_pylist()), windows, strict=True)
    return {shard: window for shard, window in pairs if shard is not None and window is not None}


def unique(found: list[LineageEntry]) -> list[LineageEntry]:
    """Entries without repeats, in their first order."""
    return list(dict.fromkeys(found))
