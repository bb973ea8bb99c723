"""The Java commit's shard check, called in the real JVM: shard ids are compared exactly, old commits too."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pyspark.sql import SparkSession

from icegroup.iceberg.protocol.sink_commit import KEY_SHARD_IDS, KEY_SHARDS

pytestmark = pytest.mark.spark


def carries(spark: SparkSession, summary: dict[str, str], shard_id: str) -> bool:
    """``FencedCommit.carriesShard`` on a snapshot summary."""
    jvm: Any = spark._jvm
    java_summary = jvm.java.util.HashMap()
    for key, value in summary.items():
        java_summary.put(key, value)
    return bool(jvm.icegroup.commit.FencedCommit.carriesShard(java_summary, shard_id))


@pytest.mark.parametrize(
    ("summary", "shard_id", "expected"),
    [
        pytest.param({KEY_SHARD_IDS: "aaaa,bbbb"}, "bbbb", True, id="listed"),
        pytest.param({KEY_SHARD_IDS: "aaaa,bbbb"}, "bbb", False, id="a-part-of-an-id-is-not-the-id"),
        pytest.param({KEY_SHARD_IDS: "aaaabbbb"}, "bbbb", False, id="no-substring-match"),
        pytest.param({KEY_SHARDS: json.dumps([{"id": "aaaa"}, {"id": "bbbb"}])}, "bbbb", True, id="old-commit"),
        pytest.param({KEY_SHARDS: json.dumps([{"id": "aaaabbbb"}])}, "bbbb", False, id="old-commit-exact"),
        pytest.param(
            {KEY_SHARD_IDS: "aaaa", KEY_SHARDS: json.dumps([{"id": "bbbb"}])}, "bbbb", False, id="the-own-key-wins"
        ),
        pytest.param({}, "bbbb", False, id="not-an-icegroup-commit"),
    ],
)
def test_the_commit_check_compares_shard_ids_exactly(
    spark: SparkSession, summary: dict[str, str], shard_id: str, expected: bool
) -> None:
    assert carries(spark, summary, shard_id) is expected
