"""Replaying a window on real Spark and Iceberg: its output is replaced in one commit, exactly.

Source snapshots are committed now, so every test's data falls in today's window.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from datetime import UTC, datetime

import pyarrow as pa
import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.types import IntegerType, NestedField, StringType
from pyspark.sql import SparkSession

from icegroup.iceberg.config.lakehouse import LakehouseConfig
from icegroup.iceberg.errors import (
    ConfigError,
    Fenced,
    RegistryConflict,
    ReplayConflict,
    ReplayIncomplete,
    UsageError,
    WindowMoved,
)
from icegroup.iceberg.leader import tick
from icegroup.iceberg.protocol.fences import replay_fence_key
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.liveness import RunState
from icegroup.iceberg.protocol.shards import window_texts
from icegroup.iceberg.protocol.sink_commit import (
    COL_EPOCH,
    COL_GROUP,
    COL_LEASE,
    COL_SHARD,
    COL_WINDOW,
    KEY_FENCE,
    KEY_REPLAY,
    commit_properties,
)
from icegroup.iceberg.protocol.state import GroupState
from icegroup.iceberg.replay import plan_replay
from icegroup.iceberg.replay_ticket import begin_replay, end_replay
from icegroup.iceberg.store.fences import raise_fences
from icegroup.iceberg.store.heartbeats import beat, ensure_table
from icegroup.iceberg.store.registry import Loaded, commit_state, load_state
from icegroup.iceberg.verify import verify_group
from icegroup.iceberg.window_audit import audit_sink
from icegroup.spark_jobs.borrower.lease import run_lease
from icegroup.spark_jobs.replay import ReplayReport, publish, replay_window
from icegroup.spark_jobs.sink.migrate import migrate_sink
from icegroup.spark_jobs.transforms import load_transform
from tests.factories import MakeGroup, append_batches, create_source, today
from tests.integration.helpers import consumed, drive, quiet

pytestmark = pytest.mark.spark


def not_fences(snapshots: list[Snapshot]) -> list[Snapshot]:
    """The snapshots that are not fence commits (the empty snapshots that raise a fence move main too)."""
    return [s for s in snapshots if s.summary is None or KEY_FENCE not in s.summary.additional_properties]


def sink_rows(catalog: Catalog, group: GroupConfig) -> pa.Table:
    """The sink as a reader of main sees it."""
    return catalog.load_table(group.sink).scan().to_arrow()


def live_files(sink: Table, snapshot_id: int | None = None) -> frozenset[str]:
    """The data files a reader of the sink sees (at ``snapshot_id``, or now): a replay writes the window's anew."""
    return frozenset(task.file.file_path for task in sink.scan(snapshot_id=snapshot_id).plan_files())


def amounts(rows: pa.Table) -> dict[int, float]:
    """Event id to amount."""
    return dict(zip(rows.column("event_id").to_pylist(), rows.column("amount").to_pylist(), strict=True))


