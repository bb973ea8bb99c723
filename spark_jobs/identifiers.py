"""Column names and types as Spark SQL reads them: quoted identifiers, whatever the names hold.

Users' column names, and the field names of their structs (JSON keys such as ``user-agent``), hold
dots, spaces, hyphens and backticks. A name written into SQL or into ``F.col`` bare, or in
backticks without doubling its own, is read as a path, or breaks the statement.
"""

from __future__ import annotations

from pyspark.sql.types import ArrayType, DataType, MapType, StructType


def quoted(name: str) -> str:
    """``name`` as one Spark SQL identifier: in backticks, its own backticks doubled."""
    return "`" + name.replace("`", "``") + "`"


def ddl_type(data_type: DataType) -> str:
    """``data_type`` as Spark SQL DDL with every nested field's name quoted (``simpleString`` leaves them bare)."""
    if isinstance(data_type, StructType):
        return "struct<" + ",".join(f"{quoted(f.name)}:{ddl_type(f.dataType)}" for f in data_type.fields) + ">"
    if isinstance(data_type, ArrayType):
        return f"array<{ddl_type(data_type.elementType)}>"
    if isinstance(data_type, MapType):
        return f"map<{ddl_type(data_type.keyType)},{ddl_type(data_type.valueType)}>"
    return data_type.simpleString()
