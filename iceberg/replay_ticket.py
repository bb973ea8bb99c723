"""A replay's ticket: the window's next generation, fenced on the sink and held in the registry.

``begin_replay`` takes the window's next generation: it raises the sink's replay fence, then
commits the ticket by the registry's compare-and-swap (``record_ticket``). While the ticket is held
the Leader grants no shards of the window, and a second replay of it fails naming the first. The
plan of what the replay covers is in ``replay.py``.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial

from pyiceberg.catalog import Catalog

from icegroup.iceberg.errors import LostRace, RegistryConflict, UsageError
from icegroup.iceberg.protocol.drift import check_config, check_drift
from icegroup.iceberg.protocol.fences import replay_fence_key
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.replay import check_window, take_ticket
from icegroup.iceberg.protocol.state import GroupState, ReplayTicket
from icegroup.iceberg.retry import again_while_losing
from icegroup.iceberg.store.fences import raise_fences
from icegroup.iceberg.store.heartbeats import read_beats
from icegroup.iceberg.store.registry import Loaded, commit_or_lose, commit_state, kept_moving, load_state
from icegroup.iceberg.store.tables import load_optional

RETRIES = 10
# Swaps of a ticket into a re-read registry, once its fence is raised (``record_ticket``).
TICKET_SWAPS = 5


def begin_replay(catalog: Catalog, group: GroupConfig, window: str, holder: str) -> ReplayTicket:
    """Take the window's next replay generation: fence on the sink first, then the ticket in the registry.

    The replay runs today's filter and transform. If they changed since the registry pinned them,
    that is refused under ``on_change: fail`` and recorded under ``continue``, as a Leader tick does.
    """
    start = check_window(group, window)

    def attempt() -> ReplayTicket:
        loaded = load_state(catalog, group.name)
        if loaded.state is None:
            raise UsageError(
                f"group {group.name!r} has no registry yet: it has consumed nothing, so there is nothing to replay"
            )
        check_drift(loaded.state, group)
        sink = load_optional(catalog, group.sink)
        head = sink.current_snapshot() if sink is not None else None
        now_ms = int(time.time() * 1000)
        state = check_config(loaded.state, group, now_ms, head.snapshot_id if head else None)
        key = replay_fence_key(group.name, window)
        fence = int(sink.properties.get(key, "0")) if sink is not None else 0
        beats = {h: b.beat_ms for h, b in read_beats(catalog, group.name).items()}
        ticket = take_ticket(state, window, start, holder, fence, beats, now_ms, group.session_timeout_s)
        if sink is not None and not raise_fences(sink, {key: ticket.generation}, strict=True):
            raise LostRace(f"another writer raised the replay fence of {window} as far as {ticket.generation} first")
        record_ticket(loaded, loaded.state, group, ticket, head.snapshot_id if head else None)
        return ticket

    gave_up = partial(kept_moving, group.name, RETRIES, "start a replay; it did not start: run it again")
    return again_while_losing(f"group {group.name}: starting a replay of {window}", attempt, RETRIES, 0.1, gave_up)


def record_ticket(
    loaded: Loaded, taken_from: GroupState, group: GroupConfig, ticket: ReplayTicket, sink_head: int | None
) -> None:
    """Put ``ticket`` in the registry read as ``loaded``, re-reading it while only other windows' state moved.

    The ticket was taken from ``taken_from`` (``loaded``'s state), then this start alone raised the
    sink's fence to it: a sink commit, long enough for busy Leaders to move the registry in between
    (under ``make chaos`` two Leaders won ten tries in a row when each try raised the fence again).
    A lost swap re-reads the registry. The ticket still holds while the group's epoch and the
    window's ticket in the registry are what it was taken from, and the sink's fence is still its
    generation (fences only rise, so a replay that began and ended meanwhile, or a Leader that
    expired one, has moved it): then it goes into the re-read state as it is, and only the
    registry's swap races the Leaders. Otherwise ``LostRace``: the caller takes a new ticket.
    """
    key = replay_fence_key(group.name, ticket.window)
    for swap in range(TICKET_SWAPS):
        current = loaded.state
        if current is not None and current.replays.get(ticket.window) == ticket:
            return  # a swap reported lost had landed after all (its answer was lost on the way)
        sink = load_optional(loaded.catalog, group.sink) if swap else None
        fence = int(sink.properties.get(key, "0")) if sink is not None else ticket.generation
        if (
            current is None
            or current.epoch != taken_from.epoch
            or current.replays.get(ticket.window) != taken_from.replays.get(ticket.window)
            or fence != ticket.generation
        ):
            raise LostRace(f"the replay of {ticket.window}, its fence or the epoch moved while the fence was raised")
        state = check_config(current, group, ticket.started_at_ms, sink_head).model_copy(deep=True)
        state.replays[ticket.window] = ticket
        try:
            commit_state(loaded, state)
            return
        except RegistryConflict:
            time.sleep(random.uniform(0.0, 0.05))
            loaded = load_state(loaded.catalog, group.name)
    raise LostRace(f"the registry moved under {TICKET_SWAPS} swaps of the ticket of {ticket.window}")


def end_replay(catalog: Catalog, group: GroupConfig, ticket: ReplayTicket) -> None:
    """Drop the ticket, so the Leader grants the window's shards again; a superseded ticket is left alone."""

    def attempt() -> None:
        loaded = load_state(catalog, group.name)
        held = loaded.state.replays.get(ticket.window) if loaded.state else None
        if loaded.state is None or held is None or held.generation != ticket.generation:
            return
        state = loaded.state.model_copy(deep=True)
        del state.replays[ticket.window]
        commit_or_lose(loaded, state)

    gave_up = partial(kept_moving, group.name, RETRIES, "end a replay")
    again_while_losing(f"group {group.name}: ending a replay of {ticket.window}", attempt, RETRIES, 0.1, gave_up)


@contextmanager
def replay_ticket(catalog: Catalog, group: GroupConfig, window: str, holder: str) -> Iterator[ReplayTicket]:
    """Hold the window's replay ticket while the block runs; it is given back however the block ends."""
    ticket = begin_replay(catalog, group, window, holder)
    try:
        yield ticket
    finally:
        end_replay(catalog, group, ticket)
