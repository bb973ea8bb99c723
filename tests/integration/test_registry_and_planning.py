"""The registry is a CAS, and planning reads only what arrived after the position (real catalog, no Spark)."""

from __future__ import annotations

import time

import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.table.snapshots import Snapshot

from icegroup.iceberg.errors import RegistryConflict, SourceError, UsageError
from icegroup.iceberg.leader import tick
from icegroup.iceberg.protocol.liveness import RunState
from icegroup.iceberg.protocol.source_branch import ref_name
from icegroup.iceberg.shards import plan_increment
from icegroup.iceberg.start import initial_state
from icegroup.iceberg.store.group_delete import check_deletable, delete_group, footprint
from icegroup.iceberg.store.registry import commit_state, load_state
from tests.factories import SCHEMA, MakeGroup, append_batches, create_source


def missing(_: object) -> RunState:
    """Observer for tests where no Borrower ever ran."""
    return RunState.MISSING


def test_registry_state_round_trips(catalog: Catalog, make_group: MakeGroup) -> None:
    group = make_group()
    append_batches(create_source(catalog, group.source), 2, 6)
    result = tick(catalog, group, missing)
    assert load_state(catalog, group.name).state == result.state


def test_a_stale_registry_write_loses_the_cas(catalog: Catalog, make_group: MakeGroup) -> None:
    group = make_group()
    source = create_source(catalog, group.source)
    append_batches(source, 1, 6)
    tick(catalog, group, missing)
    first, second = load_state(catalog, group.name), load_state(catalog, group.name)
    assert first.state is not None
    assert second.state is not None

    commit_state(first, first.state.model_copy(update={"leases_done": 1}))
    with pytest.raises(RegistryConflict, match="another Leader committed first"):
        commit_state(second, second.state.model_copy(update={"leases_done": 2}))

    final = load_state(catalog, group.name).state
    assert final is not None
    assert final.leases_done == 1


def test_two_leaders_on_the_same_state_cannot_both_grant(catalog: Catalog, make_group: MakeGroup) -> None:
    """Interleave two ticks at the registry: the slower one's CAS fails and nothing of it is kept."""
    group = make_group()
    append_batches(create_source(catalog, group.source), 2, 6)
    slow = load_state(catalog, group.name)
    winner = tick(catalog, group, missing)
    assert winner.launch

    source = catalog.load_table(group.source)
    state = initial_state(source, group)
    with pytest.raises(RegistryConflict):
        commit_state(slow, state)
    assert load_state(catalog, group.name).state == winner.state


def test_planning_opens_only_the_new_snapshots(
    catalog: Catalog, make_group: MakeGroup, monkeypatch: pytest.MonkeyPatch
) -> None:
    group = make_group()
    source = create_source(catalog, group.source)
    append_batches(source, 20, 3)
    position = catalog.load_table(group.source).current_snapshot()
    assert position is not None
    append_batches(catalog.load_table(group.source), 3, 3)
    opened: list[int] = []
    real = Snapshot.manifests

    def spy(self: Snapshot, io: object) -> object:
        opened.append(self.snapshot_id)
        return real(self, io)  # type: ignore[arg-type]

    monkeypatch.setattr(Snapshot, "manifests", spy)
    plan = plan_increment(catalog.load_table(group.source), position.snapshot_id, group)

    assert len(plan.appends) == 3
    assert opened == [plan.appends[-1].snapshot_id], "one manifest list: the newest snapshot's names the others'"
    assert position.snapshot_id not in opened
    assert sum(f.record_count for f in plan.files) == 9


def test_planning_is_capped_per_tick(catalog: Catalog, make_group: MakeGroup) -> None:
    group = make_group(max_snapshots_per_tick=4)
    append_batches(create_source(catalog, group.source), 10, 3)
    plan = plan_increment(catalog.load_table(group.source), None, group)
    assert len(plan.appends) == 4
    assert plan.remaining == 6