def test_a_replay_with_a_changed_transform_replaces_the_window_in_one_commit(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group(shard_caps={"max_files": 2})
    consumed(spark, lakehouse, catalog, group, 6, 30)
    before = sink_rows(catalog, group)
    snapshots_before = len(not_fences(catalog.load_table(group.sink).snapshots()))

    changed = group.model_copy(update={"transform": "tests.integration.transforms:amount_in_cents"})
    with pytest.raises(ConfigError, match="on_change"):
        replay_window(spark, lakehouse, changed, today(group), progress=quiet)
    changed = changed.model_copy(update={"on_change": "continue"})
    report = replay_window(spark, lakehouse, changed, today(group), run_id="run-1", progress=quiet)

    after = sink_rows(catalog, group)
    assert Counter(after.column("event_id").to_pylist()) == Counter(range(1, 181)), "each event exactly once"
    old, new = amounts(before), amounts(after)
    assert all(new[i] == round(old[i] * 100) for i in old), "every row of the window is the new transform's"
    assert set(window_texts(after.column(COL_WINDOW).to_pylist())) == {today(group)}
    assert report.rows_in == 180
    assert (report.rows_out, report.rows_replaced) == (180, 180)
    sink = catalog.load_table(group.sink)
    assert len(not_fences(sink.snapshots())) == snapshots_before + 1, "one commit replaced the window"
    head = sink.current_snapshot()
    assert head is not None
    assert head.summary is not None
    assert head.summary.operation.value == "overwrite"
    assert head.summary.additional_properties[KEY_REPLAY] == today(group)
    state = load_state(catalog, group.name).state
    assert state is not None
    assert state.replays == {}, "the ticket is given back"
    assert len(state.config_changes) == 1, "the config change is recorded"
    assert verify_group(catalog, group, key="event_id").ok
    audit = audit_sink(catalog, group)
    assert audit.ok, audit.describe()
    assert audit.rows == 180, "the replay's commit holds the window now"


def test_replay_works_after_the_sink_was_compacted_and_consumption_goes_on(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group(shard_caps={"max_files": 1})
    consumed(spark, lakehouse, catalog, group, 5, 12)
    compact = "options => map('min-input-files','2')"
    spark.sql(f"CALL {lakehouse.catalog_name}.system.rewrite_data_files(table => '{group.sink}', {compact})")
    sink = catalog.load_table(group.sink)
    assert sink.current_snapshot() is not None
    assert sink.current_snapshot().summary.operation.value == "replace"
    assert audit_sink(catalog, group).ok, "a compaction moves rows, it does not change them"

    replay_window(spark, lakehouse, group, today(group), progress=quiet)
    append_batches(catalog.load_table(group.source), 2, 12)
    drive(spark, lakehouse, group)

    ids = Counter(sink_rows(catalog, group).column("event_id").to_pylist())
    assert ids == Counter(range(1, 85))
    assert verify_group(catalog, group, key="event_id").ok
    assert audit_sink(catalog, group).ok


def test_a_second_replay_of_a_window_in_flight_fails_and_names_the_first(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group()
    consumed(spark, lakehouse, catalog, group, 2, 10)
    first = begin_replay(catalog, group, today(group), holder="replay-first")
    ensure_table(catalog)  # the heartbeats table, which a test run on its own has not made yet
    beat(catalog, group.name, "replay-first")

    with pytest.raises(ReplayConflict, match="being replayed by replay-first"):
        replay_window(spark, lakehouse, group, today(group), progress=quiet)

    end_replay(catalog, group, first)
    report = replay_window(spark, lakehouse, group, today(group), progress=quiet)
    assert report.generation == first.generation + 1


@pytest.fixture
def consumed_group(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> GroupConfig:
    """A group that has consumed two commits into today's window, so that window can be replayed."""
    group = make_group()
    consumed(spark, lakehouse, catalog, group, 2, 10)
    return group


def test_a_replay_starts_once_though_leaders_move_the_registry_while_it_raises_its_fence(
    catalog: Catalog, consumed_group: GroupConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    group = consumed_group
    raised: list[dict[str, int]] = []

    def raise_while_a_leader_ticks(table: Table, fences: dict[str, int], strict: bool) -> dict[str, int]:
        raised.append(fences)
        loaded = load_state(catalog, group.name)
        assert loaded.state is not None
        commit_state(loaded, loaded.state.model_copy(update={"leases_done": loaded.state.leases_done + 1000}))
        return raise_fences(table, fences, strict=strict)

    monkeypatch.setattr("icegroup.iceberg.replay_ticket.raise_fences", raise_while_a_leader_ticks)
    ticket = begin_replay(catalog, group, today(group), holder="replay-busy")

    assert [ticket.generation] == [f[replay_fence_key(group.name, today(group))] for f in raised] == [1]
    state = load_state(catalog, group.name).state
    assert state is not None
    assert state.replays[today(group)] == ticket
    assert state.leases_done >= 1000, "the ticket went into the state the Leader committed, not over it"


def test_a_replay_whose_window_another_replay_took_while_it_raised_its_fence_is_refused(
    catalog: Catalog, consumed_group: GroupConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    group = consumed_group
    other: list[int] = []
    calls: list[dict[str, int]] = []

    def raise_while_another_replay_starts(table: Table, fences: dict[str, int], strict: bool) -> dict[str, int]:
        calls.append(fences)
        if len(calls) == 1:
            other.append(begin_replay(catalog, group, today(group), holder="replay-other").generation)
            ensure_table(catalog)  # the heartbeats table, which a test run on its own has not made yet
            beat(catalog, group.name, "replay-other")
        return raise_fences(table, fences, strict=strict)

    monkeypatch.setattr("icegroup.iceberg.replay_ticket.raise_fences", raise_while_another_replay_starts)
    with pytest.raises(ReplayConflict, match="being replayed by replay-other"):
        begin_replay(catalog, group, today(group), holder="replay-late")

    state = load_state(catalog, group.name).state
    assert state is not None
    assert state.replays[today(group)].holder == "replay-other"
    assert state.replays[today(group)].generation == other[0]


@pytest.mark.parametrize("other_first", [True, False], ids=["before-its-fence", "after-its-fence"])
def test_a_replay_that_began_and_ended_while_another_raised_its_fence_makes_that_one_take_the_next_generation(
    catalog: Catalog, consumed_group: GroupConfig, monkeypatch: pytest.MonkeyPatch, other_first: bool
) -> None:
    group = consumed_group
    key = replay_fence_key(group.name, today(group))
    other: list[int] = []

    def a_whole_replay_meanwhile(table: Table, fences: dict[str, int], strict: bool) -> dict[str, int]:
        if other:
            return raise_fences(table, fences, strict=strict)
        other.append(0)
        raised = {} if other_first else raise_fences(table, fences, strict=strict)
        ticket = begin_replay(catalog, group, today(group), holder="replay-other")
        end_replay(catalog, group, ticket)
        other[0] = ticket.generation
        return raise_fences(table, fences, strict=strict) if other_first else raised

    monkeypatch.setattr("icegroup.iceberg.replay_ticket.raise_fences", a_whole_replay_meanwhile)
    ticket = begin_replay(catalog, group, today(group), holder="replay-late")

    assert ticket.generation == other[0] + 1, "a generation is never given to two replays, nor one below the fence"
    assert int(catalog.load_table(group.sink).properties[key]) == ticket.generation
    state = load_state(catalog, group.name).state
    assert state is not None
    assert state.replays[today(group)] == ticket


def test_a_replay_whose_ticket_swap_landed_though_it_was_reported_lost_has_started(
    catalog: Catalog, consumed_group: GroupConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    group = consumed_group
    swaps: list[int] = []

    def landed_but_reported_lost(loaded: Loaded, state: GroupState) -> None:
        swaps.append(len(swaps))
        commit_state(loaded, state)
        if len(swaps) == 1:
            raise RegistryConflict("the answer to this swap was lost on the way")

    monkeypatch.setattr("icegroup.iceberg.replay_ticket.commit_state", landed_but_reported_lost)
    ticket = begin_replay(catalog, group, today(group), holder="replay-unanswered")

    assert swaps == [0], "the swap that landed is not made again"
    assert ticket.generation == 1
    state = load_state(catalog, group.name).state
    assert state is not None
    assert state.replays[today(group)] == ticket


def test_a_superseded_replay_cannot_commit(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group()
    consumed(spark, lakehouse, catalog, group, 2, 10)
    before = sink_rows(catalog, group)
    zombie = begin_replay(catalog, group, today(group), holder="replay-zombie")
    plan = plan_replay(catalog, group, today(group))
    raise_fences(catalog.load_table(group.sink), {replay_fence_key(group.name, today(group)): zombie.generation + 1})

    report = ReplayReport(window=today(group), generation=zombie.generation)
    with pytest.raises(Fenced, match="superseded"):
        publish(spark, lakehouse, group, zombie, plan, load_transform(group.transform), report, None)

    assert sink_rows(catalog, group).sort_by("event_id").equals(before.sort_by("event_id"))


def test_a_dead_replay_is_expired_by_the_leader_and_its_window_is_granted_again(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group(session_timeout_s=5)
    consumed(spark, lakehouse, catalog, group, 2, 10)
    dead = begin_replay(catalog, group, today(group), holder="replay-dead")
    append_batches(catalog.load_table(group.source), 1, 10)

    held = tick(catalog, group, lambda lease: RunState.MISSING)
    assert held.launch == [], "no lease of a window being replayed"
    later = int(time.time() * 1000) + 6_000
    freed = tick(catalog, group, lambda lease: RunState.MISSING, now_ms=later)

    assert freed.state.replays == {}
    assert freed.launch, "the window's new shards are granted again"
    fence = catalog.load_table(group.sink).properties[replay_fence_key(group.name, today(group))]
    assert int(fence) == dead.generation + 1, "the dead replay is fenced out"


def test_a_lease_that_commits_into_the_window_after_the_plan_makes_the_replay_plan_again(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group(max_borrowers=1)
    consumed(spark, lakehouse, catalog, group, 2, 10)
    append_batches(catalog.load_table(group.source), 1, 10)
    granted = tick(catalog, group, lambda lease: RunState.MISSING)
    (lease,) = granted.launch
    ticket = begin_replay(catalog, group, today(group), holder="replay-live")
    plan = plan_replay(catalog, group, today(group))
    run_lease(spark, lakehouse, group, lease, [granted.state.shards[s] for s in lease.shard_ids], progress=quiet)
    leases_output = live_files(catalog.load_table(group.sink))

    report = ReplayReport(window=today(group), generation=ticket.generation)
    with pytest.raises(WindowMoved, match="after the replay planned it"):
        publish(spark, lakehouse, group, ticket, plan, load_transform(group.transform), report, None)
    replanned = plan_replay(catalog, group, today(group))
    publish(spark, lakehouse, group, ticket, replanned, load_transform(group.transform), report, None)
    end_replay(catalog, group, ticket)

    rows = sink_rows(catalog, group)
    assert Counter(rows.column("event_id").to_pylist()) == Counter(range(1, 31))
    assert report.rows_replaced == 30
    assert live_files(catalog.load_table(group.sink)).isdisjoint(leases_output), "every row is the replay's"


def test_replay_reads_live_files_of_expired_snapshots_and_refuses_when_files_are_gone(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group()
    source = create_source(catalog, group.source)
    append_batches(source, 4, 10)
    drive(spark, lakehouse, group)
    source = catalog.load_table(group.source)
    head = source.current_snapshot()
    assert head is not None
    source.maintenance.expire_snapshots().older_than(datetime.now(UTC)).commit()
    assert len(catalog.load_table(group.source).snapshots()) == 1

    report = replay_window(spark, lakehouse, group, today(group), progress=quiet)
    assert report.rows_in == 40

    compact = "options => map('min-input-files','2')"
    spark.sql(f"CALL {lakehouse.catalog_name}.system.rewrite_data_files(table => '{group.source}', {compact})")
    tick(catalog, group, lambda _: RunState.MISSING)  # the group's source branch moves on past the compaction
    spark.sql(
        f"CALL {lakehouse.catalog_name}.system.expire_snapshots(table => '{group.source}', retain_last => 1, "
        f"older_than => TIMESTAMP '{datetime.now(UTC).strftime('%Y-%m-%d %H:%M:%S.%f')}')"
    )
    before = sink_rows(catalog, group)
    missing = r"stream 0:region=eu, .* committed 16 rows; the source's files hold 0 of them"
    with pytest.raises(ReplayIncomplete, match=missing):
        replay_window(spark, lakehouse, group, today(group), progress=quiet)
    assert sink_rows(catalog, group).sort_by("event_id").equals(before.sort_by("event_id"))
    state = load_state(catalog, group.name).state
    assert state is not None
    assert state.replays == {}


def test_windows_no_replay_can_serve_are_refused_by_name(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group(window_start="2026-01-01")
    consumed(spark, lakehouse, catalog, group, 1, 10)

    with pytest.raises(UsageError, match="'yesterday' is not a day window; write it like 2026-01-31"):
        replay_window(spark, lakehouse, group, "yesterday", progress=quiet)
    with pytest.raises(UsageError, match="before window_start"):
        replay_window(spark, lakehouse, group, "2025-12-31", progress=quiet)
    with pytest.raises(UsageError, match="has not begun yet"):
        replay_window(spark, lakehouse, group, "2099-01-01", progress=quiet)


def test_a_reader_scanning_during_replays_sees_the_old_or_the_new_window_never_both_or_neither(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group(shard_caps={"max_files": 1})
    consumed(spark, lakehouse, catalog, group, 4, 15)
    seen: list[tuple[int, frozenset[str]]] = []
    stop = threading.Event()

    def read_in_a_loop() -> None:
        reader = lakehouse.catalog()
        while not stop.is_set():
            sink = reader.load_table(group.sink)
            seen.append((sink.scan(selected_fields=("event_id",)).to_arrow().num_rows, live_files(sink)))

    reader = threading.Thread(target=read_in_a_loop)
    reader.start()
    try:
        replays = [replay_window(spark, lakehouse, group, today(group), progress=quiet) for _ in range(3)]
    finally:
        stop.set()
        reader.join()

    sink = catalog.load_table(group.sink)
    versions = [live_files(sink, r.sink_snapshot) for r in replays]
    assert len(seen) > 10, "the reader scanned throughout"
    assert {count for count, _ in seen} == {60}, "never both versions, never neither"
    first = seen[0][1]
    assert len({first, *versions}) == 4, "each replay wrote the window's rows anew"
    assert {files for _, files in seen} <= {first, *versions}, "each scan is one version of the window"
    assert versions[-1] in {files for _, files in seen[-3:]}


def write_legacy_sink(catalog: Catalog, group: GroupConfig) -> int:
    """Consume the whole source as an older Borrower did: one commit per shard, rows without ``_ig_window``."""
    granted = tick(catalog, group, lambda _: RunState.MISSING)
    (lease,) = granted.launch
    source = catalog.load_table(group.source)
    older = (COL_GROUP, COL_LEASE, COL_SHARD)
    lineage = [NestedField(100 + i, name, StringType(), required=False) for i, name in enumerate(older)]
    fields = [NestedField(f.field_id, f.name, f.field_type, required=False) for f in source.schema().fields]
    schema = Schema(*fields, *lineage, NestedField(110, COL_EPOCH, IntegerType(), required=False))
    catalog.create_namespace_if_not_exists(group.sink.split(".")[0])
    sink = catalog.create_table(group.sink, schema=schema)
    for shard_id in lease.shard_ids:
        shard = granted.state.shards[shard_id]
        region = shard.identity["region"]
        rows = source.scan(row_filter=f"region = '{region}'").to_arrow().to_pylist()
        lineage_values = {COL_GROUP: group.name, COL_LEASE: lease.lease_id, COL_SHARD: shard_id, COL_EPOCH: 0}
        table = pa.Table.from_pylist([row | lineage_values for row in rows], schema=sink.schema().as_arrow())
        props = commit_properties(group.name, group.source, lease.lease_id, 0, 0, [shard], lease.origin)
        sink.append(table, snapshot_properties=props)
    return sum(granted.state.shards[s].rows for s in lease.shard_ids)


def test_a_sink_written_before_the_window_column_is_migrated_then_replayed(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group(max_borrowers=1)
    append_batches(create_source(catalog, group.source), 2, 12)
    written = write_legacy_sink(catalog, group)
    drive(spark, lakehouse, group)
    with pytest.raises(ReplayIncomplete, match="run `icegroup migrate"):
        replay_window(spark, lakehouse, group, today(group), progress=quiet)

    migrated = migrate_sink(spark, lakehouse, group, progress=quiet)

    sink = catalog.load_table(group.sink)
    assert migrated.rows == written == 24
    head = sink.current_snapshot()
    assert head is not None
    assert head.summary is not None
    assert head.summary.operation.value == "replace", "the same rows: a downstream group ignores it"
    windows = window_texts(sink.scan(selected_fields=(COL_WINDOW,)).to_arrow().column(COL_WINDOW).to_pylist())
    assert windows == [today(group)] * 24
    assert migrate_sink(spark, lakehouse, group, progress=quiet).files == 0, "nothing left to migrate"
    legacy_ids = Counter(sink.scan(selected_fields=(COL_SHARD,)).to_arrow().column(COL_SHARD).to_pylist())
    assert replay_window(spark, lakehouse, group, today(group), progress=quiet).rows_replaced == 24
    assert verify_group(catalog, group, key="event_id").ok
    assert audit_sink(catalog, group).ok
    replayed = catalog.load_table(group.sink).scan(selected_fields=(COL_SHARD, COL_GROUP)).to_arrow()
    assert Counter(replayed.column(COL_SHARD).to_pylist()) == legacy_ids, "new rows keep the older sink's text ids"
    assert replayed.column(COL_GROUP).null_count == 24, "the group is in the commit now, not in each row"
