"""Which streams a filter provably cannot match; anything not proven is kept, so no row is ever lost."""

from __future__ import annotations

import pytest

from icegroup.iceberg.protocol.shards import FileEntry, PartitionValue, shared_identity
from icegroup.iceberg.protocol.stream_filter import decidable_columns, may_match, pruning_predicate, stream_predicate

EU: dict[str, PartitionValue] = {"region": "eu"}
US: dict[str, PartitionValue] = {"region": "us"}
NULL: dict[str, PartitionValue] = {"region": None}


def matches(text: str, identity: dict[str, PartitionValue]) -> bool:
    return may_match(stream_predicate(text), identity)


@pytest.mark.parametrize(
    ("text", "eu", "us", "null"),
    [
        ("region = 'eu'", True, False, False),
        ("region != 'eu'", False, True, False),
        ("not (region = 'eu')", False, True, False),
        ("region in ('eu', 'apac')", True, False, False),
        ("region not in ('eu', 'apac')", False, True, False),
        ("region < 'f'", True, False, False),
        ("region >= 'f'", False, True, False),
        ("region is null", False, False, True),
        ("region is not null", True, True, False),
        ("region = 'eu' and amount > 10", True, False, False),
        ("region = 'eu' or region = 'us'", True, True, False),
        ("not (region = 'eu' or amount > 10)", False, True, False),
    ],
)
def test_a_stream_is_left_out_only_when_its_identity_value_fails_the_filter(
    text: str, eu: bool, us: bool, null: bool
) -> None:
    assert (matches(text, EU), matches(text, US), matches(text, NULL)) == (eu, us, null)


@pytest.mark.parametrize(
    "text",
    [
        "amount > 10",  # not a partition column: the identity values say nothing about it
        "region = 'eu' or amount > 10",  # a row of us may match through the other side
        "region like 'e%'",  # Spark's LIKE has a _ wildcard and escapes; pyiceberg reads a prefix
        "not region like 'e%'",
        "region = 5",  # another kind of literal than the column's: Spark casts it its own way
        'region = "eu"',  # a column to pyiceberg, a string to Spark
        "region = 'e''u'",  # one string to pyiceberg, two joined ones to Spark
        "`region` = 'eu'",
        "true",
    ],
)
def test_what_cannot_be_proven_keeps_every_stream(text: str) -> None:
    assert matches(text, US)
    assert matches(text, EU)


def test_only_plain_literals_of_the_columns_kind_decide() -> None:
    numbers: dict[str, PartitionValue] = {"shop": 7}
    assert not matches("shop = 8", numbers)
    assert not matches("shop > 7", numbers)
    assert matches("shop <= 7", numbers)
    assert matches("shop < 7.5", numbers), "a decimal literal on an integer column is Spark's to cast"
    assert matches("shop = '8'", numbers), "a string literal on an integer column is Spark's to cast"
    flags: dict[str, PartitionValue] = {"paid": False}
    assert not matches("paid = true", flags)
    assert matches("paid = false", flags)
    assert matches("paid = 0", flags), "an integer is not a boolean, though Python says False == 0"


def test_a_comparison_with_a_null_value_matches_no_row_whatever_its_literal() -> None:
    assert not matches("region != 'eu'", NULL)
    assert not matches("region = 5", NULL)


def test_a_filter_that_names_no_column_it_could_decide_on_prunes_nothing() -> None:
    assert stream_predicate(None) is None
    assert stream_predicate("region like 'e%'") is None
    assert stream_predicate('region = "eu"') is None
    both = stream_predicate("region = 'eu' and amount > 1")
    assert both is not None
    assert decidable_columns(both) == {"region", "amount"}
    assert may_match(None, US)


def test_a_column_the_stream_has_no_identity_value_for_is_unknown() -> None:
    assert matches("region = 'eu'", {}), "a stream of a bucket or days() spec, or an unpartitioned table"
    assert matches("region = 'eu'", {"shop": 1})


def entry(identity: tuple[tuple[str, PartitionValue], ...]) -> FileEntry:
    return FileEntry(stream="0:region=null", snapshot_id=1, path="f", record_count=1, size_bytes=1, identity=identity)


def test_a_shard_pushes_down_only_the_identity_values_all_its_files_share() -> None:
    # A null and the string 'null' print alike in a partition path: one stream key, two values.
    files = [entry((("region", None), ("shop", 1))), entry((("region", "null"), ("shop", 1)))]
    assert shared_identity(files) == {"shop": 1}
    assert shared_identity(files[:1]) == {"region": None, "shop": 1}


def test_a_filter_prunes_streams_only_on_a_column_the_table_partitions_by_identity() -> None:
    assert pruning_predicate("region = 'eu' and amount > 1", frozenset({"region"})) is not None
    assert pruning_predicate("amount > 1", frozenset({"region"})) is None, "amount is in no stream's identity"
    assert pruning_predicate(None, frozenset({"region"})) is None
    assert pruning_predicate("region = 'eu'", frozenset()) is None, "an unpartitioned table has one stream"
