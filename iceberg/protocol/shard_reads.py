"""How shards are read: the snapshot range one scan of several shards spans, and how finely it is cut into tasks.

Iceberg packs a scan's files into tasks of at most its split size. Unless a read names one, it
adapts the split size to the scan, but never below 16 MiB: a W1 shard of twelve 1.7 MB files became
three tasks holding one, two and nine files, and the nine-file task ran alone on one core for most
of the shard's time. A shard's read names its split size instead: its files, each weighed at least
the open cost as Iceberg weighs them, spread over ``TASKS_PER_CORE`` tasks per core. Files are never
cut below the open cost, so a read of many tiny files still packs them densely.

Small shards that commit together are read in one scan of the range that spans them all: a scan per
shard cost a table load, a scan planning and at least one task each, which made a batch of a few
hundred tiny files take longer to plan than to read.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from icegroup.iceberg.protocol.shards import Shard

# What Iceberg weighs a file at least when it packs files into tasks: opening one costs about this
# much reading. Iceberg's default is 4 MiB; a shard of hundreds of kilobyte-sized files packs far denser at 1 MiB.
OPEN_COST_BYTES = 1024 * 1024
# Two tasks per core: the bin packing of uneven files then still gives every core about as much to read.
TASKS_PER_CORE = 2
# Iceberg's own default split size. A huge shard is cut no coarser: a task's memory and a retried
# task's lost work stay what a plain Iceberg read's are.
MAX_SPLIT_BYTES = 128 * 1024 * 1024


def split_bytes(file_sizes: Iterable[int], cores: int) -> int:
    """The split size that cuts a read of files of ``file_sizes`` into about ``TASKS_PER_CORE`` tasks per core.

    It stays between the open cost and ``MAX_SPLIT_BYTES``: a huge shard gets more tasks than that, not bigger ones.
    """
    weight = sum(max(size, OPEN_COST_BYTES) for size in file_sizes)
    share = math.ceil(weight / (max(cores, 1) * TASKS_PER_CORE))
    return min(max(share, OPEN_COST_BYTES), MAX_SPLIT_BYTES)


def file_sizes(shards: Sequence[Shard]) -> list[int]:
    """Each file's size; a shard planned before sizes were kept spreads its bytes evenly over its files."""
    sizes: list[int] = []
    for shard in shards:
        if shard.file_stats:
            sizes += [size for _, _, size in shard.file_stats]
        else:
            sizes += [shard.bytes // max(len(shard.files), 1)] * len(shard.files)
    return sizes


def spanning_range(shards: Sequence[Shard], sequence_of: Callable[[int], int | None]) -> tuple[int | None, int] | None:
    """The snapshot range (exclusive start, inclusive end) that holds every file of ``shards``; None if unsure.

    It starts where the earliest shard starts (None: at the table's first snapshot) and ends at the
    latest shard's end. Shards of other streams or leases inside it are no concern: the read keeps
    exactly the given shards' files. ``sequence_of`` is a snapshot's sequence number, None for one
    the table no longer has. A start that is too late would leave files out unnoticed, so when the
    starts cannot be ordered for sure (one has expired, or two share a sequence number, as a table
    upgraded from format v1 has them) there is no span, and the shards are read one by one.
    """
    if not shards:
        raise ValueError("spanning_range: no shards")
    end = max(shards, key=lambda s: s.to_sequence).to_snapshot
    starts = {s.from_snapshot for s in shards}
    if None in starts:
        return None, end
    sequences = {start: sequence_of(start) for start in starts if start is not None}
    known = {start: seq for start, seq in sequences.items() if seq is not None}
    if len(known) < len(sequences) or len(set(known.values())) < len(known):
        return None
    return min(known, key=known.__getitem__), end


@dataclass(frozen=True)
class AsOf:
    """Read the files as of one snapshot, not by a range: the snapshots that added them have expired.

    ``min_row_id``: only rows whose ``_row_id`` is at least this are read (``Shard.min_row_id``).
    """

    snapshot_id: int
    min_row_id: int | None = None


Span = tuple[int | None, int] | AsOf


def shard_span(shard: Shard) -> Span:
    """What one shard is read by: its snapshot range, or, for one a file diff found, its files as of the head."""
    if shard.read_snapshot is None:
        return (shard.from_snapshot, shard.to_snapshot)
    return AsOf(shard.read_snapshot, shard.min_row_id)


def batch_span(shards: Sequence[Shard], sequence_of: Callable[[int], int | None]) -> Span | None:
    """What one scan of ``shards`` is read by; None when they must be read one by one.

    Shards a file diff found (``Shard.read_snapshot``) are read as of the snapshot they name, all in
    one scan when they name the same one (and the same row-id watermark). Beside shards read by
    range, each is read on its own.
    """
    ats = {(shard.read_snapshot, shard.min_row_id) for shard in shards}
    if ats == {(None, None)}:
        return spanning_range(shards, sequence_of)
    if len(ats) == 1:
        ((at, floor),) = ats
        return AsOf(at, floor) if at is not None else None
    return None
