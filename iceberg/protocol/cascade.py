"""Cascades, the pure half: what a downstream group does about a replay of its source.

A group's sink can be another group's source (chained groups). A replay of an upstream window is an
``overwrite`` of that sink: it deletes the rows the upstream commits of the window added and adds
their new version, each row still tagged with its upstream shard id (``_ig_shard``). The downstream
group has consumed the old version. *Following* the replay makes it consistent again: the
downstream windows whose shards read those upstream commits are replayed, and a downstream replay
reads the replaced commits' rows in their new version (``iceberg/replay.py``). The followed replay
is recorded on the downstream sink, and the downstream Leader then steps over it; an upstream
replay nobody followed stops the downstream Leader, naming ``icegroup replay GROUP --follow-upstream``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from icegroup.iceberg.protocol.sink_commit import COL_WINDOW, ReplayCommit, ShardRange, SinkCommit


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
    """What following one upstream replay takes for one downstream group, or what stands in the way."""

    replay: ReplayCommit
    windows: list[str] = field(default_factory=list)
    unconsumed: list[int] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)

    @property
    def ready(self) -> bool:
        """The downstream group consumed every replaced commit it will consume, and each is known."""
        return not self.unconsumed and not self.missing


def plan_follow(
    replay: ReplayCommit,
    upstream: Iterable[SinkCommit],
    sequence: Mapping[int, int],
    committed: Iterable[ShardRange],
    pending: Iterable[Iterable[int]],
    planned_through_sequence: int,
    label: Callable[[int], str],
) -> FollowPlan:
    """Which downstream windows consumed the rows ``replay`` replaced, or why the group cannot follow yet.

    ``upstream`` are the commits in the upstream sink's history and ``sequence`` their sequence
    numbers; ``committed`` are the downstream group's committed shards (those its resets voided left
    out, those its replays cover added) and ``pending`` the source snapshots of the shards it cut
    but did not commit; ``label`` names the window that starts at a time.
    A replaced commit the downstream group cut but did not commit, or has not planned yet, would be
    consumed later in its old version, so the group waits until those are committed. A replaced
    commit planned but in no shard was never consumed (before the group's start). A covered upstream
    shard whose commit is gone from the history (expired) while the group consumed snapshots of the
    window that are gone too, or a downstream shard without a window (a sink not migrated), cannot be
    followed exactly; those are listed as missing.
    """
    committed = list(committed)
    replaced = replaced_commits(replay, upstream)
    known = {shard_id for ids in replaced.values() for shard_id in ids}
    unknown = sorted({s.shard_id for s in replay.covers} - known)
    missing = []
    # An expired upstream commit matters only if this group consumed it: a committed shard of the
    # replayed window (or of a sink not partitioned by window) reading a snapshot gone from the history.
    gone = [
        s
        for s in committed
        if any(snap not in sequence for snap in s.snapshots)
        and (f"{COL_WINDOW}={replay.window}" in s.stream or f"{COL_WINDOW}=" not in s.stream)
    ]
    if unknown and gone:
        missing.append(
            f"{len(unknown)} upstream shards the replay covers (first {unknown[0]}) have no commit left in the "
            f"upstream sink's history (expired snapshots), and this group consumed snapshots of that window that "
            "are gone too, so which of its rows they made cannot be told. Set non_append: skip to keep this "
            "group's old version of them, or reset this group past the replay"
        )
    hit = [s for s in committed if set(s.snapshots) & set(replaced)]
    if any(s.window_start_ms is None for s in hit):
        missing.append(
            "rows of this group's sink that read them have no window yet: run `icegroup migrate --execute` first"
        )
    windows = sorted({label(s.window_start_ms) for s in hit if s.window_start_ms is not None})
    waiting = {snap for snapshots in pending for snap in snapshots}
    unconsumed = sorted(
        snap for snap in replaced if sequence.get(snap, 0) > planned_through_sequence or snap in waiting
    )
    return FollowPlan(replay=replay, windows=windows, unconsumed=unconsumed, missing=missing)
