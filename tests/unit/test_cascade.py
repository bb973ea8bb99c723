"""Following an upstream replay: which commits it replaced, which downstream windows consumed them, and when.

The planner half runs against a real pyiceberg table: a chained group plans the appends before an
upstream replay, stops at the replay naming the remedy, and steps over it once it is followed. A
chained group's source is a sink whose sequence numbers have gaps, which a reset must not read as
expired history.
"""

from __future__ import annotations

import re

import pytest
from pyiceberg.catalog import Catalog

from icegroup.iceberg.errors import SourceBlocked, SourceError, UsageError
from icegroup.iceberg.leader import tick
from icegroup.iceberg.protocol.cascade import plan_follow, replaced_commits, superseding
from icegroup.iceberg.protocol.liveness import RunState
from icegroup.iceberg.protocol.reset import StreamMove
from icegroup.iceberg.protocol.shards import SnapshotInfo
from icegroup.iceberg.protocol.sink_commit import KEY_GROUP, KEY_REPLAY, ReplayCommit, ShardRange, SinkCommit
from icegroup.iceberg.reset_targets import check_reachable
from icegroup.iceberg.shards import plan_increment
from tests.factories import MakeGroup, append_batches, create_source
from tests.sink_commits import commit_lease

DAY_1, DAY_2 = 1_000, 2_000


def label(ms: int) -> str:
    """Window labels of the two test windows."""
    return {DAY_1: "day-1", DAY_2: "day-2"}[ms]


def upstream_commit(snapshot: int, shard_id: str) -> SinkCommit:
    """An upstream group's commit of one shard, at upstream sink snapshot ``snapshot``."""
    shard = ShardRange(shard_id, "0/region=eu", None, 1, (1,), 1, 10, DAY_1)
    return SinkCommit(snapshot, snapshot, "up", "events", "lease", 0, 0, (shard,), 10)


def replay(snapshot: int, *shard_ids: str, at: int = 0) -> ReplayCommit:
    """An upstream replay commit covering these upstream shards."""
    covers = tuple(ShardRange(i, "0/region=eu", None, 1, (1,), 1, 10, DAY_1) for i in shard_ids)
    return ReplayCommit(snapshot, at, "up", "day-1", 1, 0, covers, 20, 20)


def downstream(n: int, snapshots: tuple[int, ...], window: int) -> ShardRange:
    """A downstream shard over these upstream sink snapshots."""
    return ShardRange(f"d{n}", "1/_ig_window=day-1", None, snapshots[-1], snapshots, snapshots[-1], 10, window)


def test_a_replay_replaced_the_upstream_commits_of_the_shards_it_covers() -> None:
    commits = [upstream_commit(11, "a"), upstream_commit(12, "b"), upstream_commit(13, "c")]

    assert replaced_commits(replay(20, "a", "c"), commits) == {11: ("a",), 13: ("c",)}
    other = SinkCommit(14, 14, "someone-else", "events", "lease", 0, 0, commits[0].shards, 10)
    assert replaced_commits(replay(20, "a"), [other]) == {}, "only the replaying group's own commits"


def test_the_newest_replay_of_a_commit_holds_its_rows() -> None:
    commits = [upstream_commit(11, "a"), upstream_commit(12, "b")]

    holder = superseding([replay(30, "a", "b", at=30), replay(20, "a", at=20)], commits)

    assert holder == {11: 30, 12: 30}


COMMITS = [upstream_commit(11, "a"), upstream_commit(13, "c")]
SEQUENCE = {11: 11, 13: 13}


def test_a_downstream_group_follows_by_replaying_the_windows_that_consumed_the_replaced_rows() -> None:
    committed = [downstream(1, (11,), DAY_1), downstream(2, (12, 13), DAY_2), downstream(3, (14,), DAY_2)]

    plan = plan_follow(replay(20, "a", "c"), COMMITS, SEQUENCE, committed, [], 19, label)

    assert plan.windows == ["day-1", "day-2"]
    assert plan.ready


def test_a_downstream_group_cannot_follow_before_it_committed_the_replaced_commits() -> None:
    committed = [downstream(1, (11,), DAY_1)]

    behind = plan_follow(replay(20, "a", "c"), COMMITS, SEQUENCE, committed, [], 12, label)
    assert (behind.unconsumed, behind.ready) == ([13], False)

    in_flight = plan_follow(replay(20, "a", "c"), COMMITS, SEQUENCE, committed, [(12, 13)], 19, label)
    assert (in_flight.unconsumed, in_flight.ready) == ([13], False)


def test_a_replaced_commit_the_group_never_consumed_needs_no_window() -> None:
    plan = plan_follow(replay(20, "a"), COMMITS, SEQUENCE, [downstream(1, (5,), DAY_1)], [], 19, label)

    assert (plan.windows, plan.ready) == ([], True)


