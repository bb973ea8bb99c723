"""Fences on a real SQLite catalog: a fence commit moves main; raise_fences only raises, also from a stale handle."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import LongType, NestedField

from icegroup.iceberg.errors import LostRace, SinkError
from icegroup.iceberg.protocol.sink_commit import KEY_FENCE
from icegroup.iceberg.store.fences import commit_fence, raise_fences
from icegroup.iceberg.store.sink import commit_retrying

KEY = "icegroup.fence.orders.0123456789abcdef"
OTHER = "icegroup.fence.orders.fedcba9876543210"


def make_sink(catalog: Catalog, ns: str, **properties: str) -> Table:
    catalog.create_namespace_if_not_exists(ns)
    schema = Schema(NestedField(1, "id", LongType(), required=True))
    return catalog.create_table(f"{ns}.sink", schema=schema, properties=properties)


def fence(catalog: Catalog, ns: str, key: str = KEY) -> str | None:
    """The fence as the catalog has it now, read through a fresh handle."""
    return catalog.load_table(f"{ns}.sink").metadata.properties.get(key)


def test_a_missing_fence_is_raised_to_the_value(catalog: Catalog, ns: str) -> None:
    sink = make_sink(catalog, ns)

    raised = raise_fences(sink, {KEY: 3})

    assert raised == {KEY: 3}
    assert fence(catalog, ns) == "3"


def test_several_fences_are_raised_in_one_commit(catalog: Catalog, ns: str) -> None:
    sink = make_sink(catalog, ns)
    before = len(catalog.load_table(f"{ns}.sink").metadata.metadata_log)

    raise_fences(sink, {KEY: 1, OTHER: 2})

    after = catalog.load_table(f"{ns}.sink").metadata
    assert (after.properties[KEY], after.properties[OTHER]) == ("1", "2")
    assert len(after.metadata_log) == before + 1


@pytest.mark.parametrize("lower", [1, 2], ids=["lower", "equal"])
def test_a_fence_is_never_lowered(catalog: Catalog, ns: str, lower: int) -> None:
    sink = make_sink(catalog, ns, **{KEY: "2"})
    location = catalog.load_table(f"{ns}.sink").metadata_location

    raised = raise_fences(sink, {KEY: lower})

    assert raised == {}
    assert fence(catalog, ns) == "2"
    assert catalog.load_table(f"{ns}.sink").metadata_location == location  # nothing was committed


def test_only_the_fences_below_their_value_are_raised(catalog: Catalog, ns: str) -> None:
    sink = make_sink(catalog, ns, **{KEY: "5"})

    raised = raise_fences(sink, {KEY: 4, OTHER: 1})

    assert raised == {OTHER: 1}
    assert (fence(catalog, ns), fence(catalog, ns, OTHER)) == ("5", "1")


def test_a_stale_handle_does_not_lower_a_fence(catalog: Catalog, ns: str) -> None:
    make_sink(catalog, ns)
    fresh, stale = catalog.load_table(f"{ns}.sink"), catalog.load_table(f"{ns}.sink")

    raise_fences(fresh, {KEY: 2})
    raised = raise_fences(stale, {KEY: 1})

    assert raised == {}
    assert fence(catalog, ns) == "2"


def test_the_catalog_check_stops_a_stale_raise_that_missed_the_refresh(
    catalog: Catalog, ns: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A raise computed on old metadata must fail the CAS, not overwrite the newer fence with a lower one."""
    make_sink(catalog, ns)
    fresh, stale = catalog.load_table(f"{ns}.sink"), catalog.load_table(f"{ns}.sink")
    raise_fences(fresh, {KEY: 2})
    real_refresh = Table.refresh
    refreshes: list[int] = []

    def first_refresh_is_lost(self: Table) -> Table:
        refreshes.append(1)
        return self if len(refreshes) == 1 else real_refresh(self)

    monkeypatch.setattr(Table, "refresh", first_refresh_is_lost)
    raised = raise_fences(stale, {KEY: 1})

    assert raised == {}
    assert len(refreshes) == 2  # the stale attempt was rejected and retried on fresh metadata
    assert fence(catalog, ns) == "2"


def test_raise_fences_gives_up_with_a_sink_error(catalog: Catalog, ns: str, monkeypatch: pytest.MonkeyPatch) -> None:
    make_sink(catalog, ns)
    fresh, stale = catalog.load_table(f"{ns}.sink"), catalog.load_table(f"{ns}.sink")
    raise_fences(fresh, {KEY: 2})
    monkeypatch.setattr(Table, "refresh", lambda self: self)  # never sees the newer fence
    monkeypatch.setattr("icegroup.iceberg.retry.time.sleep", lambda _: None)

    with pytest.raises(SinkError, match=r"^sink: could not raise fences .* in 2 retries; try again"):
        raise_fences(stale, {KEY: 1}, retries=2)

    assert fence(catalog, ns) == "2"


