"""The snapshot summary keys that the Python and the Java side of the fenced commit share.

Python writes the stage token and the commit's lineage; the Java commit finds the staged snapshot
by its token and refuses a shard that a summary already carries. A key spelt differently on one
side would silently turn that check off, so the keys are pinned here against the Java source.
"""

from __future__ import annotations

import re

from icegroup.iceberg.protocol.sink_commit import (
    KEY_GROUP,
    KEY_REPLAY,
    KEY_SHARD_IDS,
    KEY_SHARDS,
    KEY_STAGE,
    KEY_TOKEN,
    commit_properties,
)
from tests.conftest import repo_root
from tests.factories import shard

JAVA = repo_root() / "spark_jobs/sink/jvm/src/main/java/icegroup/commit/FencedCommit.java"
SHARED = {
    "STAGE_KEY": KEY_STAGE,
    "SHARD_IDS_KEY": KEY_SHARD_IDS,
    "SHARDS_KEY": KEY_SHARDS,
    "GROUP_KEY": KEY_GROUP,
    "TOKEN_KEY": KEY_TOKEN,
    "REPLAY_KEY": KEY_REPLAY,
}


def java_keys() -> dict[str, str]:
    """Every ``public static final String *_KEY`` constant of FencedCommit.java."""
    found = re.findall(r'public static final String (\w+_KEY) = "([^"]*)";', JAVA.read_text())
    return dict(found)


def test_every_key_the_java_commit_uses_is_spelt_as_python_spells_it() -> None:
    assert java_keys() == SHARED


def test_the_java_shard_check_never_matches_a_substring() -> None:
    """How the check behaves is tested in the JVM (tests/integration/test_shard_id_check.py).

    The one substring match allowed is on a server's error message: the lost sequence-number race.
    """
    uses = [line for line in JAVA.read_text().splitlines() if ".contains(" in line]
    assert len(uses) == 1
    assert 'message.contains("Cannot add snapshot with sequence number")' in uses[0]


def test_a_commit_carries_its_shard_id_under_its_own_key() -> None:
    properties = commit_properties("orders", "demo.events", "fedcba9876543210", 0, 1, [shard(7)])

    assert properties[KEY_SHARD_IDS] == shard(7).shard_id
    assert properties[KEY_GROUP] == "orders"
