"""Shards: immutable units of work, and the pure function that cuts them.

A shard is (stream, from-snapshot exclusive, to-snapshot inclusive) plus the data files that the
append snapshots in that range added to the stream. Cutting is deterministic: the same inputs give
the same shards with the same ids, so a Leader that dies mid-tick and plans again cuts nothing new.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from icegroup.iceberg.protocol.group import ShardCaps

Window = Literal["hour", "day"]
HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS


@dataclass(frozen=True)
class SnapshotInfo:
    """What planning needs of one source snapshot; read from table metadata only."""

    snapshot_id: int
    parent_id: int | None
    sequence_number: int
    timestamp_ms: int
    schema_id: int | None
    operation: str


PartitionValue = str | int | bool | None


@dataclass(frozen=True)
class FileEntry:
    """One data file that an append snapshot added to a stream."""

    stream: str
    snapshot_id: int
    path: str
    record_count: int
    size_bytes: int
    identity: tuple[tuple[str, PartitionValue], ...] = ()


class Shard(BaseModel):
    """An immutable unit of work; cut once by the Leader and never re-cut."""

    model_config = ConfigDict(frozen=True)

    shard_id: str = Field(description="Deterministic 16-hex id; also the sink's fencing key.")
    stream: str = Field(description="Stream key: partition spec id and partition path.")
    from_snapshot: int | None = Field(description="Exclusive start; None means the table's first snapshot.")
    to_snapshot: int = Field(description="Inclusive end.")
    to_sequence: int = Field(description="Sequence number of to_snapshot; orders shards in a stream.")
    schema_id: int | None = Field(description="Schema id shared by every snapshot in the shard.")
    window_start_ms: int = Field(description="Start of the replay window all its snapshots fall in.")
    snapshots: list[int] = Field(description="Source snapshots in the range that added files here.")
    files: list[str] = Field(description="Data files the shard consists of.")
    file_stats: list[tuple[int, int, int]] = Field(
        default_factory=list,
        description="Per file, in the order of files: the snapshot that added it, its records and its bytes. "
        "Lineage records them once the shard commits; empty in shards planned before they were kept.",
    )
    rows: int = Field(description="Source rows in those files, before the group's filter.")
    bytes: int = Field(description="Size of those files.")
    identity: dict[str, PartitionValue] = Field(
        default_factory=dict,
        description="Source column values that every file of the stream has (identity partition fields), "
        "so a read of the shard as of a snapshot (after its snapshots expired) can prune the other streams' files.",
    )
    read_snapshot: int | None = Field(
        default=None,
        description="Set when the snapshots that added its files had expired when it was cut (found by a file "
        "diff, iceberg/history_gap.py): its files are read as of this snapshot, not by an incremental scan.",
    )

    min_row_id: int | None = Field(
        default=None,
        description="Set on a format-v3 source whose gap held a rewrite: only rows whose _row_id is at least this "
        "(the table's next-row-id at the group's position) are the shard's; the files also hold rows read before.",
    )

    def read_at(self) -> int:
        """The snapshot the shard's files are read as of: its own end, or the head a file diff reached."""
        return self.to_snapshot if self.read_snapshot is None else self.read_snapshot

    def found_by(self) -> str:
        """How planning found its rows: an incremental range, a file diff, or a file diff cut at a row-id watermark."""
        if self.min_row_id is not None:
            return "row_ids"
        return "snapshots" if self.read_snapshot is None else "files"


def window_start_ms(timestamp_ms: int, window: Window) -> int:
    """Floor a commit time to its hour or day (UTC)."""
    width = HOUR_MS if window == "hour" else DAY_MS
    return timestamp_ms - timestamp_ms % width


def window_label(start_ms: int, window: Window) -> str:
    """The window as Dagster's time-window partition key (UTC)."""
    moment = datetime.fromtimestamp(start_ms / 1000, tz=UTC)
    return moment.strftime("%Y-%m-%d-%H:%M" if window == "hour" else "%Y-%m-%d")