def test_a_fence_commit_moves_main_with_an_empty_snapshot(catalog: Catalog, ns: str) -> None:
    """The fence moves main, so a commit built on metadata from before it is refused by a standard requirement."""
    sink = make_sink(catalog, ns)
    rows = pa.table({"id": pa.array([1, 2], pa.int64())}, schema=sink.schema().as_arrow())
    sink.append(rows)
    before = sink.current_snapshot()
    assert before is not None

    raise_fences(sink, {KEY: 1, OTHER: 2})

    head = catalog.load_table(f"{ns}.sink").current_snapshot()
    assert head is not None
    assert head.parent_snapshot_id == before.snapshot_id
    assert head.summary is not None
    assert head.summary[KEY_FENCE] == f"{KEY},{OTHER}"
    assert [m for m in head.manifests(sink.io) if m.added_snapshot_id == head.snapshot_id] == [], "no files"
    assert sorted(catalog.load_table(f"{ns}.sink").scan().to_arrow().column("id").to_pylist()) == [1, 2]


def test_a_commit_built_before_the_fence_is_refused_by_the_catalog(catalog: Catalog, ns: str) -> None:
    """A zombie's commit requires main where it read the fences; the fence commit moved it, so the catalog refuses."""
    sink = make_sink(catalog, ns, **{"commit.retry.num-retries": "0"})
    rows = pa.table({"id": pa.array([1], pa.int64())}, schema=sink.schema().as_arrow())
    sink.append(rows)
    zombie = catalog.load_table(f"{ns}.sink")

    raise_fences(sink, {KEY: 1})

    with pytest.raises(CommitFailedException, match="branch main has changed"):
        zombie.append(rows)
    assert catalog.load_table(f"{ns}.sink").scan().to_arrow().num_rows == 1


def test_a_fence_commit_on_a_moved_main_loses_the_race(catalog: Catalog, ns: str) -> None:
    sink = make_sink(catalog, ns)
    stale = catalog.load_table(f"{ns}.sink")
    sink.append(pa.table({"id": pa.array([1], pa.int64())}, schema=sink.schema().as_arrow()))

    with pytest.raises(LostRace, match="main"):
        commit_fence(stale, {KEY: "1"})

    assert fence(catalog, ns) is None, "the refused fence commit wrote nothing"
    assert stale.current_snapshot() is not None, "refreshed for the next try"


def test_a_change_that_loses_a_race_is_made_again_on_the_new_head(catalog: Catalog, ns: str) -> None:
    sink = make_sink(catalog, ns)
    rows = pa.table({"id": pa.array([1, 2], pa.int64())}, schema=sink.schema().as_arrow())
    sink.append(rows)
    rival = catalog.load_table(f"{ns}.sink")
    seen: list[int | None] = []

    def delete(table: Table) -> None:
        head = table.current_snapshot()
        seen.append(head.snapshot_id if head else None)
        if len(seen) == 1:  # another writer wins, and pyiceberg's own retries ran out
            rival.append(rows.slice(1))
            raise CommitFailedException("Requirement failed: branch main has changed")
        table.delete("id = 1")

    commit_retrying(sink, delete, "deleting replaced output")

    assert len(seen) == 2
    assert seen[0] != seen[1], "made again on the table as the rival left it"
    ids = sorted(catalog.load_table(f"{ns}.sink").scan().to_arrow().column("id").to_pylist())
    assert ids == [2, 2], "the rows were deleted, and the rival's commit stands"


def test_a_delete_racing_a_staged_snapshot_is_made_again(catalog: Catalog, ns: str) -> None:
    """A Borrower's staged snapshot (not on main) raises pyiceberg's sequence-number ValueError, not a conflict."""
    sink = make_sink(catalog, ns)
    rows = pa.table({"id": pa.array([1, 2], pa.int64())}, schema=sink.schema().as_arrow())
    sink.append(rows)
    rival = catalog.load_table(f"{ns}.sink")
    attempts: list[int] = []

    def delete(table: Table) -> None:
        attempts.append(1)
        if len(attempts) == 1:
            rival.append(rows.slice(1), branch="staged")  # main stays put; the last sequence number moves
        table.delete("id = 1")

    commit_retrying(sink, delete, "deleting replaced output")

    assert len(attempts) == 2, "the first delete lost to the staged snapshot and was made again"
    assert catalog.load_table(f"{ns}.sink").scan().to_arrow().column("id").to_pylist() == [2]


def test_other_value_errors_are_not_taken_for_a_race(catalog: Catalog, ns: str) -> None:
    sink = make_sink(catalog, ns)

    def broken(table: Table) -> None:
        raise ValueError("Attempting to add a snapshot before a schema is added")

    with pytest.raises(ValueError, match="before a schema"):
        commit_retrying(sink, broken, "a broken change")


def test_a_change_that_keeps_losing_names_the_remedy(catalog: Catalog, ns: str) -> None:
    sink = make_sink(catalog, ns)

    def lose(table: Table) -> None:
        raise CommitFailedException("Requirement failed: branch main has changed")

    with pytest.raises(SinkError, match=r"removing a fence on .* lost 2 races with other commits; try again"):
        commit_retrying(sink, lose, "removing a fence", retries=2)


def test_a_strict_raise_writes_nothing_when_another_writer_raised_the_fence_first(catalog: Catalog, ns: str) -> None:
    sink = make_sink(catalog, ns, **{KEY: "3"})

    raised = raise_fences(sink, {KEY: 3}, also={OTHER: "marker"}, strict=True)

    assert raised == {}
    assert fence(catalog, ns, OTHER) is None, "the marker goes only with a fence this call raised"
    assert raise_fences(sink, {KEY: 4}, also={OTHER: "marker"}, strict=True) == {KEY: 4}
    assert fence(catalog, ns, OTHER) == "marker"
