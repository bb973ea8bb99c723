"""A filter on a partition column narrows the streams that are planned and the lag; any other filter does not."""

from __future__ import annotations

from pyiceberg.catalog import Catalog
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.table import Table
from pyiceberg.transforms import DayTransform

from icegroup.iceberg.describe import describe_group
from icegroup.iceberg.lag import Work, lag_of, pending_work
from icegroup.iceberg.leader import tick
from icegroup.iceberg.protocol.liveness import RunState
from icegroup.iceberg.shards import plan_increment
from icegroup.iceberg.store.registry import load_state
from tests.factories import SCHEMA, MakeGroup, create_source, events, next_event_id
from tests.sink_commits import consume_all

EU_ONLY = "region = 'eu'"


def append(source: Table, count: int, regions: tuple[str, ...] = ("eu", "us", "apac")) -> None:
    first = next_event_id(source)
    source.append(events(first, count, seed=first, regions=regions))


def test_a_filter_on_the_partition_column_plans_and_counts_only_the_streams_it_can_match(
    catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group(filter=EU_ONLY)
    source = create_source(catalog, group.source)
    append(source, 30)  # 10 rows per region
    append(source, 6, regions=("us",))

    plan = plan_increment(source, None, group)
    assert {f.stream for f in plan.files} == {"0:region=eu"}
    assert plan.pruned == 3, "the us and apac files of the first append, the us file of the second"
    assert len(plan.appends) == 2, "both appends are planned past, so the cursor moves over the us-only one"
    lag = lag_of(catalog, group)
    assert (lag.rows, lag.snapshots) == (10, 1), "only the eu rows, and only the commit that added some"

    first = tick(catalog, group, lambda _: RunState.MISSING)
    assert {s.stream for s in first.state.shards.values()} == {"0:region=eu"}
    assert first.state.planned_through == source.current_snapshot().snapshot_id  # type: ignore[union-attr]
    view = describe_group(catalog, group)
    assert [s.stream for s in view.streams] == ["0:region=eu"]
    assert view.lag_rows == 10

    consume_all(catalog, group)
    append(source, 9, regions=("us", "apac"))
    assert lag_of(catalog, group).rows == 0, "a commit that touched only excluded streams is no lag"
    assert lag_of(catalog, group).snapshots == 0
    assert describe_group(catalog, group).lag_rows == 0
    assert pending_work(catalog, group) is Work.WINDOWS, "a tick moves past it; no Borrower needs Spark"
    later = tick(catalog, group, lambda _: RunState.MISSING)
    assert later.new_shards == 0
    assert later.caught_up
    state = load_state(catalog, group.name).state
    assert state is not None
    assert set(state.streams) == {"0:region=eu"}

    append(source, 3, regions=("eu",))
    assert lag_of(catalog, group).rows == 3
    assert pending_work(catalog, group) is Work.DATA


def test_a_filter_on_another_column_still_plans_every_stream(catalog: Catalog, make_group: MakeGroup) -> None:
    group = make_group(filter="amount > 50")
    source = create_source(catalog, group.source)
    append(source, 30)

    plan = plan_increment(source, None, group)
    assert {f.stream for f in plan.files} == {"0:region=eu", "0:region=us", "0:region=apac"}
    assert plan.pruned == 0
    assert lag_of(catalog, group).rows == 30, "rows are filtered when read; before that each row counts"
    consume_all(catalog, group)
    append(source, 3, regions=("us",))
    assert pending_work(catalog, group) is Work.DATA, "any row of a new commit may match"


def test_an_or_with_another_column_keeps_every_stream(catalog: Catalog, make_group: MakeGroup) -> None:
    group = make_group(filter="region = 'eu' or amount > 50")
    source = create_source(catalog, group.source)
    append(source, 30)

    assert plan_increment(source, None, group).pruned == 0


def test_a_filter_on_a_column_partitioned_by_days_prunes_nothing(catalog: Catalog, make_group: MakeGroup) -> None:
    group = make_group(filter="event_ts < '2020-01-01T00:00:00+00:00'")
    catalog.create_namespace_if_not_exists(group.source.split(".")[0])
    spec = PartitionSpec(PartitionField(3, 1000, DayTransform(), "event_day"))
    source = catalog.create_table(group.source, schema=SCHEMA, partition_spec=spec)
    append(source, 30)

    plan = plan_increment(source, None, group)
    assert plan.files
    assert plan.pruned == 0, "a days() value is not proven against a timestamp the way Spark casts it"
    assert lag_of(catalog, group).rows == 30


def test_lag_past_one_ticks_batch_counts_every_row_as_an_upper_bound(catalog: Catalog, make_group: MakeGroup) -> None:
    group = make_group(filter=EU_ONLY, max_snapshots_per_tick=1)
    source = create_source(catalog, group.source)
    append(source, 3, regions=("us",))
    append(source, 4, regions=("us",))

    lag = lag_of(catalog, group)
    assert (lag.rows, lag.snapshots) == (4, 1), "the first commit is read and left out; the second is not read"


def test_files_of_an_older_spec_without_the_column_are_kept(catalog: Catalog, make_group: MakeGroup) -> None:
    group = make_group(filter=EU_ONLY)
    catalog.create_namespace_if_not_exists(group.source.split(".")[0])
    source = catalog.create_table(group.source, schema=SCHEMA)
    append(source, 4, regions=("us",))
    with source.update_spec() as update:
        update.add_identity("region")
    append(source, 6, regions=("eu", "us"))

    plan = plan_increment(source, None, group)
    assert sorted((f.stream, f.record_count) for f in plan.files) == [("0:unpartitioned", 4), ("1:region=eu", 3)]
    assert plan.pruned == 1
    assert lag_of(catalog, group).rows == 7, "the unpartitioned file may hold eu rows: its rows count"
