"""Replays, the pure half: which windows may be replayed, what a window's replay covers, who holds it.

A replay re-runs the current transform and filter over exactly the source ranges a group committed
in one window, and replaces the window's output in one sink commit. What it covers comes from the
sink's commits: the shards committed in the window, and what an earlier replay of it covered. Each
replay of a window takes the next *generation*, a ticket in the registry and a fence on the sink, so
a superseded or zombie replay cannot commit (``spark_jobs/sink/jvm/.../WindowReplace.java``).
"""

from __future__ import annotations

import time
from collections.abc import Collection, Iterable, Mapping
from datetime import UTC, datetime

from icegroup.iceberg.errors import ReplayConflict, UsageError
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.shards import parse_window_label, window_label, window_start_ms
from icegroup.iceberg.protocol.sink_commit import ReplayCommit, ResetRecord, ShardRange, SinkCommit
from icegroup.iceberg.protocol.state import GroupState, ReplayTicket


def check_window(group: GroupConfig, window: str, now_ms: int | None = None) -> int:
    """The start (ms) of the window a partition key names; ``UsageError`` for one no replay can serve."""
    try:
        start = parse_window_label(window, group.replay_window)
    except ValueError as exc:
        raise UsageError(f"group {group.name!r}: window {exc}") from None
    first = int(datetime(*group.window_start.timetuple()[:3], tzinfo=UTC).timestamp() * 1000)
    if start < first:
        raise UsageError(
            f"group {group.name!r}: window {window} is before window_start ({group.window_start}); the group's "
            "partitions begin there, so move window_start back in the group config to replay it"
        )
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    current = window_start_ms(now_ms, group.replay_window)
    if start > current:
        raise UsageError(
            f"group {group.name!r}: window {window} has not begun yet (the current window is "
            f"{window_label(current, group.replay_window)}); nothing in it can have been consumed"
        )
    return start


def windows_between(group: GroupConfig, from_ms: int, to_ms: int) -> list[str]:
    """Every window that overlaps [from, to), oldest first: what ``replay --from --to`` replays."""
    width = 3_600_000 if group.replay_window == "hour" else 86_400_000
    start = window_start_ms(from_ms, group.replay_window)
    return [window_label(ms, group.replay_window) for ms in range(start, max(to_ms, start + 1), width)]


def window_coverage(
    window_start: int,
    window: str,
    commits: Iterable[SinkCommit],
    replays: Iterable[ReplayCommit],
    resets: Iterable[ResetRecord] = (),
) -> list[ShardRange]:
    """The shard ranges committed in a window: its shards' commits and what earlier replays of it covered.

    Both may name the same shard; it is covered once. A shard whose output a later reset deleted
    (the range was consumed again, under a new shard id) is not covered. Sorted by stream order.
    """
    voiding = list(resets)
    covered: dict[str, ShardRange] = {}
    found = [(r.epoch, s) for r in replays if r.window == window for s in r.covers]
    found += [(c.epoch, s) for c in commits for s in c.shards if s.window_start_ms == window_start]
    for epoch, shard in found:
        if not any(reset.voids(epoch, shard) for reset in voiding):
            covered.setdefault(shard.shard_id, shard)
    return sorted(covered.values(), key=lambda s: (s.to_sequence or 0, s.stream, s.shard_id))


def holder_alive(
    ticket: ReplayTicket, beats: Mapping[str, int], now_ms: int, session_timeout_s: int, gone: Collection[str] = ()
) -> bool:
    """A replay is alive while its holder beats and its process runs; one not beating yet gets a session timeout."""
    if ticket.holder in gone:
        return False
    last = beats.get(ticket.holder, ticket.started_at_ms)
    return now_ms - last <= session_timeout_s * 1000


def take_ticket(
    state: GroupState,
    window: str,
    window_start: int,
    holder: str,
    fence: int,
    beats: Mapping[str, int],
    now_ms: int,
    session_timeout_s: int,
) -> ReplayTicket:
    """The next generation's ticket for ``window``; ``ReplayConflict`` while a live replay holds it.

    ``fence`` is the sink's replay fence of the window: the generation of the last replay that
    began. A dead holder's ticket is superseded: the new generation fences it out at commit.
    """
    held = state.replays.get(window)
    if held is not None and holder_alive(held, beats, now_ms, session_timeout_s):
        started = datetime.fromtimestamp(held.started_at_ms / 1000, tz=UTC).isoformat(timespec="seconds")
        raise ReplayConflict(
            f"group {state.group!r}: window {window} is being replayed by {held.holder} (generation "
            f"{held.generation}, since {started}); this replay did not start. Wait for that one to finish "
            "(`icegroup describe` lists replays in flight), then replay again if you still need to"
        )
    generation = max(fence, held.generation if held else 0) + 1
    return ReplayTicket(
        window=window,
        window_start_ms=window_start,
        generation=generation,
        epoch=state.epoch,
        holder=holder,
        started_at_ms=now_ms,
    )


def expire_replays(
    state: GroupState, beats: Mapping[str, int], now_ms: int, session_timeout_s: int, gone: Collection[str] = ()
) -> tuple[GroupState, list[ReplayTicket]]:
    """Drop the tickets of replays whose holder died, so their windows are granted again.

    The caller raises each dropped window's replay fence above the dead generation before it
    commits the state, so the dead replay cannot commit if it was only slow.
    """
    dead = [t for t in state.replays.values() if not holder_alive(t, beats, now_ms, session_timeout_s, gone)]
    if not dead:
        return state, []
    new = state.model_copy(deep=True)
    for ticket in dead:
        del new.replays[ticket.window]
    return new, dead
