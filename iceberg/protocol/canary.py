"""Canary transforms, the pure half: what a canary staged, how its output differs from main's, when it may be promoted.

``icegroup canary`` (``spark_jobs/canary.py``) stages a new transform's output for one window on the
sink and records it (``iceberg/store/canaries.py``); ``--promote`` publishes it only when the rules
here allow: the group names the canary's transform, and none of the window's shards waits.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, Field

from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.replay import check_window


@dataclass(frozen=True)
class ColumnStats:
    """One output column on main and in the canary: nulls, minimum and maximum."""

    column: str
    main_nulls: int
    canary_nulls: int
    main_min: Any
    canary_min: Any
    main_max: Any
    canary_max: Any


@dataclass
class CanaryDiff:
    """The canary's output against main's, for one window."""

    window: str
    transform: str
    main_rows: int
    canary_rows: int
    added: int
    removed: int
    changed: int | None
    key: str | None
    columns: list[ColumnStats] = field(default_factory=list)
    sample: list[dict[str, Any]] = field(default_factory=list)

    def line(self) -> str:
        """One line for a person."""
        changed = f", {self.changed} changed (by {self.key})" if self.changed is not None else ""
        return (
            f"window {self.window}: main {self.main_rows} rows, canary {self.canary_rows} rows: "
            f"{self.added} added, {self.removed} removed{changed}"
        )


class Canary(BaseModel):
    """What a canary staged, and from what."""

    window: str = Field(description="The window it remade.")
    transform: str = Field(description="The transform it ran, as module:function.")
    token: str = Field(description="The stage token of its staged output on the sink.")
    staged_snapshot: int = Field(description="The staged snapshot holding its output, on no branch.")
    sink_head: int | None = Field(description="The sink head the window was planned at.")
    covers: list[str] = Field(description="The shards whose output the window held then.")
    replay_fence: int = Field(description="The window's replay generation then: a replay since moves it.")
    at_ms: int = Field(description="When it was staged.")


def promotion_refusal(record: Canary, group: GroupConfig, pending_windows: Collection[int]) -> str | None:
    """Why the group's canary (``record``) cannot be promoted now, or None when it can.

    ``pending_windows`` are the window starts of the shards the registry still holds: output of
    such a window is not all committed, so a promotion now would replace a window still filling.
    """
    if record.transform != group.transform:
        return (
            f"canary: group {group.name!r} names transform {group.transform}; set `transform: {record.transform}` "
            "for it in its groups file first (with `on_change: continue`, as for a replay with a new transform), "
            "so that what it commits after the promotion is made the same way, then promote"
        )
    if check_window(group, record.window) in pending_windows:
        return (
            f"canary: window {record.window} of group {group.name!r} has shards not committed yet; promote it once "
            "they are (`icegroup describe` shows none pending), after a new canary"
        )
    return None
