"""A Borrower on a shard longer than ``lease_timeout_s`` renews its lease while its Spark tasks complete.

The shard takes about 16 s (32 rows, a second each, on two cores) under a lease timeout of 10 s.
Its Borrower runs on a ``LeaseRunner``, whose renewer counts the lease's completed Spark tasks
every third of the timeout and renews the lease while they grow. A Leader tick past the deadline
the lease was granted with keeps the lease (no re-grant, no terminate): the renewal moved it.
Without the renewal that tick revokes the lease and fences the Borrower out of its own commit.
"""

from __future__ import annotations

import time

import pytest
from pyiceberg.catalog import Catalog
from pyspark.sql import SparkSession

from icegroup.iceberg.config.lakehouse import LakehouseConfig
from icegroup.iceberg.leader import tick
from icegroup.iceberg.protocol.liveness import RunState
from icegroup.iceberg.store.renewals import read_renewals
from icegroup.iceberg.verify import verify_group
from icegroup.spark_jobs.borrower.runner import LeaseRunner
from tests.factories import MakeGroup, create_source, events
from tests.integration.helpers import wait_for

pytestmark = pytest.mark.spark

RUN = "renewal-test"


def test_a_borrower_renews_its_lease_while_a_long_shard_progresses(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group(lease_timeout_s=10, transform="tests.integration.transforms:one_second_a_row")
    create_source(catalog, group.source).append(events(1, 32, seed=3, regions=("eu",)))
    granted = tick(catalog, group, lambda lease: RunState.MISSING, owner_run_id=RUN)
    (lease,) = granted.launch
    said: list[str] = []

    with LeaseRunner(lambda: spark, lakehouse, group, RUN, slots=1, progress=said.append) as runner:
        runner.start(lease, [granted.state.shards[s] for s in lease.shard_ids])
        wait_for(lambda: time.time() * 1000 > lease.deadline_ms + 1000, 30, "the granted deadline to pass")
        assert runner.working, "the shard must still be running past its granted deadline for this test to mean much"

        later = tick(catalog, group, lambda seen: RunState.RUNNING, owner_run_id=RUN)

        assert later.regranted == 0, "a lease that renewed itself is not revoked"
        assert not later.terminate
        kept = later.state.leases[lease.lease_id]
        assert kept.attempt == lease.attempt
        assert kept.deadline_ms > time.time() * 1000, "its deadline moved past now"
        assert read_renewals(catalog, group.name)[lease.lease_id][0] == lease.attempt
        (report,) = [r for _, r in runner.finished(None)]

    assert len(report.committed) == 1
    assert any("still working" in line and "deadline renewed" in line for line in said), said
    check = verify_group(catalog, group, key="event_id")
    assert check.ok, check
