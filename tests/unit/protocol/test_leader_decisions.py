"""The Leader tick's phases, each on its own: reconcile, liveness, cut (plan), grant, and the drift check."""

from __future__ import annotations

from typing import Any

import pytest

from icegroup.iceberg.errors import ConfigError, SourceError
from icegroup.iceberg.protocol.drift import check_config, check_drift, recorded_table, refuse_other_table
from icegroup.iceberg.protocol.fences import fence_key
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.leader import check_liveness, cut, grant, reconcile
from icegroup.iceberg.protocol.liveness import RunState
from icegroup.iceberg.protocol.renewal import renewed
from icegroup.iceberg.protocol.shards import FileEntry, Shard, SnapshotInfo
from icegroup.iceberg.protocol.sink_commit import ShardRange, SinkCommit
from icegroup.iceberg.protocol.state import Lease, LeasePhase
from tests.factories import group_state, lease, shard

W0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
NOW = W0 + 5_000
EU, US = "0/region=eu", "0/region=us"


def group_of(**fields: Any) -> GroupConfig:
    """The group every phase test decides for."""
    return GroupConfig.model_validate({"name": "orders", "source": "demo.events", "sink": "demo.events_out", **fields})


def commit_of(held: Lease, *shards: Shard, snapshot_id: int = 900) -> SinkCommit:
    """A sink commit of ``shards`` by ``held``, as the sink history decodes it."""
    return SinkCommit(
        snapshot_id=snapshot_id,
        timestamp_ms=NOW,
        group="orders",
        source="demo.events",
        lease_id=held.lease_id,
        epoch=held.epoch,
        attempt=held.attempt,
        shards=tuple(
            ShardRange(s.shard_id, s.stream, s.from_snapshot, s.to_snapshot, tuple(s.snapshots)) for s in shards
        ),
        added_records=sum(s.rows for s in shards),
    )


# the config pin


def test_a_registry_without_a_config_hash_adopts_the_groups() -> None:
    group = group_of()

    assert check_config(group_state([]), group, NOW, sink_head=None).config_hash == group.config_hash


def test_an_unchanged_config_leaves_the_state_as_it_is() -> None:
    group = group_of(filter="region = 'eu'")
    state = group_state([], config_hash=group.config_hash)

    assert check_config(state, group, NOW, sink_head=7) is state


def test_a_changed_filter_or_transform_is_refused_by_default() -> None:
    state = group_state([], config_hash=group_of().config_hash)

    with pytest.raises(ConfigError, match=r"filter/transform changed .* Choose one"):
        check_config(state, group_of(transform="icegroup.spark_jobs.transforms:enrich_events"), NOW, sink_head=7)
    with pytest.raises(ConfigError, match="on_change is fail"):
        check_config(state, group_of(filter="region = 'eu'"), NOW, sink_head=7)


def test_a_change_under_on_change_continue_is_recorded_with_the_sink_head() -> None:
    old = group_of().config_hash
    group = group_of(filter="region = 'eu'", on_change="continue")

    new = check_config(group_state([], config_hash=old), group, NOW, sink_head=7)

    assert new.config_hash == group.config_hash
    assert [(c.old_hash, c.new_hash, c.sink_snapshot, c.at_ms) for c in new.config_changes] == [
        (old, group.config_hash, 7, NOW)
    ]


def test_settings_that_do_not_change_the_output_do_not_change_the_hash() -> None:
    assert group_of(max_borrowers=5, lease_timeout_s=60).config_hash == group_of().config_hash
    assert group_of(filter="region = 'eu'").config_hash != group_of().config_hash


# reconcile


def test_reconcile_moves_positions_retires_finished_leases_and_moves_the_sink_cursor() -> None:
    first, second = shard(1, stream=EU), shard(2, stream=EU)
    done = lease([first.shard_id], streams=[EU], lease_id="a" * 16)
    busy = lease([second.shard_id], streams=[EU], lease_id="b" * 16)
    state = group_state([first, second], [done, busy])

    out = reconcile(state, [commit_of(done, first)], sink_head=900, now_ms=NOW, lease_timeout_s=60)

    assert out.committed == [first]
    assert list(out.state.shards) == [second.shard_id]
    assert out.state.streams[EU].position == first.to_snapshot
    assert list(out.state.leases) == [busy.lease_id]
    assert out.state.leases_done == 1
    assert out.state.sink_cursor == 900
    assert state.shards.keys() == {first.shard_id, second.shard_id}, "the input state is left as it was"