def window_value(label: str, window: Window) -> date | str:
    """What a sink row holds for its window: a day as a ``date``, an hour as its label.

    A day is a 4-byte number in Parquet: as a string, the one constant the sink is partitioned by
    cost every row a dictionary lookup to encode and a string hash to route (``bench_lineage_cost``).
    Filters keep their form: Iceberg, pyiceberg and Spark read ``'2026-01-31'`` as that date.
    """
    return datetime.strptime(label, "%Y-%m-%d").date() if window == "day" else label


def sink_window(start_ms: int, window: Window) -> date | str:
    """What a sink row holds for the window starting at ``start_ms``: ``window_value`` of its label."""
    return window_value(window_label(start_ms, window), window)


def one_window(shards: Iterable[Shard], window: Window) -> bool:
    """Whether every row of ``shards`` goes to one sink window, so their output may be staged unpartitioned."""
    return len({sink_window(shard.window_start_ms, window) for shard in shards}) == 1


def window_text(value: date | str) -> str:
    """A row's ``_ig_window`` as its label (the Dagster partition key): a ``date``, or (hours, older sinks) text."""
    return value.isoformat() if isinstance(value, date) else value


def window_texts(values: Sequence[date | str | None]) -> list[str | None]:
    """``window_text`` of a column's values, nulls kept."""
    return [None if value is None else window_text(value) for value in values]


def parse_window_label(label: str, window: Window) -> int:
    """The start (ms, UTC) of the window a partition key names; ValueError naming the expected form."""
    form = "%Y-%m-%d-%H:%M" if window == "hour" else "%Y-%m-%d"
    try:
        moment = datetime.strptime(label, form).replace(tzinfo=UTC)
    except ValueError:
        example = "2026-01-31-13:00" if window == "hour" else "2026-01-31"
        raise ValueError(f"{label!r} is not a {window} window; write it like {example}") from None
    start = int(moment.timestamp() * 1000)
    if start != window_start_ms(start, window):
        raise ValueError(f"{label!r} does not start an {window} window; write the full hour, like 2026-01-31-13:00")
    return start


def snapshot_range(from_snapshot: int | None, to_snapshot: int) -> str:
    """A shard's source range as people read it: ``A..B`` is after A through B; ``start..B`` begins the table."""
    return f"{'start' if from_snapshot is None else from_snapshot}..{to_snapshot}"


def make_shard_id(group: str, epoch: int, stream: str, from_snapshot: int | None, to_snapshot: int) -> str:
    """16 hex characters: short enough that Iceberg's column bounds keep it exact (no truncation)."""
    key = f"{group}|{epoch}|{stream}|{from_snapshot}|{to_snapshot}"
    return hashlib.sha256(key.encode()).hexdigest()[:16]


@dataclass
class _Open:
    from_snapshot: int | None
    snapshot: SnapshotInfo
    window: int
    snapshots: list[int]
    files: list[FileEntry]

    def would_exceed(self, more: list[FileEntry], caps: ShardCaps) -> bool:
        files = len(self.files) + len(more)
        rows = sum(f.record_count for f in self.files) + sum(f.record_count for f in more)
        size = sum(f.size_bytes for f in self.files) + sum(f.size_bytes for f in more)
        return files > caps.max_files or rows > caps.max_rows or size > caps.max_bytes


