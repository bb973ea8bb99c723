"""A reset's preview equals what executing it does, on random histories, some with their unconsumed snapshots expired.

Each scenario draws a history: appends of random sizes, a consume, more appends, and, half the
time, an expiry that takes every snapshot no ref keeps (pyiceberg's, the harshest). It then draws a
target: earliest, latest, a snapshot of the history, or a shift of a few snapshots either way. The
preview's figures are checked against what happens. The rows it says are consumed again are the
rows the execution deletes from the sink, and the rows it says are skipped are the rows missing
once the group has caught up again. The Borrowers are the tests' own, committing each shard's row
count without Spark (``tests/sink_commits.py``), so only the planning and the reset are under test.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime

import pytest
from pyiceberg.catalog import Catalog

from icegroup.iceberg.protocol.reset import ResetTarget
from icegroup.iceberg.reset import execute_reset, plan_reset
from tests.factories import MakeGroup, append_batches, create_source
from tests.sink_commits import consume_all


def sink_rows(catalog: Catalog, sink: str) -> int:
    """Rows in the sink now."""
    return len(catalog.load_table(sink).scan().to_arrow())


def draw_target(rng: random.Random, catalog: Catalog, source: str) -> ResetTarget:
    """One of the targets an operator would type, against this source's history."""
    kind = rng.choice(["earliest", "latest", "snapshot", "shift"])
    if kind == "snapshot":
        snapshots = [s.snapshot_id for s in catalog.load_table(source).snapshots()]
        return ResetTarget("snapshot", str(rng.choice(snapshots[-3:])))
    if kind == "shift":
        return ResetTarget("shift", str(rng.choice([-2, -1, 1, 2])))
    return ResetTarget(kind)  # type: ignore[arg-type]


@pytest.mark.parametrize("seed", range(16))
def test_a_reset_does_what_its_preview_says_on_a_random_history(
    catalog: Catalog, make_group: MakeGroup, seed: int
) -> None:
    rng = random.Random(seed)
    group = make_group(shard_caps={"max_files": rng.choice([1, 4])})
    source = create_source(catalog, group.source)
    append_batches(source, rng.randint(2, 4), rng.choice([8, 20]))
    consume_all(catalog, group)
    append_batches(catalog.load_table(group.source), rng.randint(0, 4), rng.choice([8, 20]))
    if rng.random() < 0.5:
        catalog.load_table(group.source).maintenance.expire_snapshots().older_than(datetime.now(UTC)).commit()
    target = draw_target(rng, catalog, group.source)
    try:
        preview = plan_reset(catalog, group, target)
    except Exception as refused:  # a target the history cannot serve is refused, and so is its execution
        with pytest.raises(type(refused)):
            execute_reset(catalog, group, target)
        return
    reconsumed = sum(move.reconsumed_rows for move in preview.moves)
    skipped = sum(move.skipped_rows for move in preview.moves)
    before = sink_rows(catalog, group.sink)

    execute_reset(catalog, group, target)
    deleted = before - sink_rows(catalog, group.sink)
    consume_all(catalog, group)

    live = len(catalog.load_table(group.source).scan().to_arrow())
    assert deleted == reconsumed, f"{target.describe()}: the preview said {reconsumed} rows are consumed again"
    assert live - sink_rows(catalog, group.sink) == skipped, f"{target.describe()}: the preview said {skipped} skipped"
