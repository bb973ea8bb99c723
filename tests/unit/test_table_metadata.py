"""Dagster's standard table metadata from an Iceberg table: its columns as Dagster shows them."""

from __future__ import annotations

from pyiceberg.schema import Schema
from pyiceberg.types import DateType, LongType, NestedField, StringType

from icegroup.dagster_project.table_metadata import column_schema


def test_each_column_keeps_its_name_type_nullability_and_doc() -> None:
    schema = Schema(
        NestedField(1, "event_id", LongType(), required=True, doc="the producer's key"),
        NestedField(2, "region", StringType(), required=False),
        NestedField(3, "_ig_window", DateType(), required=False),
    )

    columns = column_schema(schema).columns

    assert [(c.name, c.type, c.constraints.nullable, c.description) for c in columns] == [
        ("event_id", "long", False, "the producer's key"),
        ("region", "string", True, None),
        ("_ig_window", "date", True, None),
    ]
