"""Operator verbs that change a group's registry outside the Leader tick: pause and resume.

They commit through the same compare-and-swap as a tick, so a Leader that ticks at the same moment
either sees the change or loses its commit and ticks again; nothing a tick decided is lost.
"""

from __future__ import annotations

import time
from functools import partial

from pyiceberg.catalog import Catalog

from icegroup.iceberg.errors import UsageError
from icegroup.iceberg.protocol.drift import check_drift
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.state import GroupState
from icegroup.iceberg.retry import again_while_losing
from icegroup.iceberg.store.registry import commit_or_lose, kept_moving, load_state


def set_paused(catalog: Catalog, group: GroupConfig, paused: bool, retries: int = 10) -> tuple[GroupState, bool]:
    """Pause or resume ``group``; returns its state and whether this call changed it.

    Pausing keeps every position and every lease in flight: those leases finish (and are re-granted
    if their Borrower dies), but nothing new is granted until the group is resumed.
    """

    def attempt() -> tuple[GroupState, bool]:
        loaded = load_state(catalog, group.name)
        if loaded.state is None:
            raise UsageError(
                f"group {group.name!r} has no registry yet: it has never ticked, so there is nothing to "
                f"{'pause' if paused else 'resume'}; its first tick (the Leader sensor or `icegroup consume "
                f"{group.name}`) creates it"
            )
        check_drift(loaded.state, group)
        if (loaded.state.paused_at_ms is not None) == paused:
            return loaded.state, False
        changed = loaded.state.model_copy(update={"paused_at_ms": int(time.time() * 1000) if paused else None})
        commit_or_lose(loaded, changed)
        return changed, True

    verb = "pause" if paused else "resume"
    gave_up = partial(kept_moving, group.name, retries, f"{verb} it; try again")
    return again_while_losing(f"group {group.name}: {verb}", attempt, retries, 0.1, gave_up)