def test_reconcile_extends_the_deadline_of_a_lease_that_made_progress_only() -> None:
    first, second, third = shard(1, stream=EU), shard(2, stream=EU), shard(3, stream=US)
    moving = lease([first.shard_id, second.shard_id], streams=[EU], lease_id="a" * 16, deadline_ms=NOW + 1)
    idle = lease([third.shard_id], streams=[US], lease_id="b" * 16, deadline_ms=NOW + 1)

    out = reconcile(group_state([first, second, third], [moving, idle]), [commit_of(moving, first)], 900, NOW, 60)

    assert out.state.leases[moving.lease_id].deadline_ms == NOW + 60_000
    assert out.state.leases[idle.lease_id].deadline_ms == NOW + 1


def test_reconcile_without_a_sink_keeps_the_cursor() -> None:
    out = reconcile(group_state([shard(1)], sink_cursor=42), [], sink_head=None, now_ms=NOW, lease_timeout_s=60)

    assert out.state.sink_cursor == 42
    assert out.committed == []


# liveness


def test_a_failed_run_is_revoked_and_regranted_behind_a_raised_fence() -> None:
    held = lease([shard(1).shard_id], streams=[EU], attempt=2, deadline_ms=NOW + 1_000)
    state = group_state([shard(1)], [held])

    out = check_liveness(state, group_of(lease_timeout_s=60), {held.lease_id: RunState.FAILED}, set(), NOW, 77)

    again = out.state.leases[held.lease_id]
    assert again.attempt == 3
    assert again.phase is LeasePhase.GRANTING
    assert again.deadline_ms == NOW + 60_000
    assert again.sink_snapshot_at_grant == 77
    assert out.fences == {fence_key("orders", held.lease_id): 3}
    assert out.launch == [again]
    assert [(old.attempt, decision.reason) for old, decision in out.revoked] == [(2, "Borrower run failed")]
    assert out.terminate == []
    assert state.leases[held.lease_id].attempt == 2, "the input state is left as it was"


def test_a_run_still_alive_past_its_deadline_is_terminated_and_regranted() -> None:
    held = lease([shard(1).shard_id], streams=[EU], deadline_ms=NOW - 1)

    out = check_liveness(
        group_state([shard(1)], [held]), group_of(), {held.lease_id: RunState.RUNNING}, set(), NOW, None
    )

    assert out.terminate == [held]
    assert out.state.leases[held.lease_id].attempt == held.attempt + 1


def test_a_live_run_keeps_its_lease_which_becomes_granted() -> None:
    held = lease([shard(1).shard_id], streams=[EU], deadline_ms=NOW + 1_000)

    out = check_liveness(
        group_state([shard(1)], [held]), group_of(), {held.lease_id: RunState.RUNNING}, set(), NOW, None
    )

    assert out.state.leases[held.lease_id] == held.model_copy(update={"phase": LeasePhase.GRANTED})
    assert out.launch == []
    assert out.fences == {}
    assert out.revoked == []


def test_a_lease_whose_run_never_appeared_is_launched_again_at_the_same_attempt() -> None:
    held = lease([shard(1).shard_id], streams=[EU], deadline_ms=NOW + 1_000)

    out = check_liveness(group_state([shard(1)], [held]), group_of(), {}, set(), NOW, None)

    assert out.launch == [held]
    assert out.fences == {}


def test_a_poisoned_lease_is_parked_on_its_poisoned_stream_behind_a_raised_fence() -> None:
    eu, us = shard(1, stream=EU), shard(2, stream=US)
    held = lease([eu.shard_id, us.shard_id], streams=[EU, US], deadline_ms=NOW + 1_000)

    out = check_liveness(
        group_state([eu, us], [held]), group_of(), {held.lease_id: RunState.FAILED}, {us.shard_id}, NOW, None
    )

    parked = out.state.leases[held.lease_id]
    assert parked.phase is LeasePhase.PARKED
    assert parked.attempt == held.attempt + 1
    assert parked.shard_ids == [us.shard_id]
    assert parked.streams == [US]
    assert out.fences == {fence_key("orders", held.lease_id): held.attempt + 1}
    assert out.launch == []
    assert [old for old, _ in out.parked] == [held]


# plan (cutting what planning read)


