"""Commits that skip pyiceberg's copies of the whole metadata, on a real SQLite catalog: what pyiceberg would commit.

A Leader's writes to its source (a branch move, a registration) land as one commit each, with the
branch's requirement, and leave the caller's handle current. A write made on main's head alone
(``on_head``, as the registry's and the lineage table's are) keeps the table's whole history, its
other refs and its metadata log, and numbers and sums its snapshot as pyiceberg does. These hold of
pyiceberg's own path too: they pin the behaviour, not the cost (``docs/concepts/performance.md``).
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import LongType, NestedField

from icegroup.iceberg.errors import RegistryConflict
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.source_branch import RefPosition, ref_name
from icegroup.iceberg.protocol.state import GroupState
from icegroup.iceberg.store.metadata_commit import on_head
from icegroup.iceberg.store.registrations import read_registrations, register
from icegroup.iceberg.store.registry import commit_state, load_state
from icegroup.iceberg.store.source_branch import keep_ref, read_ref

SCHEMA = Schema(NestedField(1, "id", LongType(), required=True))


def rows(*ids: int) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64())}, schema=SCHEMA.as_arrow())


def make_source(catalog: Catalog, ns: str, appends: int) -> Table:
    catalog.create_namespace_if_not_exists(ns)
    table = catalog.create_table(f"{ns}.source", schema=SCHEMA)
    for i in range(appends):
        table.append(rows(i))
    return table


def planned_through(source: Table, index: int) -> GroupState:
    """A group that planned through the source's ``index``-th snapshot (oldest first), its low watermark unknown.

    With no sequence number for its position the group keeps the whole ancestry: ``index + 1`` snapshots.
    """
    snapshot = sorted(source.snapshots(), key=lambda s: s.sequence_number)[index]
    return GroupState(
        group="g",
        source=".".join(source.name()),
        sink="x.sink",
        start_position=None,
        planned_through=snapshot.snapshot_id,
        planned_through_sequence=0,
    )


def test_a_branch_move_is_one_commit_that_the_handle_holds(catalog: Catalog, ns: str) -> None:
    source = make_source(catalog, ns, 3)
    state = planned_through(source, 1)
    commits = len(catalog.load_table(f"{ns}.source").metadata.metadata_log)

    moved = keep_ref(source, "g", state)

    assert moved == RefPosition(state.planned_through or 0, 2)
    fresh = catalog.load_table(f"{ns}.source")
    assert read_ref(fresh, "g") == moved
    assert len(fresh.metadata.metadata_log) == commits + 1
    assert (read_ref(source, "g"), source.metadata_location) == (moved, fresh.metadata_location)  # the handle too
    assert keep_ref(source, "g", state) is None  # kept already: nothing written


def test_a_branch_moved_by_another_writer_since_the_tick_read_it_is_left_as_that_writer_left_it(
    catalog: Catalog, ns: str
) -> None:
    source = make_source(catalog, ns, 3)
    keep_ref(source, "g", planned_through(source, 0))
    stale = catalog.load_table(f"{ns}.source")
    other = catalog.load_table(f"{ns}.source")
    newest = planned_through(other, 2)
    keep_ref(other, "g", newest)

    assert keep_ref(stale, "g", planned_through(stale, 1)) is None

    assert read_ref(catalog.load_table(f"{ns}.source"), "g") == RefPosition(newest.planned_through or 0, 3)


def test_a_registration_is_one_commit_of_its_property(catalog: Catalog, ns: str) -> None:
    source = make_source(catalog, ns, 2)
    group = GroupConfig(name="g", source=f"{ns}.source", sink=f"{ns}.sink")
    commits = len(source.metadata.metadata_log)

    assert register(source, group, planned_through(source, 1), now_ms=1_000)

    fresh = catalog.load_table(f"{ns}.source")
    assert read_registrations(fresh)["g"].seen_ms == 1_000
    assert len(fresh.metadata.metadata_log) == commits + 1
    assert ref_name("g") not in fresh.metadata.refs


def test_a_write_on_the_head_keeps_the_tables_history_refs_and_log(catalog: Catalog, ns: str) -> None:
    table = make_source(catalog, ns, 3)
    oldest = min(table.snapshots(), key=lambda s: s.sequence_number).snapshot_id
    table.manage_snapshots().create_tag(oldest, "kept").commit()
    before = catalog.load_table(f"{ns}.source").metadata

    with on_head(table) as head:
        assert [s.snapshot_id for s in head.snapshots()] == [before.current_snapshot_id]
        head.append(rows(9))

    after = catalog.load_table(f"{ns}.source").metadata
    assert [s.snapshot_id for s in after.snapshots[:-1]] == [s.snapshot_id for s in before.snapshots]
    written = after.snapshots[-1]
    assert (written.parent_snapshot_id, written.sequence_number) == (before.current_snapshot_id, 4)
    assert written.summary is not None
    assert (written.summary["total-records"], written.summary["total-data-files"]) == ("4", "4")
    assert after.snapshot_log[:-1] == before.snapshot_log
    assert len(after.metadata_log) == len(before.metadata_log) + 1
    assert after.refs["kept"] == before.refs["kept"]
    assert sorted(catalog.load_table(f"{ns}.source").scan().to_arrow()["id"].to_pylist()) == [0, 1, 2, 9]
    assert (table.metadata, table.metadata_location) == (after, catalog.load_table(f"{ns}.source").metadata_location)


def test_a_write_on_a_head_that_moved_since_is_refused_and_leaves_the_handle(catalog: Catalog, ns: str) -> None:
    table = make_source(catalog, ns, 1)
    table.transaction().set_properties({"commit.retry.num-retries": "0"}).commit_transaction()  # as the registry's
    seen = table.metadata_location
    catalog.load_table(f"{ns}.source").append(rows(5))

    with pytest.raises(CommitFailedException), on_head(table) as head:
        head.append(rows(6))

    assert table.metadata_location == seen
    assert sorted(catalog.load_table(f"{ns}.source").scan().to_arrow()["id"].to_pylist()) == [0, 5]


def test_the_registry_keeps_one_row_and_a_stale_state_still_loses(catalog: Catalog, ns: str) -> None:
    state = GroupState(group=f"{ns}_r", source="a.b", sink="a.c", start_position=None, planned_through=None)
    for epoch in range(3):
        commit_state(load_state(catalog, state.group), state.model_copy(update={"epoch": epoch}))
    stale = load_state(catalog, state.group)
    commit_state(load_state(catalog, state.group), state.model_copy(update={"epoch": 7}))

    with pytest.raises(RegistryConflict, match="another Leader committed first"):
        commit_state(stale, state.model_copy(update={"epoch": 8}))

    now = load_state(catalog, state.group)
    assert now.state is not None
    assert now.state.epoch == 7
    assert now.table is not None
    assert len(now.table.scan().to_arrow()) == 1
    assert len(now.table.snapshots()) == 7  # the first commit's append, then a delete and an append each


def test_metadata_files_that_fall_off_the_log_are_deleted_as_pyiceberg_deletes_them(catalog: Catalog, ns: str) -> None:
    table = make_source(catalog, ns, 1)
    written = [table.metadata_location]
    settings = {"write.metadata.delete-after-commit.enabled": "true", "write.metadata.previous-versions-max": "1"}
    table.transaction().set_properties(settings).commit_transaction()
    written.append(table.metadata_location)

    keep_ref(table, "g", planned_through(table, 0))
    written.append(table.metadata_location)
    with on_head(table) as head:
        head.append(rows(7))
    written.append(table.metadata_location)

    # Each commit drops the file before the one it follows: the branch move the first, the write on the head the second.
    assert [table.io.new_input(location).exists() for location in written] == [False, False, True, True]
