"""What a complete window's output was made from: its provenance, for the window's Dagster materialization."""

from __future__ import annotations

from dataclasses import dataclass

from pyiceberg.table import Table

from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.lineage import LineageEntry
from icegroup.iceberg.protocol.shards import snapshot_range, window_label
from icegroup.iceberg.store.lineage import entries, is_in


@dataclass(frozen=True)
class WindowProvenance:
    """What a complete window's output was made from, for its Dagster materialization.

    ``source_range`` runs from the exclusive start of its earliest shard to the end of its latest
    (shards of several streams interleave in it); ``source_snapshot`` is that end, the source
    version the window was computed from.
    """

    window: str
    shards: int
    source_files: int
    source_rows: int
    source_range: str
    source_snapshot: int
    sink_snapshots: tuple[int, ...]


def window_provenance(table: Table | None, group: GroupConfig, starts: list[int]) -> dict[int, WindowProvenance]:
    """The provenance of each window (by start) in the lineage ``table``; one read of their partitions."""
    if table is None or not starts:
        return {}
    labels = {window_label(start, group.replay_window): start for start in starts}
    by_window: dict[str, list[LineageEntry]] = {}
    for entry in entries(table, is_in("window", labels)):
        by_window.setdefault(entry.window, []).append(entry)
    found = {}
    for label, window_entries in by_window.items():
        ordered = sorted(window_entries, key=lambda e: (e.to_sequence or 0, e.shard_id))
        shards = {e.shard_id: e.shard_rows or 0 for e in ordered}
        found[labels[label]] = WindowProvenance(
            window=label,
            shards=len(shards),
            source_files=sum(e.source_file is not None for e in ordered),
            source_rows=sum(shards.values()),
            source_range=snapshot_range(ordered[0].from_snapshot, ordered[-1].to_snapshot),
            source_snapshot=ordered[-1].to_snapshot,
            sink_snapshots=tuple(sorted({e.sink_snapshot for e in ordered})),
        )
    return found
