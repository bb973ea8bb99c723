"""Leader ticks on a real SQLite catalog without Spark: config drift, poison shards, re-drives and fences.

Borrower commits are simulated with a pyiceberg append that carries the same lineage summary a
Borrower writes, so the tick reconciles them exactly as it would a Spark commit.
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.table import Table

from icegroup.iceberg.errors import ConfigError, SinkError
from icegroup.iceberg.leader import TickResult, tick
from icegroup.iceberg.pause import set_paused
from icegroup.iceberg.protocol.dead_letters import PARKED, STOPPED, DeadLetter
from icegroup.iceberg.protocol.drift import check_drift
from icegroup.iceberg.protocol.fences import fence_key
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.liveness import RunState
from icegroup.iceberg.protocol.sink_commit import commit_properties
from icegroup.iceberg.protocol.state import GroupState, Lease, LeasePhase
from icegroup.iceberg.store.dead_letters import record, redrive
from icegroup.iceberg.store.registry import load_state
from tests.factories import BORROWER_RUN, REGIONS, MakeGroup, append_batches, create_source, dead_letter
from tests.sink_commits import ID_SCHEMA, create_sink

T0 = 1_900_000_000_000


def running(_: Lease) -> RunState:
    """A run observer that sees every lease's run alive."""
    return RunState.RUNNING


def failed(_: Lease) -> RunState:
    """A run observer that sees every lease's run failed."""
    return RunState.FAILED


def three_stream_group(make_group: MakeGroup, catalog: Catalog, **overrides: object) -> GroupConfig:
    """A group over 3 streams (regions) with 2 one-snapshot shards each; one shard per lease."""
    fields: dict[str, object] = {
        "max_borrowers": 3, "leases_per_borrower": 1, "shard_caps": {"max_files": 1}, "lease_max_shards": 1,
    }  # fmt: skip
    group = make_group(**{**fields, **overrides})
    append_batches(create_source(catalog, group.source), 2, 6)
    return group


def commit_as_borrower(catalog: Catalog, group: GroupConfig, result: TickResult, lease: Lease, index: int = 0) -> None:
    """Append to the sink what a Borrower's commit of the lease's shard at ``index`` (the first) records."""
    shard = result.state.shards[lease.shard_ids[index]]
    sink = catalog.load_table(group.sink)
    properties = commit_properties(group.name, group.source, lease.lease_id, lease.epoch, lease.attempt, [shard])
    sink.append(pa.Table.from_pylist([{"id": 1}], schema=ID_SCHEMA.as_arrow()), snapshot_properties=properties)


def poison(catalog: Catalog, group: GroupConfig, result: TickResult, lease: Lease, action: str) -> DeadLetter:
    """Record what a Borrower that gave up on the lease's first shard records."""
    shard = result.state.shards[lease.shard_ids[0]]
    letter = dead_letter(
        shard.shard_id,
        action,
        stream=shard.stream,
        lease_id=lease.lease_id,
        attempt=lease.attempt,
        from_snapshot=shard.from_snapshot,
        to_snapshot=shard.to_snapshot,
        at_ms=T0,
    )
    record(catalog, group.name, [letter])
    return letter


def by_stream(result: TickResult) -> dict[str, Lease]:
    """The tick's leases keyed by their one stream."""
    return {lease.streams[0]: lease for lease in result.state.leases.values()}


def state_for(group: GroupConfig, source: str, sink: str) -> GroupState:
    """A registry state of the group as built for ``source`` and ``sink``."""
    return GroupState(group=group.name, source=source, sink=sink, start_position=None, planned_through=None)


def test_check_drift_accepts_the_config_the_registry_was_built_for(make_group: MakeGroup) -> None:
    group = make_group()

    check_drift(state_for(group, group.source, group.sink), group)


