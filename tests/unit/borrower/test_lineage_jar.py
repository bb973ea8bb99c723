"""A session whose icegroup-spark.jar predates a lineage function stops at its start, naming the fix."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from icegroup.iceberg.errors import ConfigError
from icegroup.spark_jobs.row_files import register_lineage_functions


class MissingClass:
    """What py4j gives for a class the JVM lacks: a package, whose members are packages, none of them callable."""

    def __getattr__(self, name: str) -> MissingClass:
        """Every member of a missing class is missing too."""
        return MissingClass()


def session(**classes: Any) -> Any:
    """A stand-in for a SparkSession whose JVM holds ``classes`` in ``icegroup.lineage``; registrations recorded."""
    registered: list[str] = []
    udf = SimpleNamespace(register=lambda name, function: registered.append(name))
    return SimpleNamespace(
        _jvm=SimpleNamespace(icegroup=SimpleNamespace(lineage=SimpleNamespace(**classes))),
        _jsparkSession=SimpleNamespace(udf=lambda: udf),
        registered=registered,
    )


FILE_REF = SimpleNamespace(function=lambda: "file ref")
ROW_REF = SimpleNamespace(mark=lambda: "mark", current=lambda: "current")
FILE_VALUES = SimpleNamespace(function=lambda pairs: "file values")


def test_a_jar_with_every_function_registers_the_three_sql_functions() -> None:
    spark = session(FileRef=FILE_REF, RowRef=ROW_REF, FileValues=FILE_VALUES)

    register_lineage_functions(spark)

    assert spark.registered == ["icegroup_file_ref", "icegroup_mark_row", "icegroup_row_ref"]


def test_a_jar_without_file_values_is_a_config_error_before_any_lease() -> None:
    spark = session(FileRef=FILE_REF, RowRef=ROW_REF, FileValues=MissingClass())

    with pytest.raises(ConfigError, match=r"older than this icegroup; run `make jvm`"):
        register_lineage_functions(spark)

    assert spark.registered == []
