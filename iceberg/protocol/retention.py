"""Which snapshots of a table may be expired: the oldest ones that nothing pins.

A *pin* keeps every snapshot from some point on: from a sequence number (a group's low watermark on
its source, its reconciled cursor on its sink, a lease's grant snapshot) or from a commit time (a
replay horizon, a keep-for duration). Expiry takes only the oldest run of snapshots that no pin
holds, never the head, so the history that is left is one unbroken chain from a pin to the head.
Each kept snapshot is kept by the pins that hold it, so ``icegroup expire``'s preview can name them.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from icegroup.iceberg.protocol.shards import SnapshotInfo
from icegroup.iceberg.protocol.sink_commit import ShardRange


@dataclass(frozen=True)
class StateRetention:
    """How much history the group's own tables keep."""

    keep_last: int = 100
    keep_for: timedelta = timedelta(days=7)


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
        """What the pin keeps, as the preview of ``icegroup expire`` prints it."""
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


def reset_reach(
    commits: Iterable[tuple[int, Iterable[ShardRange]]], source_floor: int, source_snapshots: Collection[int]
) -> int | None:
    """The oldest sink commit (of ``(sink sequence, shard ranges)``) whose output a reset may still delete.

    A reset moves a stream back only to source snapshots still in the source's history (from
    ``source_floor``, the oldest one's sequence number), and deletes the output of the shards it
    consumes again, found in the sink's commits. So a commit that consumed anything at or after the
    floor must stay in the sink's history, or a reset would consume its rows again without deleting
    them. A range whose sequence number was not recorded (older commits) is needed while its last
    snapshot is still among ``source_snapshots``. None: no commit is needed.
    """
    needed = [
        sequence
        for sequence, shards in commits
        if any(
            shard.to_snapshot in source_snapshots if shard.to_sequence is None else shard.to_sequence >= source_floor
            for shard in shards
        )
    ]
    return min(needed, default=None)


# Iceberg's default for history.expire.max-snapshot-age-ms: what an expiry outside icegroup keeps.
DEFAULT_MAX_AGE_MS = 5 * 24 * 3_600_000
# With no rate to forecast from, an expiry closer than this is called a risk.
NO_RATE_WARNING_MS = 24 * 3_600_000


@dataclass(frozen=True)
class Staleness:
    """When the oldest snapshot a group needs would expire by age, and whether the group catches up before."""

    expires_at_ms: int | None
    catches_up_at_ms: int | None
    at_risk: bool

    def line(self, max_age_ms: int) -> str:
        """The forecast as ``describe`` prints it."""
        days = max_age_ms / 86_400_000
        if self.expires_at_ms is None:
            return f"retention: nothing unconsumed; an expiry by age ({days:g} days) takes nothing the group needs"
        expires = _iso(self.expires_at_ms)
        if self.catches_up_at_ms is None:
            risk = "AT RISK: " if self.at_risk else ""
            return (
                f"retention: {risk}no recent rate yet, so no catch-up forecast; an expiry by age ({days:g} days) "
                f"outside icegroup would take the oldest snapshot the group needs at {expires}"
            )
        verdict = "AT RISK: that is before" if self.at_risk else "safe: that is after"
        return (
            f"retention: an expiry by age ({days:g} days) outside icegroup would take the oldest snapshot the group "
            f"needs at {expires}; {verdict} the lag clears (forecast {_iso(self.catches_up_at_ms)})"
        )


def staleness(
    oldest_needed_ms: int | None, max_age_ms: int, lag_rows: int, rate_rows_s: float | None, now_ms: int
) -> Staleness:
    """Forecast, at the current lag and rate, whether the group catches up before its position would expire by age."""
    if oldest_needed_ms is None:
        return Staleness(None, None, at_risk=False)
    expires = oldest_needed_ms + max_age_ms
    if not rate_rows_s:
        # Without a rate there is no forecast: a new group has none yet. Only a close expiry is a risk then.
        return Staleness(expires, None, at_risk=expires - now_ms < NO_RATE_WARNING_MS)
    clears = now_ms + int(lag_rows / rate_rows_s * 1000)
    return Staleness(expires, clears, at_risk=clears >= expires)


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="seconds")
