"""Streams for every partition layout: unpartitioned, transforms other than identity, several fields."""

from __future__ import annotations

import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.transforms import BucketTransform, DayTransform, IdentityTransform
from pyspark.sql import SparkSession

from icegroup.iceberg.config.lakehouse import LakehouseConfig
from icegroup.iceberg.store.registry import load_state
from icegroup.iceberg.verify import verify_group
from tests.factories import SCHEMA, MakeGroup, append_batches
from tests.integration.helpers import drive

pytestmark = pytest.mark.spark

LAYOUTS = {
    "unpartitioned": (PartitionSpec(), 1),
    "bucket": (PartitionSpec(PartitionField(5, 1000, BucketTransform(4), "user_bucket")), 4),
    "day_and_region": (
        PartitionSpec(
            PartitionField(3, 1000, DayTransform(), "event_day"),
            PartitionField(2, 1001, IdentityTransform(), "region"),
        ),
        3,
    ),
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_group_consumes_exactly_once_whatever_the_partitioning(
    layout: str,
    spark: SparkSession,
    lakehouse: LakehouseConfig,
    catalog: Catalog,
    make_group: MakeGroup,
) -> None:
    spec, streams = LAYOUTS[layout]
    group = make_group(max_borrowers=2, shard_caps={"max_files": 3})
    catalog.create_namespace_if_not_exists(group.source.split(".")[0])
    source = catalog.create_table(group.source, schema=SCHEMA, partition_spec=spec)
    append_batches(source, 4, 40)

    drive(spark, lakehouse, group, borrowers=2)

    assert verify_group(catalog, group, key="event_id").ok
    state = load_state(catalog, group.name).state
    assert state is not None
    assert len(state.streams) == streams
    if layout == "unpartitioned":
        assert list(state.streams) == ["0:unpartitioned"]
