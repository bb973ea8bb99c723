"""Poison shards: redelivered with backoff up to max_deliver, then the group stops or the shard is parked."""

from __future__ import annotations

import re

import pytest
from pyiceberg.catalog import Catalog
from pyspark.sql import SparkSession

from icegroup.iceberg.config.lakehouse import LakehouseConfig
from icegroup.iceberg.describe import describe_group
from icegroup.iceberg.errors import GroupStopped, NotCaughtUp, PoisonShard
from icegroup.iceberg.leader import tick
from icegroup.iceberg.protocol.dead_letters import PARKED, STOPPED
from icegroup.iceberg.protocol.liveness import RunState
from icegroup.iceberg.protocol.state import LeasePhase
from icegroup.iceberg.store.dead_letters import open_letters, redrive
from icegroup.iceberg.verify import verify_group
from tests.consuming import consume
from tests.factories import MakeGroup, append_batches, create_source
from tests.integration.helpers import drive, quiet

pytestmark = pytest.mark.spark

POISON = "tests.integration.transforms:fail_on_apac"


def test_a_poison_shard_stops_the_group_naming_the_shard_until_redriven(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group(transform=POISON, max_deliver=2, deliver_backoff_s=0.1, max_borrowers=3)
    append_batches(create_source(catalog, group.source), 1, 9)
    lines: list[str] = []

    with pytest.raises(PoisonShard, match="failed 2 deliveries and stopped the group") as caught:
        consume(
            lambda: spark, lakehouse, group, "run-1", lambda _: RunState.MISSING, progress=lines.append, max_wait_s=5
        )

    (letter,) = open_letters(catalog, group.name).values()
    assert letter.action == STOPPED
    assert letter.shard_id in str(caught.value)
    assert "poison row" in letter.error
    assert any("delivery 1/2 failed" in line and "again in 0.1s" in line for line in lines)
    # The run's last tick may still list a lease that committed since: one lease or more is handed back.
    assert any(re.search(r"this run ended; its (lease is|\d leases are) handed back", line) for line in lines), lines
    view = describe_group(catalog, group)
    assert view.status == "stopped (poison shard; see icegroup dead-letters)"
    (parked,) = view.holds
    assert parked.waits == f"on a poison shard; waits for `icegroup redrive {group.name} --execute` after the fix"
    assert view.leases_in_flight == 0, "the run ended: nothing is in flight"
    assert view.leases_parked == 1, "only the lease on the poison shard is left, parked"
    stopped = tick(catalog, group, lambda _: RunState.FAILED)
    assert stopped.stopped
    assert not [x for x in stopped.launch if x.attempt == 0]
    assert letter.shard_id in stopped.stop_message()
    assert f"icegroup redrive {group.name}" in stopped.stop_message()
    with pytest.raises(GroupStopped, match=letter.shard_id):
        consume(lambda: spark, lakehouse, group, "run-2", lambda _: RunState.FAILED, progress=quiet, max_wait_s=5)

    # The fix is a new transform path, a pinned-config change the group must be told to accept.
    fixed = make_group(max_borrowers=3, on_change="continue")
    assert [d.shard_id for d in redrive(catalog, group.name)] == [letter.shard_id]
    drive(spark, lakehouse, fixed, observe=lambda _: RunState.FAILED, max_ticks=6)
    check = verify_group(catalog, fixed, key="event_id")
    assert check.ok
    assert check.found == 9


def test_a_parked_shard_holds_its_stream_while_the_others_go_on(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group(transform=POISON, max_deliver=1, on_poison="park", max_borrowers=1, lease_max_shards=8)
    source = create_source(catalog, group.source)
    append_batches(source, 2, 9)

    with pytest.raises(NotCaughtUp, match=r"is parked on a poison shard: see `icegroup dead-letters"):
        consume(lambda: spark, lakehouse, group, "run-1", lambda _: RunState.MISSING, progress=quiet, max_wait_s=3)

    letters = open_letters(catalog, group.name)
    assert {d.action for d in letters.values()} == {PARKED}
    assert {d.stream for d in letters.values()} == {next(iter(letters.values())).stream}
    state = tick(catalog, group, lambda _: RunState.FAILED).state
    parked = [lease for lease in state.leases.values() if lease.phase is LeasePhase.PARKED]
    assert len(parked) == 1
    assert "apac" in parked[0].streams[0]
    check = verify_group(catalog, group, key="event_id")
    assert check.missing == 6, "eu and us went on"
    assert check.duplicates == 0, "eu and us went on"
    assert check.found == check.expected - 6, "eu and us went on"

    redrive(catalog, group.name)
    fixed = make_group(max_borrowers=1, on_poison="park", lease_max_shards=8, on_change="continue")
    drive(spark, lakehouse, fixed, observe=lambda _: RunState.FAILED, max_ticks=6)
    assert verify_group(catalog, fixed, key="event_id").ok


def test_a_transform_that_raises_in_a_spark_task_is_reported_as_its_own_error(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group(transform="tests.integration.transforms:reject_large_amounts", max_deliver=1, max_borrowers=1)
    append_batches(create_source(catalog, group.source), 1, 30)

    with pytest.raises(PoisonShard) as caught:
        consume(lambda: spark, lakehouse, group, "run-1", lambda _: RunState.MISSING, progress=quiet, max_wait_s=5)

    (letter,) = open_letters(catalog, group.name).values()
    for said in (str(caught.value), letter.error):
        assert "ValueError: amount " in said
        assert "is over the limit (at transforms.py:" in said
        assert "in _checked_amount)" in said
        assert "An exception was thrown from the Python worker" not in said
    assert verify_group(catalog, group, key="event_id").found == 0, "nothing of the shard was committed"
