"""A source that is an Iceberg view, created by Spark, is named as a view and the remedy given."""

from __future__ import annotations

import pytest
from pyiceberg.catalog import Catalog
from pyspark.sql import SparkSession

from icegroup.iceberg.config.lakehouse import LakehouseConfig
from icegroup.iceberg.errors import SourceError
from icegroup.iceberg.leader import tick
from icegroup.iceberg.protocol.liveness import RunState
from icegroup.iceberg.store.registry import registry_identifier
from tests.factories import MakeGroup, append_batches, create_source

pytestmark = pytest.mark.spark


def test_a_view_given_as_the_source_is_named_as_a_view(
    spark: SparkSession, spark_lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group()
    lake = spark_lakehouse.catalog_name
    append_batches(create_source(catalog, group.source), 1, 3)
    view = f"{group.source}_eu"
    spark.sql(f"CREATE VIEW {lake}.{view} AS SELECT * FROM {lake}.{group.source} WHERE region = 'eu'")
    on_view = group.model_copy(update={"source": view})

    with pytest.raises(SourceError) as info:
        tick(catalog, on_view, lambda _: RunState.MISSING)

    assert str(info.value) == (
        f"source: {view!r} in catalog {lake!r} is an Iceberg view, not a table; a group consumes a table's "
        "snapshots, so name the table the view reads from"
    )
    assert not catalog.table_exists(registry_identifier(group.name))