@pytest.mark.parametrize("field", ["source", "sink"])
def test_check_drift_names_the_changed_field_and_the_remedy(make_group: MakeGroup, field: str) -> None:
    group = make_group()
    kept = {"source": group.source, "sink": group.sink, field: "old.table"}

    with pytest.raises(ConfigError) as info:
        check_drift(state_for(group, kept["source"], kept["sink"]), group)

    message = str(info.value)
    assert message.startswith(f"group {group.name!r}: {field}: ")
    assert repr(getattr(group, field)) in message
    assert "'old.table'" in message
    assert f"Give the changed group a new name, or restore {field}: old.table" in message


def test_a_tick_refuses_a_group_whose_sink_changed(catalog: Catalog, make_group: MakeGroup, ns: str) -> None:
    group = make_group()
    append_batches(create_source(catalog, group.source), 1, 3)
    tick(catalog, group, running, owner_run_id=BORROWER_RUN, now_ms=T0)
    moved = make_group(sink=f"{ns}.elsewhere")
    before = load_state(catalog, group.name).table.current_snapshot()

    with pytest.raises(ConfigError, match=r"sink: the config says .*elsewhere"):
        tick(catalog, moved, running, owner_run_id=BORROWER_RUN, now_ms=T0 + 1)

    assert load_state(catalog, group.name).table.current_snapshot() == before


def test_a_running_lease_is_stored_as_granted(catalog: Catalog, make_group: MakeGroup) -> None:
    group = three_stream_group(make_group, catalog)
    first = tick(catalog, group, running, owner_run_id=BORROWER_RUN, now_ms=T0)
    assert {lease.phase for lease in first.state.leases.values()} == {LeasePhase.GRANTING}

    second = tick(catalog, group, running, owner_run_id=BORROWER_RUN, now_ms=T0 + 1000)

    assert {lease.phase for lease in second.state.leases.values()} == {LeasePhase.GRANTED}
    stored = load_state(catalog, group.name).state
    assert stored is not None
    assert stored.leases == second.state.leases
    assert second.launch == []
    assert second.terminate == []


def test_a_stopped_shard_parks_its_lease_and_stops_new_grants(catalog: Catalog, make_group: MakeGroup) -> None:
    group = three_stream_group(make_group, catalog)
    create_sink(catalog, group)
    first = tick(catalog, group, running, owner_run_id=BORROWER_RUN, now_ms=T0)
    assert len(first.state.leases) == len(REGIONS)
    leases = by_stream(first)
    bad, done, other = (leases[stream] for stream in sorted(leases))
    letter = poison(catalog, group, first, bad, STOPPED)
    commit_as_borrower(catalog, group, first, done)  # frees a slot that would get the stream's next shard

    second = tick(catalog, group, running, owner_run_id=BORROWER_RUN, now_ms=T0 + 1000)

    assert second.state.leases[bad.lease_id].phase is LeasePhase.PARKED
    assert second.state.leases[bad.lease_id].attempt == 1  # parking fences the attempt that gave up
    assert done.lease_id not in second.state.leases
    assert len(second.committed) == 1
    assert set(second.state.leases) == {bad.lease_id, other.lease_id}  # no new grant for the free slot
    assert second.launch == []
    assert second.stopped == [letter]
    assert second.parked == []
    message = second.stop_message()
    assert letter.shard_id in message
    assert letter.stream in message
    assert letter.error in message
    assert f"`icegroup redrive {group.name} --execute`" in message
    stored = load_state(catalog, group.name).state
    assert stored is not None
    assert stored.leases[bad.lease_id].phase is LeasePhase.PARKED

    third = tick(catalog, group, running, owner_run_id=BORROWER_RUN, now_ms=T0 + 2000)  # still stopped: nothing moves
    assert set(third.state.leases) == {bad.lease_id, other.lease_id}
    assert third.launch == []
    assert third.stopped == [letter]

    assert [d.shard_id for d in redrive(catalog, group.name)] == [letter.shard_id]
    fourth = tick(catalog, group, running, owner_run_id=BORROWER_RUN, now_ms=T0 + 3000)

    regranted = fourth.state.leases[bad.lease_id]
    assert regranted.attempt == 2
    assert regranted.phase is LeasePhase.GRANTING
    assert regranted.shard_ids == bad.shard_ids
    assert fourth.regranted == 1
    assert fourth.stopped == []
    assert fourth.terminate == []
    assert regranted in fourth.launch
    grants = [lease for lease in fourth.launch if lease.lease_id not in first.state.leases]
    assert [lease.streams for lease in grants] == [done.streams]  # the held-back grant is made now


