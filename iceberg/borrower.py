"""A warm Borrower takes waiting leases from the registry, by compare-and-swap (``protocol/borrower.py``)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from pyiceberg.catalog import Catalog

from icegroup.iceberg.errors import BorrowerOutdated, LostRace
from icegroup.iceberg.protocol.borrower import outdated, take, waiting
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.shards import Shard
from icegroup.iceberg.protocol.state import Lease
from icegroup.iceberg.retry import again_while_losing
from icegroup.iceberg.store.registry import commit_or_lose, load_state

# A Leader tick or another Borrower may win the swap; each try reads the registry again.
TAKE_TRIES = 5


def take_leases(
    catalog: Catalog, group: GroupConfig, run_id: str, slots: int, now_ms: int | None = None
) -> list[tuple[Lease, list[Shard]]]:
    """Take up to ``slots`` waiting leases for ``run_id``, each with its uncommitted shards in order.

    Nothing waiting costs one registry read and no write. A lost swap is tried again, up to
    ``TAKE_TRIES`` times; then nothing is taken this time, and the Borrower asks again at its next
    poll. A lease is the Borrower's once the swap succeeds, never before, so two Borrowers never
    run the same attempt. A Borrower whose config the registry is no longer pinned to takes
    nothing and gets ``BorrowerOutdated``.
    """

    def attempt() -> list[tuple[Lease, list[Shard]]]:
        loaded = load_state(catalog, group.name)
        if loaded.state is not None and outdated(loaded.state, group.config_hash):
            raise BorrowerOutdated(
                f"group {group.name!r}: the registry is pinned to config hash {loaded.state.config_hash}, "
                f"this Borrower runs {group.config_hash}"
            )
        if loaded.state is None or slots <= 0 or not waiting(loaded.state):
            return []
        at_ms = int(time.time() * 1000) if now_ms is None else now_ms
        state, leases = take(loaded.state, run_id, at_ms, group.lease_timeout_s, slots)
        commit_or_lose(loaded, state)
        return [(lease, [state.shards[s] for s in lease.shard_ids if s in state.shards]) for lease in leases]

    try:
        return again_while_losing(f"group {group.name}: taking leases", attempt, TAKE_TRIES)
    except LostRace:
        return []


@dataclass
class SourceWatch:
    """Whether the group's source has moved since a warm Borrower last looked: its cue to tick as a Leader.

    A warm Borrower with nothing to take would wait for the Leader sensor's next evaluation (up to
    ``sensor_interval_s`` and a daemon loop) before new source snapshots became leases. Looking at
    the source's head costs one metadata read, so it looks at each poll and ticks only when the
    head moved: once per new head, not once per poll, however long the tick then grants nothing (a
    paused or stopped group). The first look, as the Borrower starts, only notes the head: what
    came before it is the Leader's, which started the Borrower. A move while the Borrower is busy
    is seen at its next look with a free slot; shards that tick cut for streams the Borrower's own
    leases held are granted by its next tick, which it runs once one of those leases ends.
    ``failing`` is the caller's: whether the last look failed, so an outage is reported once.
    """

    catalog: Catalog
    source: str
    seen: int | None = field(default=None, init=False)
    looked: bool = field(default=False, init=False)
    failing: bool = field(default=False, init=False)

    def moved(self) -> bool:
        """True when the source's head is not the one seen at the last look (never at the first)."""
        snapshot = self.catalog.load_table(self.source).current_snapshot()
        head = snapshot.snapshot_id if snapshot is not None else None
        moved = self.looked and head != self.seen
        self.seen, self.looked = head, True
        return moved
