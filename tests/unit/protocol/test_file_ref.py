"""The source-file reference sink rows carry: XXH64 with Spark's seed, computed without Spark."""

from __future__ import annotations

import pytest

from icegroup.iceberg.protocol.file_ref import SPARK_SEED, file_ref, unambiguous, xxhash64


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"", 0xEF46DB3751D8E999),
        (b"a", 0xD24EC4F1A98C6E5B),
        (b"abc", 0x44BC2CF5AD770999),
        (b"Nobody inspects the spammish repetition", 0xFBCEA83C8A378BF1),
    ],
    ids=["empty", "one byte", "a word", "past 32 bytes"],
)
def test_xxh64_matches_the_reference_vectors(data: bytes, expected: int) -> None:
    assert xxhash64(data, seed=0) % (1 << 64) == expected


def test_a_reference_is_a_signed_long_with_sparks_seed() -> None:
    refs = [file_ref(f"file:/lake/warehouse/shop/orders/data/0000{i}-{i}.parquet") for i in range(200)]

    assert all(-(1 << 63) <= ref < 1 << 63 for ref in refs)
    assert any(ref < 0 for ref in refs), "Spark's longs are signed, and so are these"
    assert file_ref("x") == xxhash64(b"x", seed=SPARK_SEED)


def test_one_file_one_reference_and_a_shared_one_is_caught() -> None:
    files = [f"/w/data/{i}.parquet" for i in range(1000)]

    assert unambiguous(files)
    assert not unambiguous([files[0], files[1], files[0]])