def test_a_parked_shard_holds_its_lease_while_other_streams_go_on(catalog: Catalog, make_group: MakeGroup) -> None:
    group = three_stream_group(make_group, catalog, on_poison="park")
    create_sink(catalog, group)
    first = tick(catalog, group, running, owner_run_id=BORROWER_RUN, now_ms=T0)
    leases = by_stream(first)
    bad, done, other = (leases[stream] for stream in sorted(leases))
    letter = poison(catalog, group, first, bad, PARKED)
    commit_as_borrower(catalog, group, first, done)

    second = tick(catalog, group, running, owner_run_id=BORROWER_RUN, now_ms=T0 + 1000)

    assert second.state.leases[bad.lease_id].phase is LeasePhase.PARKED
    assert second.state.leases[other.lease_id].phase is LeasePhase.GRANTED
    assert second.parked == [letter]
    assert second.stopped == []
    (grant,) = second.launch
    assert grant.streams == done.streams
    assert grant.lease_id not in first.state.leases
    assert grant.shard_ids[0] not in done.shard_ids
    assert bad.lease_id not in {lease.lease_id for lease in second.launch}

    third = tick(
        catalog, group, running, owner_run_id=BORROWER_RUN, now_ms=bad.deadline_ms + 1
    )  # a parked lease has no deadline
    assert third.state.leases[bad.lease_id].phase is LeasePhase.PARKED
    assert third.state.leases[bad.lease_id].attempt == 1
    assert bad.lease_id not in {lease.lease_id for lease in third.launch + third.terminate}

    redrive(catalog, group.name, [letter.shard_id])
    fourth = tick(catalog, group, running, owner_run_id=BORROWER_RUN, now_ms=bad.deadline_ms + 1000)

    regranted = fourth.state.leases[bad.lease_id]
    assert (regranted.attempt, regranted.phase) == (2, LeasePhase.GRANTING)
    assert regranted in fourth.launch
    assert fourth.parked == []
    assert catalog.load_table(group.sink).metadata.properties[fence_key(group.name, bad.lease_id)] == "2"


@pytest.mark.parametrize("action", [STOPPED, PARKED])
def test_a_dead_letter_for_an_already_committed_shard_is_ignored(
    catalog: Catalog, make_group: MakeGroup, action: str
) -> None:
    """A Borrower that gave up after another attempt committed the shard must not stop or park anything."""
    group = three_stream_group(make_group, catalog, max_borrowers=2, lease_max_shards=2)
    create_sink(catalog, group)
    first = tick(catalog, group, running, owner_run_id=BORROWER_RUN, now_ms=T0)
    held, done = sorted(first.state.leases.values(), key=lambda lease: lease.streams)
    assert len(held.shard_ids) == len(done.shard_ids) == 2
    assert held.streams != done.streams
    commit_as_borrower(catalog, group, first, held)  # its first shard only: the lease stays in flight
    letter = poison(catalog, group, first, held, action)  # for that committed shard
    commit_as_borrower(catalog, group, first, done)
    commit_as_borrower(catalog, group, first, done, index=1)  # frees a slot for the third stream

    second = tick(catalog, group, running, owner_run_id=BORROWER_RUN, now_ms=T0 + 1000)

    assert letter.shard_id in {shard.shard_id for shard in second.committed}
    assert second.stopped == []
    assert second.parked == []
    kept = second.state.leases[held.lease_id]
    assert (kept.phase, kept.attempt, kept.shard_ids) == (LeasePhase.GRANTED, held.attempt, held.shard_ids)
    assert fence_key(group.name, held.lease_id) not in catalog.load_table(group.sink).metadata.properties
    (grant,) = second.launch  # the group is not stopped: the free slot gets the third stream
    assert grant.lease_id not in first.state.leases
    assert not set(grant.streams) & {*held.streams, *done.streams}
    stored = load_state(catalog, group.name).state
    assert stored is not None
    assert stored.leases[held.lease_id].phase is LeasePhase.GRANTED


