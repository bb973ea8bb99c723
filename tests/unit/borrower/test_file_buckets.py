"""by_file's buckets: each reference in the bucket Spark's pmod picks, a power of two of them, a few in each."""

from __future__ import annotations

from datetime import date

import pytest

from icegroup.spark_jobs.row_files import BUCKET_KEYS, MIN_BUCKETS, file_buckets, sql_type


def spark_pmod(value: int, modulus: int) -> int:
    """Spark's ``pmod`` of two longs, as Java computes it: the remainder keeps the dividend's sign, then is shifted."""
    remainder = abs(value) % modulus * (1 if value >= 0 else -1)
    return remainder + modulus if remainder < 0 else remainder


@pytest.mark.parametrize("count", [0, 1, 4, 5, 9, 100, 256, 257, 1000])
def test_each_reference_is_in_the_bucket_pmod_picks_and_buckets_hold_a_few(count: int) -> None:
    refs = {(-1) ** n * (n * 2_654_435_761 + 7) << 20: n for n in range(count)}

    buckets = file_buckets(refs)

    assert len(buckets) & (len(buckets) - 1) == 0, "a power of two"
    assert len(buckets) == MIN_BUCKETS or len(refs) > BUCKET_KEYS * len(buckets) // 2
    assert len(buckets) == MIN_BUCKETS or count > BUCKET_KEYS * MIN_BUCKETS, "most leases run one class"
    assert len(refs) <= BUCKET_KEYS * len(buckets)
    placed = {ref: (index, value) for index, bucket in enumerate(buckets) for ref, value in bucket}
    assert placed == {ref: (spark_pmod(ref, len(buckets)), value) for ref, value in refs.items()}


def test_the_sql_type_of_each_kind_of_value() -> None:
    assert [sql_type(7), sql_type(date(2026, 1, 1)), sql_type("2026-01-01-10")] == ["bigint", "date", "string"]
