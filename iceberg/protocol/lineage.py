"""Lineage entries: which source files each committed shard's output came from, and which sink snapshot holds it.

One entry per (shard, source file). They are derived from the sink's commits in the sink's order,
oldest first, by pure rules:

- a consumption commit adds an entry per file of each shard it committed (the files as the Leader
  planned them; a shard the registry no longer holds gets one entry without a file);
- a replay of a window supersedes the window's entries: the same shards and files, now held by the
  replay's sink snapshot, at its generation, made by its run;
- a reset voids the entries of the commits whose output it deleted (``ResetRecord.voids``).

So every committed sink row has exactly one current entry per source file of its shard, however
often its window was replayed or its group reset.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from icegroup.iceberg.protocol.shards import Shard, Window, snapshot_range, window_label
from icegroup.iceberg.protocol.sink_commit import ReplayCommit, ResetRecord, ShardRange, SinkCommit

CONSUMED = "consume"
REPLAYED = "replay"


@dataclass(frozen=True)
class LineageEntry:
    """One source file of one committed shard, and the sink snapshot whose rows it made."""

    group: str
    window: str
    stream: str
    shard_id: str
    from_snapshot: int | None
    to_snapshot: int
    to_sequence: int | None
    source_file: str | None
    source_snapshot: int | None
    file_records: int | None
    file_bytes: int | None
    shard_rows: int | None
    sink_snapshot: int
    committed_at_ms: int
    kind: str
    generation: int
    lease_id: str
    attempt: int
    epoch: int
    run_id: str | None
    config_hash: str | None

    def shard_range(self) -> ShardRange:
        """The entry's shard as reset records judge it."""
        return ShardRange(
            shard_id=self.shard_id,
            stream=self.stream,
            from_snapshot=self.from_snapshot,
            to_snapshot=self.to_snapshot,
            snapshots=(),
            to_sequence=self.to_sequence,
        )


def consumed(commit: SinkCommit, shards: Mapping[str, Shard], window: Window) -> list[LineageEntry]:
    """The entries of a consumption commit: one per planned file of each shard it committed.

    ``shards`` holds the registry's shards, which still name their files when the commit is first
    reconciled. A shard it lacks (a registry rebuilt from the sink, or a sink older than lineage)
    gets one entry without a file: its range and sink snapshot are known, its files are not.
    """
    entries = []
    config_hash = commit.origin.config_hash if commit.origin is not None else None
    for ranged in commit.shards:
        planned = shards.get(ranged.shard_id)
        start = ranged.window_start_ms if ranged.window_start_ms is not None else commit.timestamp_ms
        base = LineageEntry(
            group=commit.group,
            window=window_label(start, window),
            stream=ranged.stream,
            shard_id=ranged.shard_id,
            from_snapshot=ranged.from_snapshot,
            to_snapshot=ranged.to_snapshot,
            to_sequence=ranged.to_sequence,
            source_file=None,
            source_snapshot=None,
            file_records=None,
            file_bytes=None,
            shard_rows=ranged.rows,
            sink_snapshot=commit.snapshot_id,
            committed_at_ms=commit.timestamp_ms,
            kind=CONSUMED,
            generation=0,
            lease_id=commit.lease_id,
            attempt=commit.attempt,
            epoch=commit.epoch,
            run_id=commit.run_id,
            config_hash=config_hash,
        )
        if planned is None or not planned.files:
            entries.append(base)
            continue
        stats: Sequence[tuple[int | None, int | None, int | None]] = planned.file_stats or [(None, None, None)] * len(
            planned.files
        )
        for path, (snapshot, records, size) in zip(planned.files, stats, strict=True):
            entries.append(
                replace(base, source_file=path, source_snapshot=snapshot, file_records=records, file_bytes=size)
            )
    return entries


def replayed(replay: ReplayCommit, window_entries: Iterable[LineageEntry]) -> list[LineageEntry]:
    """The window's entries once ``replay`` replaced its output: the covered shards, held by the replay now.

    A replay replaces the whole window, so entries of shards it did not cover have no rows left
    in the sink and are dropped.
    """
    covered = {shard.shard_id for shard in replay.covers}
    return [
        replace(
            entry,
            sink_snapshot=replay.snapshot_id,
            committed_at_ms=replay.timestamp_ms,
            kind=REPLAYED,
            generation=replay.generation,
            run_id=replay.run_id,
        )
        for entry in window_entries
        if entry.shard_id in covered
    ]


def voided(entries: Iterable[LineageEntry], resets: Sequence[ResetRecord]) -> set[str]:
    """Shard ids of the entries whose output a reset deleted (a commit of an older epoch past its position)."""
    return {
        entry.shard_id for entry in entries if any(record.voids(entry.epoch, entry.shard_range()) for record in resets)
    }


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


def window_provenance(found: Iterable[LineageEntry], starts: Mapping[str, int]) -> dict[int, WindowProvenance]:
    """Each window's provenance, by its start, from the current entries ``found`` of the windows in ``starts``."""
    by_window: dict[str, list[LineageEntry]] = {}
    for entry in found:
        by_window.setdefault(entry.window, []).append(entry)
    provenance = {}
    for label, window_entries in by_window.items():
        ordered = sorted(window_entries, key=lambda e: (e.to_sequence or 0, e.shard_id))
        shards = {e.shard_id: e.shard_rows or 0 for e in ordered}
        provenance[starts[label]] = WindowProvenance(
            window=label,
            shards=len(shards),
            source_files=sum(e.source_file is not None for e in ordered),
            source_rows=sum(shards.values()),
            source_range=snapshot_range(ordered[0].from_snapshot, ordered[-1].to_snapshot),
            source_snapshot=ordered[-1].to_snapshot,
            sink_snapshots=tuple(sorted({e.sink_snapshot for e in ordered})),
        )
    return provenance
