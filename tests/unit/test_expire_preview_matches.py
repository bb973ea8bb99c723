"""``icegroup expire``'s preview equals what executing it does, on random histories, some already expired elsewhere.

Each scenario draws appends of random sizes, a consume, more appends (a group that lags), and, half
the time, pyiceberg's own expiry run first, which takes what no ref keeps. The preview's verdict
is then executed. Every table must lose exactly the snapshots the preview named and keep the
ones it said it keeps. The group must then catch up with nothing lost: icegroup's expiry takes
only what no group needs. The Borrowers are the tests' own (``tests/sink_commits.py``), so there is
no Spark.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest
from pyiceberg.catalog import Catalog

from icegroup.iceberg.protocol.retention import StateRetention
from icegroup.iceberg.retention import expire
from tests.factories import MakeGroup, append_batches, create_source
from tests.sink_commits import consume_all


def snapshot_ids(catalog: Catalog, table: str) -> set[int]:
    """The snapshots the table's metadata holds now."""
    return {s.snapshot_id for s in catalog.load_table(table).snapshots()}


@pytest.mark.parametrize("seed", range(8))
def test_expire_does_what_its_preview_says_on_a_random_history(
    catalog: Catalog, make_group: MakeGroup, seed: int
) -> None:
    rng = random.Random(seed)
    group = make_group(shard_caps={"max_files": rng.choice([1, 4])}, replay_retention="0s")
    append_batches(create_source(catalog, group.source), rng.randint(2, 5), rng.choice([8, 20]))
    consume_all(catalog, group)
    append_batches(catalog.load_table(group.source), rng.randint(0, 4), rng.choice([8, 20]))
    if rng.random() < 0.5:
        catalog.load_table(group.source).maintenance.expire_snapshots().older_than(datetime.now(UTC)).commit()
    keep = StateRetention(keep_last=rng.choice([1, 3]), keep_for=timedelta(0))
    groups = {group.name: group}

    preview = expire(catalog, groups, keep, execute=False)
    before = {plan.table: snapshot_ids(catalog, plan.table) for plan in preview}
    executed = expire(catalog, groups, keep, execute=True)

    assert [p.table for p in executed] == [p.table for p in preview]
    for said, did in zip(preview, executed, strict=True):
        named = {s.snapshot_id for s in said.judged.expire} | set(said.staged)
        assert {s.snapshot_id for s in did.judged.expire} | set(did.staged) == named, f"{said.table}: the same verdict"
        assert did.error is None, did.error
        after = snapshot_ids(catalog, said.table)
        assert before[said.table] - after == named, f"{said.table}: it expired what the preview named, and only that"
        assert {s.snapshot_id for s in said.judged.keep} <= after, f"{said.table}: what the preview kept is there"

    consume_all(catalog, group)
    live = len(catalog.load_table(group.source).scan().to_arrow())
    assert len(catalog.load_table(group.sink).scan().to_arrow()) == live, "the group caught up, nothing lost"
