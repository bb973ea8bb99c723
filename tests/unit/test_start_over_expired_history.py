"""A new group's ``start`` on a source whose first snapshots have expired: no live row is skipped without a word.

Before, ``earliest`` started after the oldest snapshot left, so the rows the expired snapshots had
added, still live in the table, were never read. Now ``earliest`` is the table's start, and the
first tick reads every live row once across the gap. A timestamp older than what is left cannot
tell which live rows came after it, so it is refused with the ways out.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from pyiceberg.catalog import Catalog

from icegroup.iceberg.errors import SourceError
from icegroup.iceberg.leader import tick
from icegroup.iceberg.protocol.liveness import RunState
from icegroup.iceberg.shards import new_snapshots
from icegroup.iceberg.store.tables import history_cut_before
from tests.factories import MakeGroup, append_batches, create_source, events
from tests.sink_commits import consume_all


def expire_all_but_the_head(catalog: Catalog, source: str) -> None:
    """Expire every snapshot no ref keeps, as pyiceberg's own expiry does: only the head is left."""
    catalog.load_table(source).maintenance.expire_snapshots().older_than(datetime.now(UTC)).commit()


def test_earliest_reads_every_live_row_once_though_the_first_snapshots_expired(
    catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group(start="earliest")
    append_batches(create_source(catalog, group.source), 3, 10)
    expire_all_but_the_head(catalog, group.source)
    assert len(catalog.load_table(group.source).snapshots()) == 1

    consume_all(catalog, group)

    live = len(catalog.load_table(group.source).scan().to_arrow())
    assert len(catalog.load_table(group.sink).scan().to_arrow()) == live == 30


def test_a_start_time_before_the_history_left_is_refused_with_the_ways_out(
    catalog: Catalog, make_group: MakeGroup
) -> None:
    then = datetime.now(UTC) - timedelta(seconds=5)
    group = make_group(start={"timestamp": then.isoformat()})
    append_batches(create_source(catalog, group.source), 3, 10)
    expire_all_but_the_head(catalog, group.source)

    with pytest.raises(SourceError, match=r"start\.timestamp: .* is before the oldest snapshot left") as refused:
        tick(catalog, group, lambda _: RunState.MISSING)
    assert "start: earliest" in str(refused.value)
    assert not catalog.table_exists(group.sink)


def test_a_start_time_at_the_oldest_snapshot_left_starts_there(catalog: Catalog, make_group: MakeGroup) -> None:
    group = make_group()
    append_batches(create_source(catalog, group.source), 3, 10)
    expire_all_but_the_head(catalog, group.source)
    head = catalog.load_table(group.source).snapshots()[0]
    group = make_group(start={"timestamp": datetime.fromtimestamp(head.timestamp_ms / 1000, tz=UTC).isoformat()})

    consume_all(catalog, group)

    assert len(catalog.load_table(group.sink).scan().to_arrow()) == 10, "the rows the oldest snapshot left added"


def test_a_first_snapshot_after_dropped_staged_ones_is_the_table_start_not_a_gap(
    catalog: Catalog, make_group: MakeGroup
) -> None:
    """The shape of icegroup's own sinks: every shard is staged, and the staged snapshot dropped once published."""
    group = make_group(start="earliest")
    source = create_source(catalog, group.source)
    source.append(events(1, 10, seed=1), branch=None)
    (staged,) = source.snapshots()
    source.maintenance.expire_snapshots().by_id(staged.snapshot_id).commit()
    append_batches(source, 2, 10)
    source.refresh()
    first, _ = sorted(source.snapshots(), key=lambda s: s.sequence_number or 0)
    assert (first.parent_snapshot_id, first.sequence_number) == (None, 2), "main starts after a dropped number"

    assert not history_cut_before(source, first)
    assert [s.snapshot_id for s in new_snapshots(source, None, group)] == [s.snapshot_id for s in source.snapshots()]
    expire_all_but_the_head(catalog, group.source)
    source.refresh()
    assert history_cut_before(source, source.snapshots()[0]), "the head holds a file the expired snapshot added"
