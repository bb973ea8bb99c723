"""Where a group stands, as ``icegroup describe``, the Leader's lag check and ``metrics`` all say it.

Pure: the registry's counts for a view (``counts_of``), the one-line status with what moves the
group on (``status_of``), and where a stream the registry does not hold stands.
"""

from __future__ import annotations

from typing import TypedDict

from icegroup.iceberg.errors import SourceBlocked
from icegroup.iceberg.protocol.dead_letters import PARKED, STOPPED, DeadLetter
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.state import GroupState, LeasePhase


class Counts(TypedDict):
    """What a view shows of the registry itself: names, epoch, cursor and counts."""

    group: str
    source: str
    sink: str
    epoch: int
    planned_through: int | None
    pending_shards: int
    leases_in_flight: int
    leases_done: int
    retired_streams: int
    retired_rows: int
    leases_parked: int


def counts_of(group: GroupConfig, state: GroupState) -> Counts:
    """The registry's part of a view, now or as it was; both views are built on it."""
    return Counts(
        group=group.name,
        source=group.source,
        sink=group.sink,
        epoch=state.epoch,
        planned_through=state.planned_through,
        pending_shards=len(state.shards),
        leases_in_flight=sum(1 for lease in state.leases.values() if lease.phase is not LeasePhase.PARKED),
        leases_parked=sum(1 for lease in state.leases.values() if lease.phase is LeasePhase.PARKED),
        leases_done=state.leases_done,
        retired_streams=state.retired.streams,
        retired_rows=state.retired.rows,
    )


def status_of(
    state: GroupState,
    letters: dict[str, DeadLetter],
    lag_snapshots: int,
    blocked: SourceBlocked | None = None,
    appends_ahead: bool = False,
) -> str:
    """Where the group stands: stopped, paused, parked, consuming, lagging or caught up, with what moves it on.

    ``blocked`` is the source snapshot planning stops at (an upstream replay, say): with nothing
    before it left to run (no lease, no shard, no append to plan: ``appends_ahead``) the group is
    stopped there, else it is heading for that stop; its lag still counts the appends past it,
    which it has not consumed.
    """
    actions = {letter.action for sid, letter in letters.items() if sid in state.shards}
    if STOPPED in actions:
        return "stopped (poison shard; see icegroup dead-letters)"
    if state.paused_at_ms is not None:
        flight = f"; {len(state.leases)} leases in flight finish" if state.leases else ""
        return f"paused (icegroup resume {state.group} continues it){flight}"
    if PARKED in actions:
        return "parked (poison shard; the other streams go on)"
    if state.leases:
        now = "consuming"
    elif blocked is not None and not state.shards and not appends_ahead:
        return blocked.status()
    else:
        now = "lagging" if lag_snapshots else "caught up"
    if blocked is None:
        return now
    return f"{now}; {blocked.ahead()}"


def unknown_stream_position(state: GroupState) -> int | None:
    """Where a stream the registry does not hold stands: through the planning cursor.

    Such a stream is new (it had no files before the cursor) or was retired (everything of it up to
    the cursor is committed); either way its next shard is cut from there. Before any planning, the
    group's start.
    """
    return state.planned_through if state.planned_through is not None else state.start_position
