"""A group's canary on its sink: the staged output of a new transform for one window, waiting for a verdict.

``icegroup canary`` stages a new transform's output for a window on the sink (Iceberg's
write-audit-publish: a staged snapshot that main never shows) and records it here, as a sink
property, so that ``--promote`` later publishes exactly that output. The record names the window,
the transform, the stage token and the sink head the window was planned at: a promote refuses when
output of the window was committed after it. One canary per group; a new one replaces the last.
"""

from __future__ import annotations

from pyiceberg.catalog import Catalog
from pyiceberg.table import Table

from icegroup.iceberg.errors import UsageError
from icegroup.iceberg.protocol.canary import Canary, promotion_refusal
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.store.registry import load_state

KEY_PREFIX = "icegroup.canary."


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


def promotable(catalog: Catalog, sink: Table, group: GroupConfig) -> Canary:
    """The group's canary, if it can be promoted now; else the ``UsageError`` that says why not.

    A promotion's preview and its execution ask the same questions (``promotion_refusal``), so the
    preview never promises what the execution then refuses.
    """
    record = load_canary(sink, group.name)
    if record is None:
        raise UsageError(f"canary: group {group.name!r} has no canary to promote; run `icegroup canary` first")
    state = load_state(catalog, group.name).state
    pending = {shard.window_start_ms for shard in state.shards.values()} if state is not None else set()
    refusal = promotion_refusal(record, group, pending)
    if refusal is not None:
        raise UsageError(refusal)
    return record
