"""Bringing a group's registry into agreement with its sink, and rebuilding it from the sink when it is not.

The pure half (what is behind, what the commits say the state is) is ``protocol/rebuild.py``; this
module does the reads and the one write that must come first, the sink's epoch fence. A tick calls
``sync_tables`` before it reconciles; ``describe`` calls it without the fence, to show what a
tick would see; ``icegroup rebuild`` calls ``rebuild_registry``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from pyiceberg.catalog import Catalog
from pyiceberg.table import Table

from icegroup.iceberg.errors import RegistryConflict, SinkError, UsageError
from icegroup.iceberg.protocol.drift import check_drift
from icegroup.iceberg.protocol.fences import epoch_key
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.rebuild import rebuild_state, registry_behind
from icegroup.iceberg.protocol.sink_commit import COL_SHARD, parse_resets, shard_texts
from icegroup.iceberg.protocol.state import GroupState
from icegroup.iceberg.start import initial_state
from icegroup.iceberg.store.fences import raise_fences
from icegroup.iceberg.store.group_tables import GroupTables
from icegroup.iceberg.store.registry import commit_state, load_state
from icegroup.iceberg.store.reset_marker import check_interrupted
from icegroup.iceberg.store.sink_history import SinkHistory, history_of, other_groups_shards, read_sink_history
from icegroup.iceberg.store.tables import load_optional, load_source

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Synced:
    """A registry state brought into agreement with the sink, before the sink's new commits are applied.

    ``state`` is the stored state, or the state rebuilt from the sink when the stored one is missing
    or behind (``rebuilt`` says why); ``history`` holds the commits still to apply.
    """

    state: GroupState
    history: SinkHistory
    rebuilt: str | None = None


def sync_tables(tables: GroupTables, fence: bool = True, now_ms: int | None = None) -> Synced:
    """Check the registry against the sink's commits since its cursor; rebuild it if it is missing or behind.

    A tick rebuilds with ``fence``: the sink's epoch fence goes up first (see ``rebuild``). Without
    it the rebuilt state is only shown (``describe``), and nothing is written. A sink whose epoch a
    reset raised without committing the registry is not rebuilt from: while the reset runs,
    ``ResetInFlight`` backs off (its holder beats, as of ``now_ms``); once it died,
    ``ResetInterrupted`` names the command that completes it.
    """
    catalog, group, source, loaded = tables.catalog, tables.group, tables.source, tables.registry
    stored = loaded.state
    history = history_of(tables.sink, group.name, stored.sink_cursor if stored else None)
    check_interrupted(catalog, history.reset_marker, group, stored.epoch if stored else 0, now_ms)
    reason = disagreement(stored, history)
    if reason is None:
        return Synced(state=stored or initial_state(source, group, epoch=history.epoch), history=history)
    if fence and load_state(catalog, group.name).token != loaded.token:
        raise RegistryConflict(
            f"registry of group {group.name!r} moved while this Leader compared it with the sink; another Leader "
            "committed first"
        )
    epoch = max(stored.epoch if stored else 0, history.epoch) + 1
    rebuilt = rebuild(catalog, group, source, stored, epoch, reason, fence=fence)
    return Synced(
        state=rebuilt, history=SinkHistory(head=rebuilt.sink_cursor, commits=[], epoch=rebuilt.epoch), rebuilt=reason
    )


def disagreement(stored: GroupState | None, history: SinkHistory) -> str | None:
    """Why the stored registry cannot go on from the sink's commits since its cursor, or None."""
    if stored is not None:
        return registry_behind(stored, history.commits, history.epoch)
    if history.commits:
        return f"the registry is missing, and the sink holds {len(history.commits)} commits of the group"
    return None


