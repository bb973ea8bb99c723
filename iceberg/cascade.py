"""Cascades, the catalog half: the upstream replays a chained group has to follow, and the record of those it did.

``plan_follows`` finds the replay commits on a group's source (another group's sink) that the group
has not followed, and for each the downstream windows that consumed the rows it replaced
(``iceberg/protocol/cascade.py``). Replaying those windows reads the replaced rows in their new
version (``iceberg/replay.py``); ``record_follows`` then lists the replays on the group's sink, and
its Leader steps over them. The record lives on the sink, like fences and reset records, so a
registry rebuilt from the sink keeps it.
"""

from __future__ import annotations

from collections.abc import Mapping

from pyiceberg.catalog import Catalog
from pyiceberg.table import Table

from icegroup.iceberg.errors import UsageError
from icegroup.iceberg.protocol.cascade import FollowPlan, plan_follow, replaced_commits
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.shards import window_label
from icegroup.iceberg.protocol.sink_commit import follows_key, parse_resets, resets_key
from icegroup.iceberg.store.fences import add_to_list_property
from icegroup.iceberg.store.registry import load_state
from icegroup.iceberg.store.sink_history import sink_history
from icegroup.iceberg.store.tables import load_optional, load_source


def downstream_of(groups: Mapping[str, GroupConfig], group: GroupConfig) -> list[GroupConfig]:
    """The groups that consume ``group``'s sink, by name."""
    return sorted((g for g in groups.values() if g.source == group.sink), key=lambda g: g.name)


def followed(sink: Table | None, group: str) -> frozenset[int]:
    """The upstream replay snapshots the group's output follows, as its sink records them."""
    text = sink.properties.get(follows_key(group), "") if sink is not None else ""
    return frozenset(int(v) for v in text.split(",") if v)


def plan_follows(catalog: Catalog, group: GroupConfig) -> list[FollowPlan]:
    """Every replay of the group's source it has not followed, oldest first, with what following it takes.

    A group that has consumed nothing has nothing to follow, and a replay before the group's start
    replaced nothing it consumed.
    """
    state = load_state(catalog, group.name).state
    if state is None:
        return []
    source = load_source(catalog, group.source)
    sink = load_optional(catalog, group.sink)
    done = followed(sink, group.name)
    upstream_commits, upstream_replays = sink_history(source, None)
    open_replays = sorted((r for r in upstream_replays if r.snapshot_id not in done), key=lambda r: r.timestamp_ms)
    if not open_replays:
        return []
    sequence = {s.snapshot_id: s.sequence_number or 0 for s in source.snapshots()}
    start = sequence.get(state.start_position, 0) if state.start_position is not None else 0
    commits, replays = sink_history(sink, group.name) if sink is not None else ([], [])
    resets = parse_resets(sink.properties.get(resets_key(group.name), "")) if sink is not None else []
    committed = [s for c in commits for s in c.shards if not any(r.voids(c.epoch, s) for r in resets)]
    # A replay of this group covers shards whose own commits may have expired from its sink's history.
    committed += [s for r in replays for s in r.covers if not any(x.voids(r.epoch, s) for x in resets)]
    # The registry may lag the sink: a shard it still holds as cut may be committed already.
    done_ids = {s.shard_id for c in commits for s in c.shards}
    pending = [shard.snapshots for shard in state.shards.values() if shard.shard_id not in done_ids]
    return [
        plan_follow(
            replay,
            upstream_commits,
            sequence,
            committed,
            pending,
            state.planned_through_sequence,
            lambda ms: window_label(ms, group.replay_window),
        )
        for replay in open_replays
        if sequence.get(replay.snapshot_id, 0) > start
    ]


def record_follows(catalog: Catalog, group: GroupConfig, replays: set[int]) -> None:
    """List ``replays`` as followed on the group's sink: its windows were replayed from their new rows."""
    if not replays:
        return
    sink = load_optional(catalog, group.sink)
    if sink is None:
        raise UsageError(
            f"group {group.name!r} has no sink {group.sink!r} yet, so there is nowhere to record that it follows "
            "upstream replays; let it consume first, or set non_append: skip"
        )
    add_to_list_property(sink, follows_key(group.name), replays)


def follows_after_reset(source: Table, sink: Table, group: str, planned_through_sequence: int) -> dict[str, str]:
    """The follow record a reset leaves on the sink: replays whose replaced commits it consumes again are dropped.

    A group moved back before an upstream replay's replaced commits consumes them again, in their old
    version, so it has to stop at that replay and follow it again.
    """
    key = follows_key(group)
    if key not in sink.properties:
        return {}
    sequence = {s.snapshot_id: s.sequence_number or 0 for s in source.snapshots()}
    commits, replays = sink_history(source, None)
    done = followed(sink, group)
    again = {
        r.snapshot_id
        for r in replays
        if r.snapshot_id in done
        and any(sequence.get(s, 0) > planned_through_sequence for s in replaced_commits(r, commits))
    }
    return {key: ",".join(str(r) for r in sorted(done - again))}
