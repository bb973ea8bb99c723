"""The Leader tick's I/O phases on a real SQLite catalog: plan (reads the source) and fence and commit."""

from __future__ import annotations

import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField

from icegroup.iceberg import leader
from icegroup.iceberg.leader import fence_and_commit, plan
from icegroup.iceberg.protocol.fences import fence_key
from icegroup.iceberg.start import initial_state
from icegroup.iceberg.store.registry import Loaded, load_state
from tests.factories import MakeGroup, append_batches, create_source, tables_of


def test_plan_cuts_what_the_source_added_after_the_cursor(catalog: Catalog, make_group: MakeGroup) -> None:
    group = make_group(shard_caps={"max_files": 1})
    source = create_source(catalog, group.source)
    append_batches(source, 2, 6)
    source.refresh()
    state = initial_state(source, group)

    planned, blocked = plan(tables_of(catalog, group), state)

    head = source.current_snapshot()
    assert head is not None
    assert planned.state.planned_through == head.snapshot_id
    assert len(planned.new_shards) == 6, "2 snapshots x 3 region streams, one file per shard"
    assert sum(s.rows for s in planned.new_shards) == 12
    assert blocked is None
    assert plan(tables_of(catalog, group), planned.state)[0].new_shards == [], "nothing new after the cursor"


def test_fence_and_commit_raises_fences_before_the_registry_names_the_next_attempt(
    catalog: Catalog, make_group: MakeGroup, monkeypatch: pytest.MonkeyPatch
) -> None:
    group = make_group()
    source = create_source(catalog, group.source)
    catalog.create_namespace_if_not_exists(group.sink.split(".")[0])
    sink = catalog.create_table(group.sink, schema=Schema(NestedField(1, "id", LongType(), required=True)))
    loaded = load_state(catalog, group.name)
    state = initial_state(source, group)
    key = fence_key(group.name, "0123456789abcdef")
    seen_at_commit: list[str | None] = []
    real_commit = leader.commit_state

    def commit_state(loaded: Loaded, new: object) -> None:
        sink.refresh()
        seen_at_commit.append(sink.metadata.properties.get(key))
        real_commit(loaded, new)  # type: ignore[arg-type]

    monkeypatch.setattr(leader, "commit_state", commit_state)

    fence_and_commit(tables_of(catalog, group, loaded), state, {key: 3})

    assert seen_at_commit == ["3"], "the fence was up when the registry committed"
    assert load_state(catalog, group.name).state == state


def test_fence_and_commit_does_not_commit_a_state_that_did_not_change(catalog: Catalog, make_group: MakeGroup) -> None:
    group = make_group()
    source = create_source(catalog, group.source)
    state = initial_state(source, group)
    fence_and_commit(tables_of(catalog, group), state, {})
    loaded = load_state(catalog, group.name)
    token = loaded.token

    fence_and_commit(tables_of(catalog, group, loaded), state, {})

    assert load_state(catalog, group.name).token == token
