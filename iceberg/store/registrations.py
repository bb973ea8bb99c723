"""Groups registered on their source table, so that expiry run from anywhere keeps what each one needs.

Each group's Leader keeps a table property on its source, ``icegroup.consumer.<group>``: the oldest
sequence number the group still reads from, its replay horizon, and when its Leader last ticked.
``icegroup expire`` in any code location or repository honours every registration that is still
active, as Paimon's consumer files and JetStream's durable consumers do. A registration whose
Leader has not ticked for the group's ``inactive_after`` lapses, so an abandoned group stops pinning
history.

A pin that is a little old only keeps more, never less, so the Leader rewrites the property at most
every ``REFRESH_MS``: the source sees one small metadata commit per group every few minutes, not one
per tick. A pin that moved back (a reset) is written at once.
"""

from __future__ import annotations

import logging

from pydantic import BaseModel, Field, ValidationError
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table import Table
from pyiceberg.table.update import SetPropertiesUpdate

from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.state import GroupState
from icegroup.iceberg.store.metadata_commit import commit_updates

log = logging.getLogger(__name__)

KEY_PREFIX = "icegroup.consumer."
REFRESH_MS = 300_000


class Registration(BaseModel):
    """One group's claim on its source's history."""

    group: str = Field(description="The consumer group.")
    sink: str = Field(description="Its sink, so people can tell which deployment a registration belongs to.")
    pin_sequence: int = Field(description="Keep snapshots from this sequence number on; 0 keeps every one.")
    replay_retention_ms: int = Field(description="Keep snapshots committed this recently, too.")
    inactive_after_ms: int = Field(description="The registration lapses when not refreshed for this long.")
    seen_ms: int = Field(description="When the group's Leader last refreshed it.")

    def active(self, now_ms: int) -> bool:
        """Whether the group's Leader ticked recently enough for the registration to pin history."""
        return now_ms - self.seen_ms <= self.inactive_after_ms


def registration_key(group: str) -> str:
    """The source table property holding ``group``'s registration."""
    return f"{KEY_PREFIX}{group}"


def group_pin(state: GroupState) -> int:
    """The oldest source sequence number the group still reads from: its low watermark (0: all of it)."""
    mark = state.low_watermark()
    return 0 if mark is None or mark[0] is None else mark[1]


def read_registrations(source: Table) -> dict[str, Registration]:
    """Every group registered on ``source``; a property that does not parse is skipped, with a warning."""
    found = {}
    for key, value in source.properties.items():
        if not key.startswith(KEY_PREFIX):
            continue
        try:
            found[key.removeprefix(KEY_PREFIX)] = Registration.model_validate_json(value)
        except ValidationError:
            log.warning("source %s: registration %s does not parse; ignored", ".".join(source.name()), key)
    return found


def register(source: Table, group: GroupConfig, state: GroupState, now_ms: int) -> bool:
    """Refresh the group's registration on its source when it is due; returns whether it wrote one.

    A write that loses to another commit on the source is left for the next tick.
    """
    current = read_registrations(source).get(group.name)
    pin = group_pin(state)
    fresh = Registration(
        group=group.name,
        sink=group.sink,
        pin_sequence=pin,
        replay_retention_ms=int(group.replay_retention.total_seconds() * 1000),
        inactive_after_ms=int(group.inactive_after.total_seconds() * 1000),
        seen_ms=now_ms,
    )
    if current is not None and not due(current, fresh):
        return False
    try:
        commit_updates(source, (SetPropertiesUpdate(updates={registration_key(group.name): fresh.model_dump_json()}),))
    except CommitFailedException as exc:
        log.info("group %s: registration on %s not refreshed this tick: %s", group.name, group.source, exc)
        return False
    except NotImplementedError as exc:  # pyiceberg writes no format-v3 metadata; a REST server writes its own
        log.warning("group %s: no registration on %s: %s", group.name, group.source, exc)
        return False
    return True


def due(current: Registration, fresh: Registration) -> bool:
    """Whether the registration must be written: it moved back, its settings changed, or it is getting old."""
    return (
        fresh.pin_sequence < current.pin_sequence
        or (fresh.replay_retention_ms, fresh.inactive_after_ms, fresh.sink)
        != (current.replay_retention_ms, current.inactive_after_ms, current.sink)
        or fresh.seen_ms - current.seen_ms >= REFRESH_MS
    )
