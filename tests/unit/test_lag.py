"""The group's lag and whether it has work, from the registry and the source's metadata alone."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from pyiceberg.catalog import Catalog

from icegroup.iceberg.lag import Work, lag_of, pending_work
from icegroup.iceberg.leader import tick
from icegroup.iceberg.protocol.liveness import RunState
from tests.factories import MakeGroup, append_batches, create_source
from tests.sink_commits import commit_lease

# Windows from this day on: a group whose windows begin long ago reports them complete over several ticks.
TODAY = datetime.now(UTC).date()


def test_pending_work_follows_unplanned_commits_and_open_shards_until_everything_is_committed(
    catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group(max_borrowers=3, window_start=TODAY)
    assert pending_work(catalog, group) is Work.NONE, "no source table: the tick names that, not this hint"
    source = create_source(catalog, group.source)
    assert pending_work(catalog, group) is Work.NONE, "an empty source and no registry"

    append_batches(source, 2, 30)
    assert pending_work(catalog, group) is Work.DATA, "commits no tick planned yet"
    assert lag_of(catalog, group).rows == 60

    first = tick(catalog, group, lambda _: RunState.MISSING)
    assert pending_work(catalog, group) is Work.DATA, "shards cut and leased, not committed"
    for lease in first.launch:
        commit_lease(catalog, group, first.state, lease)
    tick(catalog, group, lambda _: RunState.SUCCEEDED)

    assert pending_work(catalog, group) is Work.NONE
    assert lag_of(catalog, group).rows == 0
    append_batches(source, 1, 3)
    assert pending_work(catalog, group) is Work.DATA, "a new commit after catching up"


def test_a_caught_up_group_has_windows_to_report_once_a_window_is_due_to_be_reported_complete(
    catalog: Catalog, make_group: MakeGroup
) -> None:
    # Windows from yesterday: one has ended even in the first hour after midnight, when today's has not.
    group = make_group(replay_window="hour", window_start=TODAY - timedelta(days=1))
    append_batches(create_source(catalog, group.source), 1, 3)
    first = tick(catalog, group, lambda _: RunState.MISSING)
    for lease in first.launch:
        commit_lease(catalog, group, first.state, lease)
    caught_up = tick(catalog, group, lambda _: RunState.SUCCEEDED)
    assert caught_up.caught_up

    assert pending_work(catalog, group, now_ms=caught_up.state.windows_complete_through_ms) is Work.NONE
    later = caught_up.state.windows_complete_through_ms + 2 * 3_600_000
    assert pending_work(catalog, group, now_ms=later) is Work.WINDOWS, "the open window ended: a tick reports it"
