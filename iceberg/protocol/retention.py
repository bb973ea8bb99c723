"""Which snapshots of a table may be expired: the oldest ones that nothing pins.

A *pin* keeps every snapshot from some point on: from a sequence number (a group's low watermark on
its source, its reconciled cursor on its sink, a lease's grant snapshot) or from a commit time (a
replay horizon, a keep-for duration). Expiry takes only the oldest run of snapshots that no pin
holds, never the head, so the history that is left is one unbroken chain from a pin to the head.
Each kept snapshot is kept by the pins that hold it, so ``--dry-run`` can name them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from iceberg.protocol.shards import SnapshotInfo


@dataclass(frozen=True)
class Pin:
    """Something that needs a table's snapshots from a point on.

    ``sequence``: keep snapshots with at least this sequence number (0 keeps all of them).
    ``since_ms``: keep snapshots committed at or after this time. ``last``: keep the newest so many.
    """

    holder: str
    sequence: int | None = None
    since_ms: int | None = None
    last: int | None = None

    def holds(self, snapshot: SnapshotInfo, newest_rank: int) -> bool:
        """Whether the pin keeps ``snapshot``, the ``newest_rank``-th newest (0 is the head)."""
        if self.sequence is not None and snapshot.sequence_number >= self.sequence:
            return True
        if self.since_ms is not None and snapshot.timestamp_ms >= self.since_ms:
            return True
        return self.last is not None and newest_rank < self.last

    def describe(self) -> str:
        """What the pin keeps, as ``--dry-run`` prints it."""
        parts = []
        if self.sequence is not None:
            parts.append(f"from sequence {self.sequence}")
        if self.since_ms is not None:
            parts.append(f"committed since {self.since_ms}")
        if self.last is not None:
            parts.append(f"the last {self.last}")
        return f"{self.holder}: {' or '.join(parts) or 'nothing'}"


@dataclass(frozen=True)
class Judged:
    """A table's history split into what expires and what stays, with what holds the oldest kept snapshot."""

    expire: tuple[SnapshotInfo, ...]
    keep: tuple[SnapshotInfo, ...]
    held_by: tuple[str, ...]


def judge(history: Sequence[SnapshotInfo], pins: Sequence[Pin]) -> Judged:
    """Split ``history`` (main's chain, oldest first): the oldest snapshots no pin holds expire, the rest stay.

    The head always stays. A snapshot no pin holds but newer than one that is held stays too: the
    chain that is left must reach back unbroken to the oldest snapshot something needs.
    """
    ordered = list(history)
    cut = 0
    for index, snapshot in enumerate(ordered[:-1]):
        rank = len(ordered) - 1 - index
        if any(pin.holds(snapshot, rank) for pin in pins):
            break
        cut = index + 1
    kept = ordered[cut:]
    holders = tuple(p.holder for p in pins if kept and p.holds(kept[0], len(kept) - 1))
    return Judged(tuple(ordered[:cut]), tuple(kept), holders or (("the head",) if kept else ()))
