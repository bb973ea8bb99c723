"""The marker a reset leaves on the sink between its fence and its registry commit, and what a tick makes of it.

A reset (``iceberg/reset.py``) raises the sink's epoch fence together with a marker naming itself
and its holder. A tick, a rebuild or another reset that finds the marker asks here whether that
reset still runs (back off), died (stop, naming the command that completes it) or moved on (read
again). The reset verb and the tick both read the marker; neither reaches into the other for it.
"""

from __future__ import annotations

import time

from pyiceberg.catalog import Catalog
from pyiceberg.table import Table

from icegroup.iceberg.errors import ResetInFlight
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.reset import (
    Holder,
    ResetMarker,
    judge_holder,
    parse_marker,
    reset_in_flight,
    reset_interrupted,
    reset_moved,
)
from icegroup.iceberg.protocol.sink_commit import reset_key
from icegroup.iceberg.store.heartbeats import gone_holders, read_beats
from icegroup.iceberg.store.tables import load_optional


def marker_of(sink: Table | None, group: GroupConfig) -> ResetMarker | None:
    """The marker of the reset on the sink, with the holder that beats for it, if there is one."""
    return parse_marker(sink.properties.get(reset_key(group.name), "") if sink is not None else "")


def check_interrupted(
    catalog: Catalog, marker_text: str, group: GroupConfig, stored_epoch: int, now_ms: int | None = None
) -> None:
    """Stop a tick that finds a reset between its fence and its registry commit.

    ``ResetInFlight`` while the reset runs (the tick backs off: the reset is about to commit), and
    ``ResetInterrupted``, naming the command that completes it, once it died. Heartbeats are read
    only when there is such a marker, so a tick without one pays nothing.
    """
    marker = parse_marker(marker_text)
    if marker is None or marker.epoch <= stored_epoch:
        return
    in_flight = judge_reset(catalog, group, marker, now_ms)
    if in_flight is not None:
        raise in_flight
    raise reset_interrupted(group.name, marker)


def judge_reset(
    catalog: Catalog, group: GroupConfig, marker: ResetMarker, now_ms: int | None = None
) -> ResetInFlight | None:
    """The error to back off with while the reset that set ``marker`` still runs; None once it died.

    A holder with no heartbeat row stopped since the marker was read (``judge_holder``), so the
    marker is read again: left as it was, its reset died before it completed; cleared or rewritten,
    the reset completed or another run took it over meanwhile, and the caller's reads are stale.
    """
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    beats = read_beats(catalog, group.name)
    last = {h: b.beat_ms for h, b in beats.items()}
    verdict = judge_holder(marker, last, gone_holders(beats), now_ms, group.session_timeout_s)
    if verdict is Holder.ALIVE and marker.holder is not None:
        return reset_in_flight(group.name, marker, last[marker.holder], now_ms, group.session_timeout_s)
    if verdict is Holder.ENDED and marker_of(load_optional(catalog, group.sink), group) != marker:
        return reset_moved(group.name, marker)
    return None
