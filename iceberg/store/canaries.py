"""A group's canary on its sink: the staged output of a new transform for one window, waiting for a verdict.

``icegroup canary`` stages a new transform's output for a window on the sink (Iceberg's
write-audit-publish: a staged snapshot that main never shows) and records it here, as a sink
property, so that ``--promote`` later publishes exactly that output. The record names the window,
the transform, the stage token and the sink head the window was planned at: a promote refuses when
output of the window was committed after it. One canary per group; a new one replaces the last.
"""

from __future__ import annotations

from pydantic import BaseModel, Field
from pyiceberg.table import Table

KEY_PREFIX = "icegroup.canary."


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


def canary_key(group: str) -> str:
    """The sink property holding ``group``'s canary."""
    return f"{KEY_PREFIX}{group}"


def save_canary(sink: Table, group: str, canary: Canary) -> None:
    """Record the canary on the sink: a property change, no snapshot."""
    with sink.transaction() as tx:
        tx.set_properties({canary_key(group): canary.model_dump_json()})


def load_canary(sink: Table, group: str) -> Canary | None:
    """The group's canary, if one waits."""
    raw = sink.properties.get(canary_key(group))
    return Canary.model_validate_json(raw) if raw else None


def drop_canary(sink: Table, group: str, token: str) -> None:
    """Forget the group's canary once promoted, unless a newer one (another token) replaced it meanwhile."""
    now = load_canary(sink, group)
    if now is not None and now.token == token:
        sink.transaction().remove_properties(canary_key(group)).commit_transaction()