def test_a_replay_whose_commits_expired_or_a_sink_without_windows_cannot_be_followed() -> None:
    consumed_gone = [downstream(1, (11,), DAY_1), downstream(2, (12,), DAY_1)]
    expired = plan_follow(replay(20, "a", "gone"), COMMITS, SEQUENCE, consumed_gone, [], 19, label)
    assert not expired.ready
    assert "have no commit left in the upstream sink's history" in expired.missing[0]
    assert "non_append: skip" in expired.missing[0]
    never_consumed = plan_follow(replay(20, "a", "gone"), COMMITS, SEQUENCE, consumed_gone[:1], [], 19, label)
    assert never_consumed.ready, "an expired commit this group never consumed needs nothing"

    legacy = ShardRange("d1", "0/unpartitioned", None, 11, (11,), 11, 10, None)
    unmigrated = plan_follow(replay(20, "a"), COMMITS, SEQUENCE, [legacy], [], 19, label)
    assert not unmigrated.ready
    assert "run `icegroup migrate --execute` first" in unmigrated.missing[0]


def test_planning_stops_at_an_upstream_replay_and_steps_over_it_once_followed(
    catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group()
    source = create_source(catalog, group.source)
    append_batches(source, 2, 6)
    source.delete("region = 'eu'", snapshot_properties={KEY_REPLAY: "2026-01-01", KEY_GROUP: "up"})
    append_batches(source, 1, 6)
    source.refresh()
    first, second, rewrite, last = [s.snapshot_id for s in source.snapshots()]

    before = plan_increment(source, None, group)
    assert [s.snapshot_id for s in before.appends] == [first, second], "the appends before the replay are planned"
    assert before.through is not None
    assert before.through.snapshot_id == second
    assert before.remaining == 2
    stop = plan_increment(source, second, group)
    assert (stop.appends, stop.through) == ([], None)
    assert isinstance(stop.blocked, SourceError)
    assert re.search(rf"{rewrite} .* is a replay of window 2026-01-01 by group 'up'", str(stop.blocked))
    assert f"icegroup replay {group.name} --follow-upstream" in str(stop.blocked)

    after = plan_increment(source, second, group, lambda: {rewrite})
    assert [s.snapshot_id for s in after.skipped] == [rewrite]
    assert [s.snapshot_id for s in after.appends] == [last]


def test_a_reset_back_needs_every_snapshot_of_the_shards_it_consumes_again(make_group: MakeGroup) -> None:
    # A sink's oldest snapshot is number 2 when a staged snapshot took number 1; nothing expired.
    whole = [SnapshotInfo(11, None, 2, 0, 0, "append"), SnapshotInfo(13, 11, 4, 0, 0, "append")]
    shard = ShardRange("d1", "s", None, 13, (11, 13), 4, 10, DAY_1)
    check_reachable(make_group(), whole, [StreamMove("s", (13, 4), (None, 0), [shard])], None)

    expired = whole[1:]
    with pytest.raises(UsageError, match="history before snapshot 13 has expired"):
        check_reachable(make_group(), expired, [StreamMove("s", (13, 4), (None, 0), [shard])], None)
    legacy = ShardRange("d0", "s", None, 13, (), 4, 10, DAY_1)
    with pytest.raises(UsageError, match="cannot be consumed again"):
        check_reachable(make_group(), expired, [StreamMove("s", (13, 4), (None, 0), [legacy])], None)
    with pytest.raises(UsageError, match="planning would restart after snapshot 9, which is no longer in"):
        check_reachable(make_group(), expired, [StreamMove("s", (13, 4), (9, 1), [])], 9)
    check_reachable(make_group(), expired, [StreamMove("s", (13, 4), (11, 2), [])], 11)


def test_a_tick_with_leases_in_flight_names_the_stop_ahead_and_raises_it_once_they_end(
    catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group()
    source = create_source(catalog, group.source)
    append_batches(source, 1, 6)
    granted = tick(catalog, group, lambda _: RunState.RUNNING)
    source.delete("region = 'eu'", snapshot_properties={KEY_REPLAY: "2026-01-01", KEY_GROUP: "up"})

    running = tick(catalog, group, lambda _: RunState.RUNNING)

    assert running.state.leases, "the lease before the replay still runs"
    assert running.blocked is not None
    assert running.blocked.ahead().startswith("it stops next at source snapshot")
    for lease in granted.launch:
        commit_lease(catalog, group, granted.state, lease)
    with pytest.raises(SourceBlocked, match=f"icegroup replay {group.name} --follow-upstream"):
        tick(catalog, group, lambda _: RunState.SUCCEEDED)
