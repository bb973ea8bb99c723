"""When a replay window is complete: the Leader reports each window once, when nothing more can land in it.

A window is complete when the planning cursor has moved past its end by ``CLOSE_GRACE_MS`` (a
snapshot committed that much later was planned, or the group is caught up and the clock has passed
the end by that much) and none of its shards is waiting or being replayed. The grace covers clocks
that differ a little: Iceberg accepts a snapshot up to a minute older than its parent. Windows with
no data complete too, so the sink's partitions read "materialized" for every finished window and
"missing" only for open ones. A group stopped by a poison shard completes no window until it goes on.
"""

from __future__ import annotations

from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.shards import DAY_MS, HOUR_MS, window_start_ms
from icegroup.iceberg.protocol.state import GroupState

# Clocks of producers and the Leader may differ a little: a window closes this long after its end.
CLOSE_GRACE_MS = 60_000
# A new group with an early window_start completes its empty windows over several ticks.
MAX_PER_TICK = 200


def window_width_ms(group: GroupConfig) -> int:
    """Length of one replay window."""
    return HOUR_MS if group.replay_window == "hour" else DAY_MS


def first_window_ms(group: GroupConfig) -> int:
    """Start of the group's first window (its ``window_start``, UTC midnight)."""
    day = group.window_start
    return (day.toordinal() - 719_163) * DAY_MS


def complete_windows(
    state: GroupState, group: GroupConfig, cursor_ms: int | None, caught_up_at_ms: int | None
) -> list[int]:
    """Starts of the windows that became complete since the last report, oldest first.

    ``cursor_ms`` is the commit time of the planning cursor's snapshot; ``caught_up_at_ms`` is now,
    when every source snapshot is planned (else None).
    """
    width = window_width_ms(group)
    reached = [t - CLOSE_GRACE_MS for t in (cursor_ms, caught_up_at_ms) if t]
    if not reached:
        return []
    open_from = window_start_ms(max(reached), group.replay_window)
    waiting = [s.window_start_ms for s in state.shards.values()] + [t.window_start_ms for t in state.replays.values()]
    limit = min([open_from, *waiting])
    start = state.windows_complete_through_ms or first_window_ms(group)
    return list(range(start, limit, width))[:MAX_PER_TICK]
