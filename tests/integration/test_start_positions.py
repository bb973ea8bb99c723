"""Start positions behave as documented: earliest, latest, a snapshot id (inclusive), a timestamp."""

from __future__ import annotations

import time
from collections import Counter
from datetime import UTC, datetime

import pytest
from pyiceberg.catalog import Catalog
from pyspark.sql import SparkSession

from icegroup.iceberg.config.lakehouse import LakehouseConfig
from icegroup.iceberg.errors import SourceError
from icegroup.iceberg.leader import tick
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.liveness import RunState
from tests.factories import MakeGroup, append_batches, create_source
from tests.integration.helpers import drive

pytestmark = pytest.mark.spark


def consumed(catalog: Catalog, group: GroupConfig) -> list[int]:
    """Sorted event ids in the sink; each must be there once."""
    ids = Counter(catalog.load_table(group.sink).scan(selected_fields=("event_id",)).to_arrow()["event_id"].to_pylist())
    assert set(ids.values()) <= {1}, "duplicates in the sink"
    return sorted(ids)


def three_snapshots(catalog: Catalog, group: GroupConfig) -> list[int]:
    """Append 3 snapshots of 6 events (ids 1-6, 7-12, 13-18), a few ms apart; return their ids."""
    source = create_source(catalog, group.source)
    for _ in range(3):
        append_batches(source, 1, 6)
        time.sleep(0.05)
    return [s.snapshot_id for s in catalog.load_table(group.source).snapshots()]


def test_earliest_consumes_everything(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group(start="earliest")
    three_snapshots(catalog, group)
    drive(spark, lakehouse, group)
    assert consumed(catalog, group) == list(range(1, 19))


def test_latest_consumes_only_what_is_appended_after_the_group_starts(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group(start="latest")
    three_snapshots(catalog, group)
    first = tick(catalog, group, lambda lease: RunState.MISSING)
    assert first.caught_up
    assert not first.launch
    append_batches(catalog.load_table(group.source), 1, 6)
    drive(spark, lakehouse, group)
    assert consumed(catalog, group) == list(range(19, 25))


def test_snapshot_id_start_is_inclusive(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group()
    snapshots = three_snapshots(catalog, group)
    group = make_group(start={"snapshot_id": snapshots[1]})
    drive(spark, lakehouse, group)
    assert consumed(catalog, group) == list(range(7, 19))


def test_timestamp_start_takes_snapshots_committed_at_or_after_it(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group()
    three_snapshots(catalog, group)
    third = catalog.load_table(group.source).snapshots()[2]
    group = make_group(start={"timestamp": datetime.fromtimestamp(third.timestamp_ms / 1000, tz=UTC).isoformat()})
    drive(spark, lakehouse, group)
    assert consumed(catalog, group) == list(range(13, 19))


def test_unknown_start_snapshot_is_a_clear_error(catalog: Catalog, make_group: MakeGroup) -> None:
    group = make_group()
    three_snapshots(catalog, group)
    group = make_group(start={"snapshot_id": 42})
    with pytest.raises(SourceError, match=r"start.snapshot_id: 42 is not a snapshot"):
        tick(catalog, group, lambda lease: RunState.MISSING)
