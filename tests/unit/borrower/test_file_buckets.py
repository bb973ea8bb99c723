"""by_file's buckets: each reference in the bucket Spark's pmod picks, a power of two of them, a few in each."""

from __future__ import annotations

import random
from datetime import date

import pytest

from icegroup.spark_jobs.row_files import BUCKET_KEYS, MIN_BUCKETS, file_buckets, map_value, sql_type


def spark_pmod(value: int, modulus: int) -> int:
    """Spark's ``pmod`` of two longs, as Java computes it: the remainder keeps the dividend's sign, then is shifted."""
    remainder = abs(value) % modulus * (1 if value >= 0 else -1)
    return remainder + modulus if remainder < 0 else remainder


@pytest.mark.parametrize("count", [0, 1, 4, 5, 9, 100, 256, 257, 1000])
def test_each_reference_is_in_the_bucket_pmod_picks_and_buckets_hold_a_few(count: int) -> None:
    draw = random.Random(count)
    refs = {draw.getrandbits(64) - 2**63: n for n in range(count)}  # signed 64-bit, as Spark's xxhash64

    buckets = file_buckets(refs)

    assert len(buckets) & (len(buckets) - 1) == 0, "a power of two"
    assert len(buckets) == MIN_BUCKETS or len(refs) > BUCKET_KEYS * len(buckets) // 2
    assert len(buckets) == MIN_BUCKETS or count > BUCKET_KEYS * MIN_BUCKETS, "most leases run one class"
    assert len(refs) <= BUCKET_KEYS * len(buckets)
    placed = {ref: (index, value) for index, bucket in enumerate(buckets) for ref, value in bucket}
    assert placed == {ref: (spark_pmod(ref, len(buckets)), value) for ref, value in refs.items()}
    assert max(map(len, buckets)) <= 4 * BUCKET_KEYS, "a row looks through a few references"


def test_the_sql_type_of_each_kind_of_value() -> None:
    assert [sql_type(7), sql_type(date(2026, 1, 1)), sql_type("2026-01-01-10")] == ["bigint", "date", "string"]
    assert [map_value(-7), map_value(date(2026, 1, 1))] == ["-7L", "DATE'2026-01-01'"]


def test_negative_references_with_a_remainder_are_placed_as_spark_places_them() -> None:
    refs = {-(2**63): 0, -1: 1, -65: 2, 2**63 - 1: 3}

    assert [index for index, bucket in enumerate(file_buckets(refs)) for _ in bucket] == [0, 63, 63, 63]
    assert spark_pmod(-65, 64) == 63
