"""The per-row reference to a source file that sink rows carry: a 64-bit hash of the file's location.

Each sink row made by a row-wise transform carries, in ``_ig_file``, Spark's ``xxhash64`` of the
location of the source file it was read from (``input_file_name()``, evaluated after the
transform, in the same task as the read). A ``long`` costs a fraction of a string column, and it
needs no list of files to decode: a lineage question about a file hashes the file's location as the
table's metadata spells it and asks the sink for the rows of its shards with that hash. Rows whose
transform holds rows back or moves them between tasks (an aggregation, a sort, a join, a Python
UDF) carry null: the Borrower reads the transform's plan and writes no reference where Spark's
answer could name the wrong file (``spark_jobs/row_files.py``).

This module computes the same hash without Spark: XXH64 of the location's UTF-8 bytes with seed 42,
Spark's default (``tests/integration/test_file_ref.py`` checks it against Spark's own).
"""

from __future__ import annotations

from collections.abc import Iterable

SPARK_SEED = 42
_MASK = (1 << 64) - 1
_P1 = 0x9E3779B185EBCA87
_P2 = 0xC2B2AE3D27D4EB4F
_P3 = 0x165667B19E3779F9
_P4 = 0x85EBCA77C2B2AE63
_P5 = 0x27D4EB2F165667C5


def _rotl(value: int, bits: int) -> int:
    return ((value << bits) | (value >> (64 - bits))) & _MASK


def _round(acc: int, lane: int) -> int:
    return (_rotl((acc + lane * _P2) & _MASK, 31) * _P1) & _MASK


def _merge(acc: int, value: int) -> int:
    return ((acc ^ _round(0, value)) * _P1 + _P4) & _MASK


def xxhash64(data: bytes, seed: int = SPARK_SEED) -> int:
    """XXH64 of ``data``, as a signed 64-bit integer like Spark's ``xxhash64`` (a Spark ``long``)."""
    length, offset = len(data), 0
    if length >= 32:
        v1, v2, v3, v4 = (seed + _P1 + _P2) & _MASK, (seed + _P2) & _MASK, seed & _MASK, (seed - _P1) & _MASK
        while offset + 32 <= length:
            lanes = [int.from_bytes(data[offset + i : offset + i + 8], "little") for i in (0, 8, 16, 24)]
            v1, v2, v3, v4 = _round(v1, lanes[0]), _round(v2, lanes[1]), _round(v3, lanes[2]), _round(v4, lanes[3])
            offset += 32
        acc = (_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)) & _MASK
        for v in (v1, v2, v3, v4):
            acc = _merge(acc, v)
    else:
        acc = (seed + _P5) & _MASK
    acc = (acc + length) & _MASK
    while offset + 8 <= length:
        lane = int.from_bytes(data[offset : offset + 8], "little")
        acc = (_rotl(acc ^ _round(0, lane), 27) * _P1 + _P4) & _MASK
        offset += 8
    if offset + 4 <= length:
        lane = int.from_bytes(data[offset : offset + 4], "little")
        acc = (_rotl(acc ^ (lane * _P1 & _MASK), 23) * _P2 + _P3) & _MASK
        offset += 4
    while offset < length:
        acc = (_rotl(acc ^ (data[offset] * _P5 & _MASK), 11) * _P1) & _MASK
        offset += 1
    acc ^= acc >> 33
    acc = (acc * _P2) & _MASK
    acc ^= acc >> 29
    acc = (acc * _P3) & _MASK
    acc ^= acc >> 32
    return acc - (1 << 64) if acc >= 1 << 63 else acc


def file_ref(location: str) -> int:
    """The ``_ig_file`` value of rows read from the file at ``location``, spelled as the table's metadata has it."""
    return xxhash64(location.encode("utf-8"))


def unambiguous(locations: Iterable[str]) -> bool:
    """Whether the files of one shard all have different references, so that a reference names one file.

    Two locations with one 64-bit hash are practically impossible; a lineage answer checks anyway,
    and falls back to the whole shard for a shard where it happened.
    """
    seen = [file_ref(location) for location in locations]
    return len(seen) == len(set(seen))