def rebuild(
    catalog: Catalog,
    group: GroupConfig,
    source: Table,
    stored: GroupState | None,
    epoch: int,
    reason: str,
    fence: bool,
) -> GroupState:
    """The group's state rebuilt from every commit of it in the sink, in ``epoch``.

    With ``fence``, the sink's epoch fence is raised to ``epoch`` *before* the history is read. A
    lease of an older epoch can then no longer commit, so no commit lands that the rebuild did not
    see, and none of the ranges it re-cuts can be committed twice. If another Leader raised the
    fence that far already, it is rebuilding too, and this one backs off. A pause carries over, and so
    does the source table's UUID: the commits name that table's snapshots.
    """
    sink = load_optional(catalog, group.sink)
    if sink is None:
        raise UsageError(f"group {group.name!r}: the sink {group.sink!r} does not exist; there is nothing to rebuild")
    if fence and not raise_fences(sink, {epoch_key(group.name): epoch}):
        raise RegistryConflict(
            f"group {group.name!r}: the sink's epoch fence is at {epoch} already: another Leader is rebuilding the "
            "registry; another Leader committed first"
        )
    history = read_sink_history(catalog, group.sink, group.name, None)
    if not history.commits:
        raise UsageError(
            f"group {group.name!r}: the sink {group.sink!r} holds no commits of the group, so there is nothing to "
            "rebuild the registry from; without a registry, the group's next tick starts it from its `start`"
        )
    check_history_complete(catalog, group, history)
    above = [c for c in history.commits if c.epoch >= epoch]
    if above:
        raise SinkError(
            f"group {group.name!r}: sink snapshot {above[0].snapshot_id} was committed in epoch {above[0].epoch}, "
            f"not below the epoch fence {epoch} a rebuild would start; the sink's epoch property was lowered by "
            "hand? Restore it, then rebuild"
        )
    sequences = {s.snapshot_id: s.sequence_number or 0 for s in source.snapshots()}
    state = rebuild_state(group, history.commits, sequences, history.head, epoch, parse_resets(history.resets))
    state.paused_at_ms = stored.paused_at_ms if stored is not None else None
    state.source_uuid = stored.source_uuid if stored is not None else None  # the table its positions are in
    log.info(
        "group %s: registry rebuilt from %d sink commits (%s); epoch %d, streams at %s",
        group.name, len(history.commits), reason, state.epoch,
        ", ".join(f"{name}@{s.position}" for name, s in sorted(state.streams.items())),
    )  # fmt: skip
    return state


@dataclass(frozen=True)
class RegistryRebuild:
    """What ``icegroup rebuild`` found: the stored state, the one rebuilt from the sink, and how they disagree."""

    stored: GroupState | None
    rebuilt: GroupState
    disagreement: str | None
    committed: bool


def rebuild_registry(catalog: Catalog, group: GroupConfig, execute: bool) -> RegistryRebuild:
    """Rebuild a group's registry from the sink; with ``execute``, raise the epoch fence and commit it.

    A tick does this by itself when the registry is missing or behind the sink. The command is for
    an operator who wants to see the sink's view first, or to replace a registry that is wrong in a
    way the sink does not show (say, edited by hand).
    """
    loaded = load_state(catalog, group.name)
    if loaded.state is not None:
        check_drift(loaded.state, group)
    source = load_source(catalog, group.source)
    stored = loaded.state
    history = read_sink_history(catalog, group.sink, group.name, stored.sink_cursor if stored else None)
    found = disagreement(stored, history)
    epoch = max(stored.epoch if stored else 0, history.epoch) + 1
    rebuilt = rebuild(catalog, group, source, stored, epoch, found or "asked for by icegroup rebuild", fence=execute)
    if execute:
        commit_state(loaded, rebuilt)
    return RegistryRebuild(stored=stored, rebuilt=rebuilt, disagreement=found, committed=execute)


def check_history_complete(catalog: Catalog, group: GroupConfig, history: SinkHistory) -> None:
    """Every shard whose rows are in the sink must have its commit in the sink's history.

    A history cut short (sink snapshots expired) would rebuild positions that are too old, and the
    group would consume again what the sink already holds; the rows' lineage column tells.
    """
    sink = load_optional(catalog, group.sink)
    if sink is None or history.head is None:
        return
    rows = sink.scan(selected_fields=(COL_SHARD,), snapshot_id=history.head).to_arrow()
    held = {shard_id for shard_id in shard_texts(rows.column(COL_SHARD).to_pylist()) if shard_id is not None}
    missing = held - history.shard_ids() - other_groups_shards(sink, group.name)
    if missing:
        raise SinkError(
            f"group {group.name!r}: cannot rebuild the registry from {group.sink!r}: it holds rows of {len(missing)} "
            f"shards (e.g. {sorted(missing)[0]}) whose commits are no longer in its history (expired sink "
            "snapshots), so positions rebuilt from what is left would consume them again. Restore the registry "
            "from a backup, or consume into a new sink under a new group name"
        )
