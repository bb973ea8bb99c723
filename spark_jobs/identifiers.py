"""A column name as Spark SQL reads it: one quoted identifier, whatever the name holds.

Users' column names hold dots, spaces and backticks. A name written into SQL or into ``F.col``
bare, or in backticks without doubling its own, is read as a path, or breaks the statement.
"""

from __future__ import annotations


def quoted(name: str) -> str:
    """``name`` as one Spark SQL identifier: in backticks, its own backticks doubled."""
    return "`" + name.replace("`", "``") + "`"
