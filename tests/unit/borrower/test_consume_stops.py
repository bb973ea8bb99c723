"""A lease of this process that stops the group: `consume` raises the lease's own error, however the tick raced it."""

from __future__ import annotations

import threading
import time

import pytest
from pyiceberg.catalog import Catalog
from pyspark.sql import SparkSession

from icegroup.iceberg.config.lakehouse import LakehouseConfig
from icegroup.iceberg.errors import PoisonShard
from icegroup.iceberg.protocol.liveness import RunState
from icegroup.iceberg.protocol.shards import Shard
from icegroup.iceberg.protocol.state import Lease
from icegroup.spark_jobs.borrower import runner
from icegroup.spark_jobs.borrower.attempt import LeaseReport
from icegroup.spark_jobs.borrower.redelivery import record_poison_shard
from tests.consuming import consume
from tests.factories import MakeGroup, append_batches, create_source


def test_the_poison_error_wins_over_the_stop_a_tick_saw_first(
    catalog: Catalog, lakehouse: LakehouseConfig, make_group: MakeGroup, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The apac lease stops the group; its error reaches the loop after the other leases ended and a tick saw the stop.

    That was the order of a run of ``tests/integration/test_poison.py`` under load: the stop named the
    shard, but not the deliveries that failed.
    """
    group = make_group(max_borrowers=3, max_deliver=1)
    append_batches(create_source(catalog, group.source), 1, 9)
    recorded = threading.Event()

    def run_lease(
        session: SparkSession | None,
        lake: LakehouseConfig,
        config: object,
        lease: Lease,
        shards: list[Shard],
        *_: object,
    ) -> LeaseReport:
        if "apac" in shards[0].stream:
            error = record_poison_shard(catalog, group, lease, shards[0], RuntimeError("poison row"))
            recorded.set()
            time.sleep(1.0)
            raise error
        assert recorded.wait(10)
        return LeaseReport(lease.lease_id, lease.attempt, lease.epoch, shards[0].window_start_ms or 0, len(shards))

    monkeypatch.setattr(runner, "run_lease", run_lease)
    monkeypatch.setattr(runner, "use_pool", lambda *_: None)

    with pytest.raises(PoisonShard, match=r"failed 1 deliveries and stopped the group: .*poison row"):
        consume(lambda: None, lakehouse, group, "run-1", lambda _: RunState.MISSING, progress=lambda _: None)