def test_overwrite_snapshot_fails_by_default_and_is_skipped_on_request(catalog: Catalog, make_group: MakeGroup) -> None:
    group = make_group()
    source = create_source(catalog, group.source)
    append_batches(source, 2, 6)
    catalog.load_table(group.source).delete("event_id = 1")
    append_batches(catalog.load_table(group.source), 1, 6)

    stopped = plan_increment(catalog.load_table(group.source), None, group)
    assert len(stopped.appends) == 2, "the appends before the delete are planned"
    assert isinstance(stopped.blocked, SourceError)
    assert "non_append: skip" in str(stopped.blocked)
    plan = plan_increment(catalog.load_table(group.source), None, make_group(non_append="skip"))
    assert len(plan.appends) == 3
    assert len(plan.skipped) == 1


def test_an_expired_position_with_expired_history_after_it_stops_the_group_with_the_remedy(
    catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group()
    append_batches(create_source(catalog, group.source), 2, 6)
    position = tick(catalog, group, missing).state.planned_through
    append_batches(catalog.load_table(group.source), 2, 6)
    table = catalog.load_table(group.source)
    # The position and the first snapshot after it, which the group still needs. (Expiring only the
    # position is harmless where the catalog keeps the child's parent id, as a REST server does.)
    needed = [s.snapshot_id for s in table.snapshots()][1:3]
    # The group's source branch keeps them from any engine's expiry; an expiry once the branch is gone
    # (removed by hand, or by `icegroup expire` after the group was inactive too long) takes them.
    table.manage_snapshots().remove_branch(ref_name(group.name)).commit()
    table.maintenance.expire_snapshots().by_ids(needed).commit()

    with pytest.raises(SourceError, match=f"position {position} .* no longer in its metadata.*--to-latest"):
        tick(catalog, group, missing)


def test_a_source_dropped_and_created_again_stops_the_group_naming_a_new_start_which_reads_the_new_table(
    catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group()
    append_batches(create_source(catalog, group.source), 2, 6)
    granted = tick(catalog, group, missing).state
    assert granted.source_uuid == str(catalog.load_table(group.source).metadata.table_uuid)
    catalog.drop_table(group.source)
    append_batches(create_source(catalog, group.source), 1, 6)

    consumed = rf"dropped and created again: .* group consumed table {granted.source_uuid}"
    with pytest.raises(SourceError, match=rf"{consumed}.*icegroup delete {group.name} --execute"):
        tick(catalog, group, missing)
    found = footprint(catalog, group.name, group.source, group.sink)
    # As `icegroup delete --execute` does: the leases the first tick granted (never run here) must have
    # passed their deadline, or the delete is refused.
    with pytest.raises(UsageError, match="lease\\(s\\) in flight"):
        check_deletable(found, int(time.time() * 1000))
    check_deletable(found, max(lease.deadline_ms for lease in granted.leases.values()) + 1)
    delete_group(catalog, found)
    fresh = tick(catalog, group, missing)
    assert sum(s.rows for s in fresh.state.shards.values()) == 6, "the new table's rows, from its start"


def test_an_unknown_source_table_names_the_field(catalog: Catalog, make_group: MakeGroup) -> None:
    group = make_group(source="nowhere.events")
    with pytest.raises(SourceError, match=r"source: table 'nowhere\.events' does not exist"):
        tick(catalog, group, missing)


def test_a_format_v1_source_is_refused_with_the_upgrade(catalog: Catalog, make_group: MakeGroup) -> None:
    group = make_group()
    catalog.create_namespace_if_not_exists(group.source.split(".")[0])
    catalog.create_table(group.source, schema=SCHEMA, properties={"format-version": "1"})
    with pytest.raises(SourceError, match=r"format-version 1 table.*'format-version'='2'"):
        tick(catalog, group, missing)


def test_data_before_window_start_is_refused_before_anything_is_committed(
    catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group(window_start="2099-01-01")
    append_batches(create_source(catalog, group.source), 1, 6)
    with pytest.raises(SourceError, match="window_start: 2099-01-01 is after source snapshot"):
        tick(catalog, group, missing)
    assert load_state(catalog, group.name).state is None


def test_planned_files_carry_their_streams_identity_partition_values(catalog: Catalog, make_group: MakeGroup) -> None:
    group = make_group()
    append_batches(create_source(catalog, group.source), 1, 6)
    plan = plan_increment(catalog.load_table(group.source), None, group)
    assert {f.stream: f.identity for f in plan.files} == {
        f"0:region={r}": (("region", r),) for r in ("eu", "us", "apac")
    }