def test_cut_adds_shards_and_moves_the_planning_cursor() -> None:
    snaps = [SnapshotInfo(101, None, 1, W0 + 1, 0, "append"), SnapshotInfo(102, 101, 2, W0 + 2, 0, "append")]
    files = [FileEntry(EU, 101, "wh/a.parquet", 5, 50), FileEntry(US, 102, "wh/b.parquet", 7, 70)]
    state = group_state([])

    out = cut(state, group_of(), snaps, files, through=102)

    assert {(s.stream, s.to_snapshot, s.rows) for s in out.new_shards} == {(EU, 101, 5), (US, 102, 7)}
    assert set(out.state.shards) == {s.shard_id for s in out.new_shards}
    assert out.state.planned_through == 102
    assert state.shards == {}, "the input state is left as it was"


def test_cut_with_nothing_planned_changes_nothing() -> None:
    state = group_state([shard(1)])

    out = cut(state, group_of(), [], [], through=None)

    assert out.state == state
    assert out.new_shards == []


def test_cut_refuses_a_shard_older_than_window_start() -> None:
    snaps = [SnapshotInfo(101, None, 1, W0 + 1, 0, "append")]

    with pytest.raises(SourceError, match="window_start: 2026-06-01 is after source snapshot 101"):
        cut(group_state([]), group_of(window_start="2026-06-01"), snaps, [FileEntry(EU, 101, "wh/a", 1, 1)], 101)


# grant


def test_grant_fills_the_free_slots_and_records_the_leases() -> None:
    eu, us = shard(1, stream=EU), shard(2, stream=US)

    out = grant(
        group_state([eu, us]),
        group_of(max_borrowers=2, leases_per_borrower=1),
        NOW,
        77,
        stopped=False,
        owner_run_id="run-1",
    )

    assert len(out.grants) == 2
    assert out.state.leases == {g.lease_id: g for g in out.grants}
    assert all(g.sink_snapshot_at_grant == 77 and g.owner_run_id == "run-1" for g in out.grants)


def test_a_stopped_group_grants_nothing() -> None:
    state = group_state([shard(1)])

    out = grant(state, group_of(), NOW, None, stopped=True)

    assert out.grants == []
    assert out.state == state


# drift


@pytest.mark.parametrize(("field", "value"), [("source", "demo.other"), ("sink", "demo.elsewhere")])
def test_a_changed_source_or_sink_is_refused_naming_the_field(field: str, value: str) -> None:
    with pytest.raises(ConfigError, match=f"{field}: the config says '{value}'"):
        check_drift(group_state([]), group_of(**{field: value}))


def test_the_source_tables_uuid_is_recorded_once_and_another_table_under_the_name_is_refused() -> None:
    group = group_of()
    before = group_state([shard(1)])

    recorded = recorded_table(before, "uuid-1")

    assert (before.source_uuid, recorded.source_uuid) == (None, "uuid-1"), "adopted, the state given is not changed"
    assert recorded_table(recorded, "uuid-2") is recorded, "adopted once: a later table does not replace it"
    assert recorded_table(before, None) is before, "a table that records no UUID (format v1) leaves none"
    refuse_other_table(recorded, "uuid-1", group)
    refuse_other_table(before, "uuid-2", group)  # a state from before UUIDs were kept: nothing to compare
    refuse_other_table(recorded, None, group)
    with pytest.raises(SourceError, match=r"dropped and created again: .* is uuid-2.* consumed table uuid-1") as err:
        refuse_other_table(recorded, "uuid-2", group)
    assert "icegroup delete orders --execute" in str(err.value)


def test_a_renewal_moves_its_attempts_deadline_to_the_renewal_plus_the_timeout() -> None:
    held = lease([shard(1).shard_id], attempt=2, deadline_ms=60_000)
    state = group_state([shard(1)], [held])

    moved = renewed(state, {held.lease_id: (2, 100_000)}, lease_timeout_s=30)

    assert moved.leases[held.lease_id].deadline_ms == 130_000
    assert state.leases[held.lease_id].deadline_ms == 60_000, "the state it was given is not changed"


@pytest.mark.parametrize(
    ("attempt", "renewed_ms", "why"),
    [
        (1, 100_000, "an older attempt's renewal moves nothing: it was revoked"),
        (2, 20_000, "a renewal whose deadline is earlier never moves the deadline back"),
    ],
)
def test_a_renewal_that_does_not_apply_leaves_the_state_as_it_is(attempt: int, renewed_ms: int, why: str) -> None:
    held = lease([shard(1).shard_id], attempt=2, deadline_ms=60_000)
    state = group_state([shard(1)], [held])

    assert renewed(state, {held.lease_id: (attempt, renewed_ms), "gone": (0, 100_000)}, 30) is state, why
