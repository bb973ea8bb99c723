"""Dagster's standard table metadata for an Iceberg table: name, location, rows and columns.

Dagster's catalog view reads these keys (``dagster/table_name``, ``dagster/uri``,
``dagster/row_count``, ``dagster/column_schema``) from an asset's definition and its latest
events; they are the documented standard keys, written here as plain metadata because Dagster 1.13
does not export its typed ``TableMetadataSet``.
"""

from typing import Any

import dagster as dg
from pyiceberg.schema import Schema
from pyiceberg.table import Table

TABLE_NAME = "dagster/table_name"
URI = "dagster/uri"
ROW_COUNT = "dagster/row_count"
COLUMN_SCHEMA = "dagster/column_schema"


def column_schema(schema: Schema) -> dg.TableSchema:
    """The table's columns as Dagster shows them: name, Iceberg type, nullability and doc."""
    return dg.TableSchema(
        columns=[
            dg.TableColumn(
                name=column.name,
                type=str(column.field_type),
                description=column.doc,
                constraints=dg.TableColumnConstraints(nullable=not column.required),
            )
            for column in schema.fields
        ]
    )


def table_metadata(table: Table, name: str) -> dict[str, Any]:
    """What Dagster shows of a table as it is now: its name, location, rows (the current snapshot's) and columns."""
    snapshot = table.current_snapshot()
    summary = snapshot.summary if snapshot is not None else None
    rows = int(summary.additional_properties.get("total-records", "0")) if summary is not None else 0
    return {
        TABLE_NAME: name,
        URI: table.location(),
        ROW_COUNT: dg.MetadataValue.int(rows),
        COLUMN_SCHEMA: dg.MetadataValue.table_schema(column_schema(table.schema())),
    }
