"""How shards are read: the range one scan of a batch spans, the split size that spreads it over the cores."""

from __future__ import annotations

import pytest

from icegroup.iceberg.protocol.shard_reads import (
    MAX_SPLIT_BYTES,
    OPEN_COST_BYTES,
    TASKS_PER_CORE,
    AsOf,
    batch_span,
    file_sizes,
    shard_span,
    spanning_range,
    split_bytes,
)
from icegroup.spark_jobs.row_files import sql_string
from tests.factories import shard

MIB = 1024 * 1024


def test_twelve_mid_sized_files_are_cut_into_two_tasks_per_core() -> None:
    sizes = [int(1.7 * MIB)] * 12
    split = split_bytes(sizes, cores=2)
    assert split == -(-sum(sizes) // (2 * TASKS_PER_CORE))
    assert sum(sizes) / split <= 2 * TASKS_PER_CORE, "no more tasks than two a core"
    assert split < 16 * MIB, "below Iceberg's adaptive floor, which packed nine of the twelve files in one task"


def test_tiny_files_weigh_the_open_cost_and_a_split_is_never_below_it() -> None:
    assert split_bytes([10] * 400, cores=2) == 400 * OPEN_COST_BYTES // (2 * TASKS_PER_CORE)
    assert split_bytes([10], cores=8) == OPEN_COST_BYTES
    assert split_bytes([], cores=0) == OPEN_COST_BYTES


def test_a_huge_shard_gets_more_tasks_not_bigger_ones() -> None:
    sizes = [512 * MIB] * 40
    assert split_bytes(sizes, cores=2) == MAX_SPLIT_BYTES
    assert split_bytes([MAX_SPLIT_BYTES * 2 * TASKS_PER_CORE], cores=1) == MAX_SPLIT_BYTES


def test_file_sizes_come_from_the_shards_stats_or_spread_their_bytes_evenly() -> None:
    kept = shard(1, files=["a", "b"], file_stats=[(101, 5, 300), (101, 5, 700)])
    older = shard(2, files=["c", "d"], rows=10, bytes=1000)
    assert file_sizes([kept, older]) == [300, 700, 500, 500]


def test_a_batch_spans_from_its_earliest_start_to_its_latest_end_across_streams() -> None:
    sequence = {100 + n: n for n in range(10)}.__getitem__
    first_of_b = shard(2, stream="b")
    later_of_a = shard(5, stream="a")
    assert spanning_range([later_of_a, first_of_b], sequence) == (101, 105)
    assert spanning_range([later_of_a, shard(1, stream="b", from_snapshot=None)], sequence) == (None, 105)


def test_starts_that_cannot_be_ordered_for_sure_give_no_span() -> None:
    a, b = shard(5, stream="a"), shard(2, stream="b")
    assert spanning_range([a, b], {104: 4}.get) is None, "an expired start: the shards are read one by one"
    assert spanning_range([a, b], lambda _: 0) is None, "format v1 sequence numbers all 0: no order"
    assert spanning_range([a, shard(5, stream="b")], {104: 4}.get) == (104, 105), "one start, however many streams"


def test_a_batch_of_no_shards_has_no_range() -> None:
    with pytest.raises(ValueError, match="no shards"):
        spanning_range([], lambda _: 0)


@pytest.mark.parametrize("value", ["s3://b/it's.parquet", r"C:\data\x", "${env:HOME}/p", "plain", "é"])
def test_a_location_becomes_a_binary_spark_sql_literal_of_its_utf8_bytes(value: str) -> None:
    literal = sql_string(value)
    assert literal.startswith("CAST(X'")
    assert literal.endswith("' AS STRING)")
    assert bytes.fromhex(literal.removeprefix("CAST(X'").removesuffix("' AS STRING)")).decode() == value


def test_shards_a_file_diff_found_are_read_as_of_their_snapshot_together_or_one_by_one() -> None:
    def sequence(snapshot: int) -> int:
        return snapshot

    found = [shard(1, read_snapshot=300), shard(2, stream="b", read_snapshot=300)]
    assert batch_span(found, sequence) == AsOf(300), "one scan as of the head the diff reached"
    ranged = shard(3, stream="c", from_snapshot=101, to_snapshot=105)
    assert batch_span([ranged], sequence) == (101, 105)
    assert batch_span([found[0], ranged], sequence) is None, "a mix is read one by one"
    assert batch_span([found[0], shard(4, read_snapshot=301)], sequence) is None
    assert shard_span(found[0]) == AsOf(300)
    assert shard_span(ranged) == (101, 105)


def test_shards_cut_at_a_row_id_watermark_are_read_together_only_with_the_same_one() -> None:
    def sequence(snapshot: int) -> int:
        return snapshot

    cut = [shard(1, read_snapshot=300, min_row_id=70), shard(2, stream="b", read_snapshot=300, min_row_id=70)]
    assert batch_span(cut, sequence) == AsOf(300, 70)
    assert shard_span(cut[0]) == AsOf(300, 70)
    assert batch_span([cut[0], shard(3, read_snapshot=300)], sequence) is None
    assert cut[0].found_by() == "row_ids"
