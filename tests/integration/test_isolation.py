"""Poison isolated to the row: a transform that raises on 3 rows of a 100,000-row shard.

Under ``on_poison: isolate`` the shard's delivery fails, bisection finds the three rows, they go
to the dead-row table with their own errors, and the other 99,997 rows commit exactly once, in the
shard's one fenced commit: the stream goes on. After the fix, ``redrive_rows`` commits the three,
exactly once (a second re-drive commits nothing), and the sink's exactly_once audit holds.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest
from pyiceberg.catalog import Catalog
from pyspark.sql import SparkSession

from icegroup.iceberg.config.lakehouse import LakehouseConfig
from icegroup.iceberg.describe import describe_group
from icegroup.iceberg.errors import PoisonShard
from icegroup.iceberg.protocol.liveness import RunState
from icegroup.iceberg.protocol.sink_commit import KEY_ISOLATED
from icegroup.iceberg.store.dead_letters import open_letters
from icegroup.iceberg.store.dead_rows import ISOLATED, REDRIVEN, latest_rows
from icegroup.iceberg.verify import verify_group
from icegroup.iceberg.window_audit import audit_sink
from icegroup.spark_jobs.redrive_rows import redrive_rows
from tests.consuming import consume
from tests.factories import MakeGroup, append_batches, create_source, events
from tests.integration.helpers import quiet, sink_ids
from tests.integration.transforms import POISON_IDS

pytestmark = pytest.mark.spark

ROWS = 100_000


def test_three_poison_rows_of_a_100000_row_shard_are_isolated_and_redriven_exactly_once(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group(transform="tests.integration.transforms:fail_on_three_ids", on_poison="isolate", max_deliver=1)
    source = create_source(catalog, group.source)
    source.append(events(1, ROWS, seed=5, regions=("eu",)))
    lines: list[str] = []

    summary = consume(lambda: spark, lakehouse, group, "run-1", lambda _: RunState.MISSING, progress=lines.append)

    assert summary.caught_up, "the stream did not stop"
    assert summary.shards == 1
    found = sink_ids(catalog, group)
    assert sum(found.values()) == ROWS - 3
    assert max(found.values()) == 1, "each of the 99,997 rows once"
    assert set(range(1, ROWS + 1)) - set(found) == set(POISON_IDS)
    dead = sorted(latest_rows(catalog, group.name).values(), key=lambda r: json.loads(r.row)["event_id"])
    assert [json.loads(r.row)["event_id"] for r in dead] == list(POISON_IDS)
    assert [r.action for r in dead] == [ISOLATED] * 3
    for row, event_id in zip(dead, POISON_IDS, strict=True):
        assert f"poison event {event_id}" in row.error, "each row with its own exception"
        assert row.file.endswith(".parquet")
    commit = catalog.load_table(group.sink).current_snapshot()
    assert commit is not None
    assert commit.summary is not None
    isolated = json.loads(commit.summary.additional_properties[KEY_ISOLATED])
    assert sum(len(positions) for shard in isolated.values() for positions in shard.values()) == 3
    assert any("3 rows isolated in" in line for line in lines), lines
    assert not describe_group(catalog, group).status.startswith("stopped")

    with pytest.raises(PoisonShard, match=r"3 isolated row\(s\) of shard \w+ still fail .*poison event .*Nothing was"):
        redrive_rows(spark, lakehouse, group, "redrive-0", quiet)  # before the fix: the rows' own error, exit 2
    assert sum(sink_ids(catalog, group).values()) == ROWS - 3, "nothing was committed"

    fixed = group.model_copy(update={"transform": "icegroup.spark_jobs.transforms:identity", "on_change": "continue"})
    (redriven,) = redrive_rows(spark, lakehouse, fixed, "redrive-1", quiet)

    assert redriven.rows == 3
    assert redrive_rows(spark, lakehouse, fixed, "redrive-2", quiet) == [], "a second re-drive commits nothing"
    assert Counter(sink_ids(catalog, group)) == Counter(range(1, ROWS + 1))
    assert verify_group(catalog, fixed, key="event_id").ok
    assert {r.action for r in latest_rows(catalog, group.name).values()} == {REDRIVEN}
    assert {r.sink_snapshot for r in latest_rows(catalog, group.name).values()} == {redriven.sink_snapshot}
    audit = audit_sink(catalog, fixed)
    assert audit.ok, audit

    append_batches(source, 1, 30)
    after = consume(lambda: spark, lakehouse, fixed, "run-2", lambda _: RunState.MISSING, progress=quiet)
    assert after.caught_up
    assert verify_group(catalog, fixed, key="event_id").ok


def test_a_python_udf_that_raises_on_some_rows_is_isolated_through_its_workers(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group(
        transform="tests.integration.transforms:reject_blocked_users", on_poison="isolate", max_deliver=1
    )
    source = create_source(catalog, group.source)
    source.append(events(1, 2_000, seed=9, regions=("us",)))
    users = source.scan(selected_fields=("user_id",)).to_arrow().column("user_id").to_pylist()
    blocked = [u for u in users if u % 97 == 0]
    assert 0 < len(blocked) <= group.max_isolated_rows

    summary = consume(lambda: spark, lakehouse, group, "run-1", lambda _: RunState.MISSING, progress=quiet)

    assert summary.caught_up
    dead = list(latest_rows(catalog, group.name).values())
    assert len(dead) == len(blocked)
    assert all("ValueError: user" in row.error and "is blocked" in row.error for row in dead), dead[0].error
    assert sum(sink_ids(catalog, group).values()) == 2_000 - len(blocked)


def test_a_shard_with_more_bad_rows_than_max_isolated_rows_stops_saying_why_and_which_setting_to_raise(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group(
        transform="tests.integration.transforms:reject_blocked_users",
        on_poison="isolate",
        max_deliver=1,
        max_isolated_rows=1,
    )
    source = create_source(catalog, group.source)
    source.append(events(1, 2_000, seed=9, regions=("us",)))

    with pytest.raises(PoisonShard) as caught:
        consume(lambda: spark, lakehouse, group, "run-1", lambda _: RunState.MISSING, progress=quiet, max_wait_s=5)

    why = (
        "on_poison: isolate could not isolate its rows: more than max_isolated_rows (1) rows fail; "
        "raise max_isolated_rows"
    )
    (letter,) = open_letters(catalog, group.name).values()
    assert why in str(caught.value)
    assert why in letter.error, "dead-letters and describe show it too"
    assert "ValueError: user" in letter.error, "beside the rows' own error"
    assert latest_rows(catalog, group.name) == {}, "no row was isolated"
