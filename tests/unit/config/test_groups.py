"""GroupConfig, parse_groups and load_groups: valid groups parse, every bad field is named."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.expressions import And, EqualTo, GreaterThan

from icegroup.iceberg.config.groups import load_groups, parse_groups
from icegroup.iceberg.errors import ConfigError
from icegroup.iceberg.protocol.group import START_HELP, GroupConfig, ShardCaps, StartAtSnapshot, StartAtTimestamp

SOURCE = "groups.yaml"
BASE: dict[str, Any] = {"name": "orders", "source": "demo.events", "sink": "demo.events_out"}

FULL_YAML = """\
groups:
  - name: eu_orders
    source: demo.events
    sink: demo.eu_orders
    transform: icegroup.spark_jobs.transforms:identity
    filter: "region = 'eu' and amount > 0"
    max_borrowers: 3
    shard_caps: {max_files: 8, max_bytes: 1048576, max_rows: 1000}
    lease_max_shards: 4
    lease_timeout_s: 60
    start: latest
    non_append: skip
    replay_window: hour
    window_start: 2025-06-01
    schedule: "0 2 * * *"
    max_snapshots_per_tick: 50
    max_deliver: 5
    deliver_backoff_s: 0.5
    on_poison: park
"""


def parse_one(**overrides: Any) -> GroupConfig:
    groups = parse_groups({"groups": [{**BASE, **overrides}]}, source=SOURCE)
    return groups[overrides.get("name", BASE["name"])]


def config_error(**overrides: Any) -> str:
    with pytest.raises(ConfigError) as info:
        parse_one(**overrides)
    return str(info.value)


def test_fully_specified_group_parses_every_field(tmp_path: Path) -> None:
    path = tmp_path / "groups.yaml"
    path.write_text(FULL_YAML)

    groups = load_groups(path)

    assert list(groups) == ["eu_orders"]
    group = groups["eu_orders"]
    assert group.name == "eu_orders"
    assert group.source == "demo.events"
    assert group.sink == "demo.eu_orders"
    assert group.transform == "icegroup.spark_jobs.transforms:identity"
    assert group.filter == "region = 'eu' and amount > 0"
    assert group.row_filter == And(EqualTo("region", "eu"), GreaterThan("amount", 0))
    assert group.max_borrowers == 3
    assert group.shard_caps == ShardCaps(max_files=8, max_bytes=1048576, max_rows=1000)
    assert group.lease_max_shards == 4
    assert group.lease_timeout_s == 60
    assert group.start == "latest"
    assert group.non_append == "skip"
    assert group.replay_window == "hour"
    assert group.window_start == date(2025, 6, 1)
    assert group.schedule == "0 2 * * *"
    assert group.max_snapshots_per_tick == 50
    assert group.max_deliver == 5
    assert group.deliver_backoff_s == 0.5
    assert group.on_poison == "park"


def test_minimal_group_gets_defaults() -> None:
    group = parse_one()

    assert group.transform == "icegroup.spark_jobs.transforms:identity"
    assert group.filter is None
    assert group.row_filter is None
    assert group.max_borrowers == 2
    assert group.shard_caps == ShardCaps(max_files=64, max_bytes=256 * 1024 * 1024, max_rows=5_000_000)
    assert group.lease_max_shards == 64
    assert group.lease_timeout_s == 1800
    assert group.start == "earliest"
    assert group.non_append == "fail"
    assert group.replay_window == "day"
    assert group.window_start == date(2025, 1, 1)
    assert group.schedule is None
    assert group.max_snapshots_per_tick == 500
    assert group.max_deliver == 3
    assert group.deliver_backoff_s == 2.0
    assert group.on_poison == "stop"


@pytest.mark.parametrize(
    ("overrides", "label", "field", "allowed"),
    [
        pytest.param({"name": "Bad-Name"}, "'Bad-Name'", "name", "lower case letters", id="name-case"),
        pytest.param({"name": "1orders"}, "'1orders'", "name", "starting with a letter", id="name-digit"),
        pytest.param({"name": "a" * 64}, "'" + "a" * 64 + "'", "name", "max 63", id="name-too-long"),
        pytest.param({"source": "events"}, "'orders'", "source", "namespace.table", id="source-no-ns"),
        pytest.param({"source": "demo.ev-ents"}, "'orders'", "source", "namespace.table", id="source-dash"),
        pytest.param({"sink": "events_out"}, "'orders'", "sink", "namespace.table", id="sink-no-ns"),
        pytest.param({"sink": "demo.events"}, "'orders'", "sink", "must differ from source", id="sink-is-source"),
        pytest.param(
            {"sink": "DEMO.Events"},
            "'orders'",
            "sink",
            "must differ from source",
            id="sink-is-source-any-case",
        ),
        pytest.param(
            {"transform": "icegroup.spark_jobs.transforms.identity"},
            "'orders'",
            "transform",
            "package.module:function",
            id="transform-no-colon",
        ),
        pytest.param(
            {"transform": "icegroup.spark_jobs.transforms:"},
            "'orders'",
            "transform",
            "module:function",
            id="transform-no-fn",
        ),
        pytest.param({"filter": "amount >"}, "'orders'", "filter", "Iceberg expression syntax", id="filter"),
        pytest.param(
            {"max_deliver": 0},
            "'orders'",
            "max_deliver",
            "greater than or equal to 1",
            id="max-deliver",
        ),
        pytest.param(
            {"deliver_backoff_s": -1},
            "'orders'",
            "deliver_backoff_s",
            "greater than or equal to 0",
            id="deliver-backoff-negative",
        ),
        pytest.param(
            {"deliver_backoff_s": 601},
            "'orders'",
            "deliver_backoff_s",
            "less than or equal to 600",
            id="deliver-backoff-too-long",
        ),
        pytest.param({"on_poison": "skip"}, "'orders'", "on_poison", "'stop', 'park' or 'isolate'", id="on-poison"),
        pytest.param(
            {"max_borrowers": 0},
            "'orders'",
            "max_borrowers",
            "greater than or equal to 1",
            id="max-borrowers",
        ),
        pytest.param(
            {"shard_caps": {"max_files": 0}},
            "'orders'",
            "shard_caps.max_files",
            "greater than or equal to 1",
            id="shard-caps-max-files",
        ),
        pytest.param(
            {"shard_caps": {"max_file": 3}},
            "'orders'",
            "shard_caps.max_file",
            "unknown field",
            id="shard-caps-typo",
        ),
        pytest.param(
            {"lease_timeout_s": 9},
            "'orders'",
            "lease_timeout_s",
            "greater than or equal to 10",
            id="lease-timeout",
        ),
        pytest.param(
            {"lease_max_shards": 0},
            "'orders'",
            "lease_max_shards",
            "greater than or equal to 1",
            id="lease-max-shards",
        ),
        pytest.param({"start": "newest"}, "'orders'", "start", START_HELP, id="start-string"),
        pytest.param({"start": {"offset": 5}}, "'orders'", "start", START_HELP, id="start-unknown-key"),
        pytest.param({"start": {"snapshot_id": 5, "extra": 1}}, "'orders'", "start", START_HELP, id="start-extra-key"),
        pytest.param({"non_append": "ignore"}, "'orders'", "non_append", "'fail' or 'skip'", id="non-append"),
        pytest.param({"replay_window": "week"}, "'orders'", "replay_window", "'hour' or 'day'", id="replay-window"),
        pytest.param({"schedule": "0 2 * *"}, "'orders'", "schedule", "5-field cron", id="schedule-4-fields"),
        pytest.param({"schedule": "0 2 * * * *"}, "'orders'", "schedule", "5-field cron", id="schedule-6-fields"),
        pytest.param({"schedule": "@daily"}, "'orders'", "schedule", "5-field cron", id="schedule-macro"),
        pytest.param({"max_borrower": 2}, "'orders'", "max_borrower", "unknown field", id="typo"),
    ],
)
def test_invalid_field_names_group_field_and_what_is_allowed(
    overrides: dict[str, Any], label: str, field: str, allowed: str
) -> None:
    message = config_error(**overrides)

    assert message.startswith(f"{SOURCE}: group {label}: ")
    assert f"{field}: " in message
    assert allowed in message


@pytest.mark.parametrize("missing", ["name", "source", "sink"])
def test_missing_required_field_is_named(missing: str) -> None:
    raw = {key: value for key, value in BASE.items() if key != missing}

    with pytest.raises(ConfigError) as info:
        parse_groups({"groups": [raw]}, source=SOURCE)

    assert f"{missing}: field required" in str(info.value)


def test_group_without_a_name_is_labelled_by_index() -> None:
    raw = {"source": "demo.events", "sink": "demo.events_out"}

    with pytest.raises(ConfigError, match=r"groups\[1\]: name: field required"):
        parse_groups({"groups": [BASE, raw]}, source=SOURCE)


@pytest.mark.parametrize("start", ["earliest", "latest"])
def test_start_accepts_earliest_and_latest(start: str) -> None:
    assert parse_one(start=start).start == start


def test_start_accepts_snapshot_id() -> None:
    assert parse_one(start={"snapshot_id": 5}).start == StartAtSnapshot(snapshot_id=5)


def test_start_naive_timestamp_becomes_utc() -> None:
    start = parse_one(start={"timestamp": "2026-01-01T00:00:00"}).start

    assert isinstance(start, StartAtTimestamp)
    assert start.timestamp == datetime(2026, 1, 1, tzinfo=UTC)
    assert start.timestamp.utcoffset() == timedelta(0)


def test_start_timestamp_with_offset_keeps_its_offset() -> None:
    start = parse_one(start={"timestamp": "2026-01-01T02:00:00+02:00"}).start

    assert isinstance(start, StartAtTimestamp)
    assert start.timestamp.utcoffset() == timedelta(hours=2)
    assert start.timestamp == datetime(2026, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("field", "lowest"),
    [
        ("max_borrowers", 1),
        ("lease_timeout_s", 10),
        ("lease_max_shards", 1),
        ("max_snapshots_per_tick", 1),
        ("max_deliver", 1),
        ("deliver_backoff_s", 0),
    ],
)
def test_lowest_allowed_value_is_accepted(field: str, lowest: int) -> None:
    assert getattr(parse_one(**{field: lowest}), field) == lowest


@pytest.mark.parametrize("on_poison", ["stop", "park", "isolate"])
def test_on_poison_accepts_stop_park_and_isolate(on_poison: str) -> None:
    assert parse_one(on_poison=on_poison).on_poison == on_poison


def test_a_transform_path_is_only_checked_for_syntax_here() -> None:
    """The durable layer never imports user Spark code; spark_jobs/transforms.py does (test_transforms.py)."""
    assert parse_one(transform="no_such_module_xyz:f").transform == "no_such_module_xyz:f"


def test_duplicate_group_names_are_rejected() -> None:
    other = {**BASE, "sink": "demo.other_out"}

    with pytest.raises(ConfigError, match="group 'orders': name: defined twice"):
        parse_groups({"groups": [BASE, other]}, source=SOURCE)


def test_two_groups_writing_one_sink_are_rejected() -> None:
    other = {**BASE, "name": "refunds", "source": "demo.refunds"}

    with pytest.raises(ConfigError, match=r"group 'refunds': sink: 'demo\.events_out' is already the sink of group"):
        parse_groups({"groups": [BASE, other]}, source=SOURCE)


def test_errors_of_two_bad_groups_are_reported_together() -> None:
    first = {**BASE, "max_borrowers": 0}
    second = {"name": "refunds", "source": "demo.refunds", "sink": "demo.refunds", "replay_window": "week"}

    with pytest.raises(ConfigError) as info:
        parse_groups({"groups": [first, second]}, source=SOURCE)

    lines = str(info.value).splitlines()
    assert any(line.startswith(f"{SOURCE}: group 'orders': max_borrowers:") for line in lines)
    assert any(line.startswith(f"{SOURCE}: group 'refunds': replay_window:") for line in lines)


def test_one_bad_group_fails_the_whole_file() -> None:
    good = {"name": "refunds", "source": "demo.refunds", "sink": "demo.refunds_out"}

    with pytest.raises(ConfigError, match="group 'orders'"):
        parse_groups({"groups": [good, {**BASE, "filter": "amount >"}]}, source=SOURCE)


def test_several_groups_parse_by_name() -> None:
    other = {"name": "refunds", "source": "demo.refunds", "sink": "demo.refunds_out"}

    groups = parse_groups({"groups": [BASE, other]}, source=SOURCE)

    assert sorted(groups) == ["orders", "refunds"]
    assert groups["refunds"].source == "demo.refunds"


@pytest.mark.parametrize(
    "data",
    [
        pytest.param([BASE], id="list"),
        pytest.param("groups", id="string"),
        pytest.param({"groups": BASE}, id="groups-not-a-list"),
        pytest.param({"groups": None}, id="groups-null"),
    ],
)
def test_top_level_must_be_a_mapping_with_a_groups_list(data: Any) -> None:
    with pytest.raises(ConfigError, match=f"{SOURCE}: expected a mapping with a 'groups' list"):
        parse_groups(data, source=SOURCE)


def test_unknown_top_level_key_is_rejected() -> None:
    with pytest.raises(ConfigError, match=r"unknown top-level keys \['grups'\]; only 'groups' is allowed"):
        parse_groups({"groups": [BASE], "grups": []}, source=SOURCE)


def test_group_that_is_not_a_mapping_is_rejected() -> None:
    with pytest.raises(ConfigError, match=r"groups\[0\]"):
        parse_groups({"groups": ["orders"]}, source=SOURCE)


def test_load_groups_on_missing_file_names_the_path(tmp_path: Path) -> None:
    path = tmp_path / "nope.yaml"

    with pytest.raises(ConfigError, match="does not exist") as info:
        load_groups(path)

    assert str(path) in str(info.value)


def test_load_groups_on_empty_file_is_no_groups(tmp_path: Path) -> None:
    path = tmp_path / "groups.yaml"
    path.write_text("")

    assert load_groups(path) == {}


def test_load_groups_errors_name_the_file(tmp_path: Path) -> None:
    path = tmp_path / "groups.yaml"
    path.write_text("groups:\n  - {name: orders, source: demo.events, sink: demo.events, max_borrowers: 2}\n")

    with pytest.raises(ConfigError, match=f"^{path}: group 'orders': "):
        load_groups(path)


def test_load_groups_on_malformed_yaml_raises_config_error(tmp_path: Path) -> None:
    path = tmp_path / "groups.yaml"
    path.write_text("groups:\n  - name: [orders\n")

    with pytest.raises(ConfigError):
        load_groups(path)


def test_a_groups_file_from_before_the_import_name_icegroup_keeps_its_transform_and_its_hash() -> None:
    before = GroupConfig(name="g", source="a.b", sink="a.c", transform="spark_jobs.transforms:enrich_events")
    now = GroupConfig(name="g", source="a.b", sink="a.c", transform="icegroup.spark_jobs.transforms:enrich_events")

    assert before.transform == "icegroup.spark_jobs.transforms:enrich_events"
    assert before.config_hash == now.config_hash
    pinned = json.dumps({"filter": None, "transform": "spark_jobs.transforms:enrich_events"}, sort_keys=True)
    assert now.config_hash == hashlib.sha256(pinned.encode()).hexdigest()[:16], "the hash registries hold"
