"""The registry dropped in the middle of consumption: rebuilt from the sink, and the sink equals the source.

Real Spark Borrowers and the real fenced commit. A lease of the lost registry that was granted but
not yet run is run after the rebuild: the raised epoch fence refuses its commit.
"""

from __future__ import annotations

import pytest
from pyiceberg.catalog import Catalog
from pyspark.sql import SparkSession

from icegroup.iceberg.config.lakehouse import LakehouseConfig
from icegroup.iceberg.errors import StaleLease
from icegroup.iceberg.leader import tick
from icegroup.iceberg.protocol.liveness import RunState
from icegroup.iceberg.store.registry import registry_identifier
from icegroup.iceberg.store.sink_history import read_sink_history
from icegroup.iceberg.verify import verify_group
from icegroup.spark_jobs.borrower.lease import run_lease
from tests.factories import MakeGroup, append_batches, create_source
from tests.integration.helpers import drive, quiet

pytestmark = pytest.mark.spark


def test_dropping_the_registry_mid_consumption_loses_and_duplicates_nothing(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group(shard_caps={"max_files": 1}, lease_max_shards=2, max_borrowers=2, leases_per_borrower=1)
    append_batches(create_source(catalog, group.source), 4, 40)
    first = tick(catalog, group, lambda _: RunState.MISSING)
    done, orphan = first.launch
    run_lease(spark, lakehouse, group, done, [first.state.shards[s] for s in done.shard_ids], progress=quiet)
    append_batches(catalog.load_table(group.source), 2, 40)

    catalog.drop_table(registry_identifier(group.name))
    ticks, _ = drive(spark, lakehouse, group, borrowers=1)

    assert ticks[0].rebuilt is not None
    assert ticks[0].state.epoch == 1
    with pytest.raises(StaleLease, match="epoch"):
        run_lease(spark, lakehouse, group, orphan, [first.state.shards[s] for s in orphan.shard_ids], progress=quiet)
    assert verify_group(catalog, group, key="event_id").ok, verify_group(catalog, group, key="event_id").line()
    commits = read_sink_history(catalog, group.sink, group.name, None).commits
    assert {c.epoch for c in commits} == {0, 1}
    assert all(c.origin is not None and c.origin.config_hash == group.config_hash for c in commits)