def test_a_regrant_raises_the_fence_on_an_existing_sink(catalog: Catalog, make_group: MakeGroup) -> None:
    group = three_stream_group(make_group, catalog)
    first = tick(catalog, group, running, owner_run_id=BORROWER_RUN, now_ms=T0)
    sink = create_sink(catalog, group)
    keys = {fence_key(group.name, lease_id) for lease_id in first.state.leases}
    assert not keys & set(sink.metadata.properties)

    second = tick(catalog, group, failed, owner_run_id=BORROWER_RUN, now_ms=T0 + 1000)

    assert second.regranted == len(REGIONS)
    fences = catalog.load_table(group.sink).metadata.properties
    assert {key: fences.get(key) for key in keys} == dict.fromkeys(keys, "1")

    tick(catalog, group, failed, owner_run_id=BORROWER_RUN, now_ms=T0 + 2000)

    fences = catalog.load_table(group.sink).metadata.properties
    assert {key: fences.get(key) for key in keys} == dict.fromkeys(keys, "2")


def test_a_regrant_without_a_sink_raises_no_fence(catalog: Catalog, make_group: MakeGroup) -> None:
    group = three_stream_group(make_group, catalog)
    tick(catalog, group, running, owner_run_id=BORROWER_RUN, now_ms=T0)

    second = tick(catalog, group, failed, owner_run_id=BORROWER_RUN, now_ms=T0 + 1000)

    assert second.regranted == len(REGIONS)
    assert {lease.attempt for lease in second.state.leases.values()} == {1}
    assert not catalog.table_exists(group.sink)


