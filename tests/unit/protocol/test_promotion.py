"""Which column types a sink widens to take a source's widened column, and which stay an error."""

from __future__ import annotations

import pytest

from icegroup.iceberg.protocol.promotion import fits_in, widens_to


@pytest.mark.parametrize(
    ("narrow", "wide"), [("int", "bigint"), ("float", "double"), ("decimal(9,2)", "decimal(12,2)")]
)
def test_iceberg_s_promotions_widen(narrow: str, wide: str) -> None:
    assert widens_to(narrow, wide)
    assert not widens_to(wide, narrow)


@pytest.mark.parametrize(
    ("narrow", "wide"),
    [
        ("int", "int"),
        ("smallint", "int"),  # not a promotion: Iceberg has no short (but it fits, below)
        ("int", "double"),
        ("bigint", "double"),
        ("int", "string"),
        ("decimal(9,2)", "decimal(12,3)"),
        ("decimal(9,2)", "decimal(9,2)"),
        ("date", "timestamp"),  # v3's promotion only: sinks are v2
        ("struct<a:int>", "struct<a:bigint>"),
    ],
)
def test_other_changes_of_type_do_not(narrow: str, wide: str) -> None:
    assert not widens_to(narrow, wide)


@pytest.mark.parametrize(
    ("narrow", "wide"),
    [
        ("int", "bigint"),
        ("decimal(9,2)", "decimal(12,2)"),
        ("tinyint", "int"),
        ("smallint", "int"),
        ("smallint", "bigint"),
    ],
)
def test_output_fits_in_a_wider_sink_column_as_iceberg_s_promotions_and_its_int_for_bytes_and_shorts(
    narrow: str, wide: str
) -> None:
    assert fits_in(narrow, wide)
    assert not fits_in(wide, narrow)


@pytest.mark.parametrize(
    ("narrow", "wide"), [("int", "int"), ("smallint", "double"), ("int", "string"), ("bigint", "int")]
)
def test_nothing_else_fits(narrow: str, wide: str) -> None:
    assert not fits_in(narrow, wide)
