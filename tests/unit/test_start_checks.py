"""Failed start-up checks leave nothing behind; filters are checked against the source; a group says how it stands."""

from __future__ import annotations

import pytest
from pyiceberg.catalog import Catalog

from icegroup.iceberg.errors import ConfigError, SourceBlocked, SourceError
from icegroup.iceberg.leader import tick
from icegroup.iceberg.protocol.dead_letters import PARKED, STOPPED
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.liveness import RunState
from icegroup.iceberg.protocol.status import status_of
from icegroup.iceberg.store.dead_letters import dead_letter_identifier
from icegroup.iceberg.store.registry import load_state, registry_identifier
from tests.factories import MakeGroup, append_batches, create_source, dead_letter, group_state, lease, shard


def missing(_: object) -> RunState:
    """No run was ever seen."""
    return RunState.MISSING


def nothing_left(catalog: Catalog, group: GroupConfig) -> None:
    """Neither the registry nor the dead-letter table of the group exists."""
    assert not catalog.table_exists(registry_identifier(group.name))
    assert not catalog.table_exists(dead_letter_identifier(group.name))


def test_a_missing_source_leaves_nothing_behind(catalog: Catalog, make_group: MakeGroup) -> None:
    group = make_group()

    with pytest.raises(SourceError, match="does not exist"):
        tick(catalog, group, missing)

    nothing_left(catalog, group)


def test_an_unknown_start_snapshot_leaves_nothing_behind(catalog: Catalog, make_group: MakeGroup) -> None:
    group = make_group(start={"snapshot_id": 42})
    append_batches(create_source(catalog, group.source), 1, 3)

    with pytest.raises(SourceError, match=r"start\.snapshot_id: 42"):
        tick(catalog, group, missing)

    nothing_left(catalog, group)


def test_a_filter_on_a_column_the_source_lacks_is_refused_before_anything_is_recorded(
    catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group(filter="regionn = 'eu'")
    append_batches(create_source(catalog, group.source), 1, 3)

    with pytest.raises(ConfigError) as info:
        tick(catalog, group, missing)

    message = str(info.value)
    assert f"group {group.name!r}: filter: \"regionn = 'eu'\" does not fit source {group.source!r}" in message
    assert "regionn" in message
    assert "its columns are event_id, region, event_ts, amount, user_id. Fix the filter" in message
    nothing_left(catalog, group)


def test_a_filter_is_checked_again_after_the_source_schema_changes(catalog: Catalog, make_group: MakeGroup) -> None:
    group = make_group(filter="amount > 10")
    source = create_source(catalog, group.source)
    append_batches(source, 1, 3)
    tick(catalog, group, missing)
    token = load_state(catalog, group.name).token
    with source.update_schema() as update:
        update.rename_column("amount", "amount_eur")

    with pytest.raises(ConfigError, match="filter: 'amount > 10' does not fit source"):
        tick(catalog, group, missing)

    assert load_state(catalog, group.name).token == token, "the failed tick committed nothing"


@pytest.mark.parametrize(
    ("actions", "leases", "lag", "expected"),
    [
        pytest.param({STOPPED, PARKED}, True, 3, "stopped", id="stopped"),
        pytest.param({PARKED}, True, 3, "parked", id="parked"),
        pytest.param(set(), True, 3, "consuming", id="consuming"),
        pytest.param(set(), False, 3, "lagging", id="lagging"),
        pytest.param(set(), False, 0, "caught up", id="caught-up"),
    ],
)
def test_a_group_says_where_it_stands(actions: set[str], leases: bool, lag: int, expected: str) -> None:
    pending = [shard(n, stream=f"s{n}") for n in range(1, 3)]
    held = [lease([pending[0].shard_id], streams=["s1"])] if leases else []
    state = group_state(pending, held)
    letters = {pending[i].shard_id: dead_letter(pending[i].shard_id, a) for i, a in enumerate(sorted(actions))}

    assert status_of(state, letters, lag).startswith(expected)


REPLAY = SourceBlocked("the whole story", 42, "a replay of window 2026-11-26 upstream", "run `icegroup replay g …`")


@pytest.mark.parametrize(
    ("leases", "pending", "ahead", "expected"),
    [
        pytest.param(
            False,
            False,
            False,
            "stopped at source snapshot 42, a replay of window 2026-11-26 upstream (run `icegroup replay g …`)",
            id="stopped-there",
        ),
        pytest.param(False, False, True, "lagging; it stops next at source snapshot 42, a replay", id="to-plan"),
        pytest.param(False, True, False, "lagging; it stops next at source snapshot 42, a replay", id="to-grant"),
        pytest.param(True, True, False, "consuming; it stops next at source snapshot 42, a replay", id="consuming"),
    ],
)
def test_a_group_at_an_upstream_replay_says_it_stopped_there_and_what_moves_it_on(
    leases: bool, pending: bool, ahead: bool, expected: str
) -> None:
    shards = [shard(1, stream="s1")] if pending else []
    held = [lease([shards[0].shard_id], streams=["s1"])] if leases else []
    state = group_state(shards, held)

    assert status_of(state, {}, 1 if pending or ahead else 0, REPLAY, appends_ahead=ahead).startswith(expected)