def test_the_fence_is_raised_before_the_registry_commit(
    catalog: Catalog, make_group: MakeGroup, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Leader that cannot fence the old attempt must not hand its lease to a new one."""
    group = three_stream_group(make_group, catalog)
    first = tick(catalog, group, running, owner_run_id=BORROWER_RUN, now_ms=T0)
    create_sink(catalog, group)

    def cannot_fence(table: Table, fences: dict[str, int]) -> dict[str, int]:
        raise SinkError("sink: could not raise fences")

    monkeypatch.setattr("icegroup.iceberg.leader.raise_fences", cannot_fence)
    with pytest.raises(SinkError):
        tick(catalog, group, failed, owner_run_id=BORROWER_RUN, now_ms=T0 + 1000)

    stored = load_state(catalog, group.name).state
    assert stored is not None
    assert stored.leases == first.state.leases


@pytest.mark.parametrize("run", [RunState.RUNNING, RunState.QUEUED])
def test_an_alive_run_past_its_deadline_is_terminated_and_regranted(
    catalog: Catalog, make_group: MakeGroup, run: RunState
) -> None:
    group = three_stream_group(make_group, catalog, max_borrowers=1)
    (lease,) = tick(catalog, group, running, owner_run_id=BORROWER_RUN, now_ms=T0).launch

    late = tick(catalog, group, lambda _: run, owner_run_id=BORROWER_RUN, now_ms=lease.deadline_ms + 1)

    assert late.terminate == [lease]  # the old attempt, whose run must be stopped
    (again,) = late.launch
    assert (again.lease_id, again.attempt, again.phase) == (lease.lease_id, 1, LeasePhase.GRANTING)
    assert again.deadline_ms == lease.deadline_ms + 1 + group.lease_timeout_s * 1000


def test_a_lease_never_launched_past_its_deadline_is_regranted_without_terminating(
    catalog: Catalog, make_group: MakeGroup
) -> None:
    group = three_stream_group(make_group, catalog, max_borrowers=1)
    (lease,) = tick(catalog, group, running, owner_run_id=BORROWER_RUN, now_ms=T0).launch

    late = tick(catalog, group, lambda _: RunState.MISSING, owner_run_id=BORROWER_RUN, now_ms=lease.deadline_ms + 1)

    assert late.terminate == []
    assert [(x.lease_id, x.attempt) for x in late.launch] == [(lease.lease_id, 1)]


def test_a_paused_group_plans_nothing_new_until_it_resumes(catalog: Catalog, make_group: MakeGroup) -> None:
    group = three_stream_group(make_group, catalog)
    first = tick(catalog, group, running)
    set_paused(catalog, group, True)
    append_batches(catalog.load_table(group.source), 2, 6)

    paused = tick(catalog, group, running)

    assert paused.new_shards == 0
    assert paused.state.planned_through == first.state.planned_through, "the cursor waits with the group"
    set_paused(catalog, group, False)
    assert tick(catalog, group, running).new_shards == 6


def test_planning_waits_while_max_pending_shards_are_cut_and_not_committed(
    catalog: Catalog, make_group: MakeGroup
) -> None:
    group = three_stream_group(make_group, catalog, max_pending_shards=6)
    first = tick(catalog, group, running)
    assert first.new_shards == 6
    append_batches(catalog.load_table(group.source), 2, 6)

    full = tick(catalog, group, running)

    assert full.new_shards == 0
    assert len(full.state.shards) == 6, "the registry holds no more than the cap (plus one tick's planning)"
    assert full.state.planned_through == first.state.planned_through
    assert tick(catalog, group.model_copy(update={"max_pending_shards": 7}), running).new_shards == 6


def test_a_retired_leases_fence_is_pruned_and_a_lease_in_flight_keeps_its_own(
    catalog: Catalog, make_group: MakeGroup
) -> None:
    group = three_stream_group(make_group, catalog)
    first = tick(catalog, group, running, owner_run_id=BORROWER_RUN, now_ms=T0)
    create_sink(catalog, group)
    regranted = tick(catalog, group, failed, owner_run_id=BORROWER_RUN, now_ms=T0 + 1000)
    done, *flying = regranted.launch
    keys = {lease.lease_id: fence_key(group.name, lease.lease_id) for lease in regranted.launch}
    legacy = fence_key(group.name, "0123456789abcdef")
    catalog.load_table(group.sink).transaction().set_properties({legacy: "3"}).commit_transaction()
    commit_as_borrower(catalog, group, regranted, done)

    retired = tick(catalog, group, running, owner_run_id=BORROWER_RUN, now_ms=T0 + 2000)

    assert done.lease_id not in retired.state.leases
    fences = catalog.load_table(group.sink).metadata.properties
    assert keys[done.lease_id] not in fences, "its shards are in the sink: the fence only grew the metadata"
    assert legacy not in fences, "fences left by earlier versions go at the next retirement"
    assert all(fences.get(keys[lease.lease_id]) == "1" for lease in flying), "leases in flight keep theirs"
    assert set(first.state.leases) == set(keys)


def test_a_tick_that_stops_short_of_the_head_says_planning_is_behind(catalog: Catalog, make_group: MakeGroup) -> None:
    group = make_group(max_snapshots_per_tick=2)
    append_batches(create_source(catalog, group.source), 3, 3)

    first = tick(catalog, group, running, owner_run_id=BORROWER_RUN, now_ms=T0)
    second = tick(catalog, group, running, owner_run_id=BORROWER_RUN, now_ms=T0 + 1)
    third = tick(catalog, group, running, owner_run_id=BORROWER_RUN, now_ms=T0 + 2)

    assert (first.new_shards > 0, first.planning_behind) == (True, True)
    assert (second.new_shards > 0, second.planning_behind) == (True, False)  # planned through the head
    assert (third.new_shards, third.planning_behind) == (0, False)
