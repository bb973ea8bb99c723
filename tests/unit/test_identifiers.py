"""Names and types written into Spark SQL: quoted, whatever the names hold."""

from __future__ import annotations

from pyspark.sql.types import ArrayType, DecimalType, IntegerType, MapType, StringType, StructField, StructType

from icegroup.spark_jobs.identifiers import ddl_type, quoted


def test_a_name_is_one_identifier_with_its_own_backticks_doubled() -> None:
    assert quoted("region") == "`region`"
    assert quoted("a.b c") == "`a.b c`"
    assert quoted("n`1") == "`n``1`"


def test_nested_field_names_are_quoted_at_every_depth_and_plain_types_stay_as_spark_writes_them() -> None:
    headers = StructType(
        [
            StructField("user-agent", StringType()),
            StructField("a b", ArrayType(StructType([StructField("k`1", DecimalType(12, 2))]))),
            StructField("m", MapType(StringType(), StructType([StructField("x.y", IntegerType())]))),
        ]
    )
    assert ddl_type(headers) == (
        "struct<`user-agent`:string,`a b`:array<struct<`k``1`:decimal(12,2)>>,`m`:map<string,struct<`x.y`:int>>>"
    )
    assert ddl_type(DecimalType(38, 10)) == "decimal(38,10)"
