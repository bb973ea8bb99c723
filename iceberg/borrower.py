"""A warm Borrower takes waiting leases from the registry, by compare-and-swap (``protocol/borrower.py``)."""

from __future__ import annotations

import time

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
