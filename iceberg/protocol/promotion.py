"""Iceberg's type promotions, in Spark's type names: how far a sink's column may widen without a file rewritten.

A source may widen a column (``ALTER COLUMN n TYPE bigint``), as Iceberg allows: an int to a long, a
float to a double, a decimal to more digits at the same scale. Shards are read with the source's
current types, so output after the change is wider than a sink made before it: the sink widens its
column once (``spark_jobs/sink/shape.py``). Output narrower than the sink (a sink made wider than
its source, or a byte or short column, which Iceberg stores as an int) is cast up to it. Any
other change of type stays an error.
"""

from __future__ import annotations

import re

DECIMAL = re.compile(r"decimal\((\d+),(\d+)\)")
WIDER = {"int": "bigint", "float": "double"}
# Spark's byte and short: an Iceberg table stores both as an int, so a sink made from them has ints.
SMALL_INTEGERS = {"tinyint", "smallint"}


def widens_to(narrow: str, wide: str) -> bool:
    """Whether Iceberg promotes a column of Spark type ``narrow`` to ``wide`` (v2's promotions; never the reverse)."""
    if WIDER.get(narrow) == wide:
        return True
    before, after = DECIMAL.fullmatch(narrow), DECIMAL.fullmatch(wide)
    return bool(before and after and before[2] == after[2] and int(after[1]) > int(before[1]))


def fits_in(narrow: str, wide: str) -> bool:
    """Whether output of Spark type ``narrow`` is written without loss into a column of type ``wide``.

    Iceberg's promotions (``widens_to``), and a byte or short into an int or long.
    """
    return widens_to(narrow, wide) or (narrow in SMALL_INTEGERS and wide in ("int", "bigint"))
