"""Sink commit lineage: commit_properties and parse_commit round-trip."""

from __future__ import annotations

import json

import pytest

from icegroup.iceberg.protocol.sink_commit import (
    KEY_SHARD_IDS,
    KEY_SHARDS,
    ShardRange,
    SinkCommit,
    commit_properties,
    parse_commit,
)
from icegroup.iceberg.protocol.state import Origin
from tests.factories import WINDOW_START_MS, MakeShard


@pytest.mark.parametrize("from_snapshot", [100, None], ids=["from-snapshot", "from-start"])
@pytest.mark.parametrize("start", [99, None], ids=["start-snapshot", "start-beginning"])
def test_commit_properties_round_trip(make_shard: MakeShard, from_snapshot: int | None, start: int | None) -> None:
    shard = make_shard(
        shard_id="0123456789abcdef",
        stream="0/region=eu",
        from_snapshot=from_snapshot,
        to_snapshot=103,
        to_sequence=7,
        rows=12,
        snapshots=[101, 103],
    )
    origin = Origin(start_position=start, config_hash="0a1b2c3d4e5f6a7b")
    properties = commit_properties("orders", "demo.events", "fedcba9876543210", 3, 2, [shard], origin=origin)

    commit = parse_commit(555, 1_767_225_601_000, properties, added_records=9)

    assert commit == SinkCommit(
        snapshot_id=555,
        timestamp_ms=1_767_225_601_000,
        group="orders",
        source="demo.events",
        lease_id="fedcba9876543210",
        epoch=3,
        attempt=2,
        shards=(ShardRange("0123456789abcdef", "0/region=eu", from_snapshot, 103, (101, 103), 7, 12, WINDOW_START_MS),),
        added_records=9,
        origin=origin,
    )


def test_commit_properties_are_lower_case_string_keys_and_values(make_shard: MakeShard) -> None:
    properties = commit_properties("orders", "demo.events", "fedcba9876543210", 3, 2, [make_shard()])

    assert all(key == key.lower() and key.startswith("icegroup.") for key in properties)
    assert all(isinstance(value, str) for value in properties.values())


def test_commit_properties_hold_one_shard(make_shard: MakeShard) -> None:
    properties = commit_properties(
        "orders", "demo.events", "fedcba9876543210", 3, 2, [make_shard(shard_id="0123456789abcdef")]
    )

    assert [item["id"] for item in json.loads(properties[KEY_SHARDS])] == ["0123456789abcdef"]
    assert properties[KEY_SHARD_IDS] == "0123456789abcdef"  # what the fenced commit's Java side looks for


def test_a_batch_commit_lists_every_shard_and_decodes_to_all_of_them(make_shard: MakeShard) -> None:
    shards = [make_shard(shard_id="0123456789abcdef"), make_shard(shard_id="fedcba9876543210")]
    properties = commit_properties("orders", "demo.events", "fedcba9876543210", 3, 2, shards)

    assert properties[KEY_SHARD_IDS] == "0123456789abcdef,fedcba9876543210"
    decoded = parse_commit(1, 0, properties, added_records=2)
    assert decoded is not None
    assert [s.shard_id for s in decoded.shards] == ["0123456789abcdef", "fedcba9876543210"]


@pytest.mark.parametrize(
    "summary",
    [
        pytest.param({}, id="empty"),
        pytest.param({"added-records": "9", "spark.app.id": "local-1"}, id="plain-spark-append"),
        pytest.param({"icegroup.group": "orders"}, id="no-shards"),
        pytest.param({"icegroup.shards": "[]"}, id="no-group"),
    ],
)
def test_parse_commit_ignores_snapshots_icegroup_did_not_write(summary: dict[str, str]) -> None:
    assert parse_commit(1, 0, summary, added_records=0) is None


def test_parse_commit_defaults_missing_optional_keys() -> None:
    summary = {"icegroup.group": "orders", "icegroup.shards": '[{"id":"s","stream":"a","from":null,"to":5}]'}

    commit = parse_commit(1, 0, summary, added_records=0)

    assert commit is not None
    assert (commit.source, commit.lease_id, commit.epoch, commit.attempt) == ("", "", 0, 0)
    assert commit.shards == (ShardRange("s", "a", None, 5, ()),)
    assert commit.origin is None  # written before start and config hash were recorded
