"""Cascades, the pure half: what a downstream group does about a replay of its source.

A group's sink can be another group's source (chained groups). A replay of an upstream window is an
``overwrite`` of that sink: it deletes the rows the upstream commits of the window added and adds
their new version, each row still tagged with its upstream shard id (``_ig_shard``). The downstream
group has consumed the old version. *Following* the replay makes it consistent again: the
downstream windows whose shards read those upstream commits are replayed, and a downstream replay
reads the replaced commits' rows in their new version (``iceberg/replays.py``). The followed replay
is recorded on the downstream sink, and the downstream Leader then steps over it; an upstream
replay nobody followed stops the downstream Leader, naming ``icegroup replay GROUP --follow-upstream``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from iceberg.protocol.lineage import ReplayCommit, ShardRange, SinkCommit


def replaced_commits(replay: ReplayCommit, upstream: Iterable[SinkCommit]) -> dict[int, tuple[str, ...]]:
    """The upstream commits whose rows ``replay`` replaced: sink snapshot -> the shard ids it committed."""
    covered = {shard.shard_id for shard in replay.covers}
    return {
        commit.snapshot_id: tuple(s.shard_id for s in commit.shards)
        for commit in upstream
        if commit.group == replay.group and any(s.shard_id in covered for s in commit.shards)
    }


def superseding(replays: Iterable[ReplayCommit], upstream: Iterable[SinkCommit]) -> dict[int, int]:
    """Each replaced upstream commit -> the replay commit that holds its rows now (the newest one covering it).

    A replay deletes its whole window and writes it again, so the newest replay of a window holds the
    current rows of every commit it covers.
    """
    commits = list(upstream)
    holder: dict[int, int] = {}
    for replay in sorted(replays, key=lambda r: r.timestamp_ms):
        for snapshot in replaced_commits(replay, commits):
            holder[snapshot] = replay.snapshot_id
    return holder


@dataclass(frozen=True)
class FollowPlan:
    """What following one upstream replay takes for one downstream group."""

    replay: ReplayCommit
    windows: list[str] = field(default_factory=list)
    unconsumed: list[int] = field(default_factory=list)
    reached: bool = True

    @property
    def ready(self) -> bool:
        """The downstream group consumed every replaced commit it will consume: it can follow now."""
        return self.reached and not self.unconsumed


def plan_follow(
    replay: ReplayCommit,
    replay_parent_sequence: int,
    replaced: Mapping[int, int],
    committed: Iterable[ShardRange],
    pending: Iterable[Iterable[int]],
    planned_through_sequence: int,
    label: Callable[[int], str],
) -> FollowPlan:
    """Which downstream windows consumed the replaced rows, or why the group cannot follow yet.

    ``replaced`` maps each replaced upstream commit to its sequence number; ``committed`` are the
    downstream group's committed shards (its resets' voided ones left out) and ``pending`` the source
    snapshots of the shards it cut but did not commit; ``label`` names the window that starts at a time.
    A replaced commit the downstream group cut but did not commit, or has not planned yet, would be
    consumed later in its old version, so the group follows only once its planning reached the replay
    and those commits are committed.
    A replaced commit planned but in no shard was never consumed (before the group's start).
    """
    hit = [s for s in committed if s.window_start_ms is not None and set(s.snapshots) & set(replaced)]
    windows = sorted({label(s.window_start_ms) for s in hit if s.window_start_ms is not None})
    waiting = {snap for snapshots in pending for snap in snapshots}
    unconsumed = sorted(snap for snap, seq in replaced.items() if seq > planned_through_sequence or snap in waiting)
    reached = planned_through_sequence >= replay_parent_sequence
    return FollowPlan(replay=replay, windows=windows, unconsumed=unconsumed, reached=reached)