def cut_shards(
    *,
    group: str,
    epoch: int,
    snapshots: Iterable[SnapshotInfo],
    files: Iterable[FileEntry],
    stream_cursors: Mapping[str, int | None],
    plan_from: int | None,
    caps: ShardCaps,
    window: Window,
    floors: Mapping[str, int] | None = None,
    read_at: int | None = None,
    min_row_id: int | None = None,
) -> list[Shard]:
    """Cut the files of the planned snapshots into shards, stream by stream.

    ``snapshots`` are the append snapshots of the planned range, oldest first. ``stream_cursors``
    gives, per known stream, the end of its last shard; a stream seen for the first time starts at
    ``plan_from``, since it had no files before it. ``floors`` gives, per stream, the sequence number
    through which it is already committed: its snapshots up to there are left out. Normally the
    planned range lies past every floor; after a rebuild from the sink it starts at the group's
    start, and the floors keep committed ranges from being cut again. A shard closes before a
    snapshot that would cross a schema change, a replay-window boundary or a cap. A single snapshot
    larger than a cap becomes a shard of its own: shards are cut on snapshot boundaries only.
    """
    ordered = list(snapshots)
    by_stream: dict[str, dict[int, list[FileEntry]]] = defaultdict(lambda: defaultdict(list))
    for entry in files:
        by_stream[entry.stream][entry.snapshot_id].append(entry)
    shards: list[Shard] = []
    floors = floors or {}
    for stream in sorted(by_stream):
        cursor = stream_cursors.get(stream, plan_from)
        floor = floors.get(stream, 0)
        current: _Open | None = None
        for snap in ordered:
            added = by_stream[stream].get(snap.snapshot_id)
            if not added or snap.sequence_number <= floor:
                continue
            win = window_start_ms(snap.timestamp_ms, window)
            if current is not None and (
                current.snapshot.schema_id != snap.schema_id
                or current.window != win
                or current.would_exceed(added, caps)
            ):
                shards.append(_close(group, epoch, stream, current, read_at, min_row_id))
                cursor = current.snapshot.snapshot_id
                current = None
            if current is None:
                current = _Open(cursor, snap, win, [], [])
            current.snapshot = snap
            current.snapshots.append(snap.snapshot_id)
            current.files.extend(added)
        if current is not None:
            shards.append(_close(group, epoch, stream, current, read_at, min_row_id))
    return sorted(shards, key=lambda s: (s.to_sequence, s.stream))


def commit_batches(shards: Sequence[Shard], max_rows: int) -> list[list[Shard]]:
    """Split a lease's shards, in order, into the groups that are published in one sink commit each.

    Each Spark job and commit costs a fixed overhead, so shards go together: consecutive shards of
    one source schema join a batch while its rows stay within ``max_rows``. A shard at or
    above the bound commits on its own, and ``max_rows=0`` commits every shard on its own.
    """
    batches: list[list[Shard]] = []
    for shard in shards:
        last = batches[-1] if batches else None
        if (
            last is not None
            and last[0].schema_id == shard.schema_id
            and sum(s.rows for s in last) + shard.rows <= max_rows
        ):
            last.append(shard)
        else:
            batches.append([shard])
    return batches


def _close(
    group: str, epoch: int, stream: str, open_shard: _Open, read_at: int | None, min_row_id: int | None
) -> Shard:
    last = open_shard.snapshot
    return Shard(
        shard_id=make_shard_id(group, epoch, stream, open_shard.from_snapshot, last.snapshot_id),
        stream=stream,
        from_snapshot=open_shard.from_snapshot,
        to_snapshot=last.snapshot_id,
        to_sequence=last.sequence_number,
        schema_id=last.schema_id,
        window_start_ms=open_shard.window,
        snapshots=list(open_shard.snapshots),
        files=[f.path for f in open_shard.files],
        file_stats=[(f.snapshot_id, f.record_count, f.size_bytes) for f in open_shard.files],
        rows=sum(f.record_count for f in open_shard.files),
        bytes=sum(f.size_bytes for f in open_shard.files),
        identity=shared_identity(open_shard.files),
        read_snapshot=read_at,
        min_row_id=min_row_id,
    )


def shared_identity(files: Sequence[FileEntry]) -> dict[str, PartitionValue]:
    """The identity values that every file holds, which the Borrower may push down into the shard's read.

    Files of one stream share them, except where two values print alike in a partition path: a null
    and the string ``'null'`` both make ``region=null``. A value the files disagree on is left out.
    """
    common = set(files[0].identity)
    for entry in files[1:]:
        common &= set(entry.identity)
    return {column: value for column, value in files[0].identity if (column, value) in common}
