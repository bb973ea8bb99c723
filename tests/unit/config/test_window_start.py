"""A group's first window: its source's first commit, its start timestamp, or today; never a fixed old date."""

from __future__ import annotations

from datetime import UTC, date, datetime
from pathlib import Path

import pytest

from icegroup.dagster_project.window_start import first_window_day, resolve_window_starts
from icegroup.iceberg.config.lakehouse import LakehouseConfig
from icegroup.iceberg.errors import CatalogUnavailable
from icegroup.iceberg.protocol.group import GroupConfig

TODAY = date(2026, 11, 26)


def group(**overrides: object) -> GroupConfig:
    """A group over raw.orders."""
    return GroupConfig.model_validate({"name": "g", "source": "raw.orders", "sink": "clean.orders", **overrides})


def ms(day: date) -> int:
    """Noon of ``day``, UTC, in epoch milliseconds."""
    return int(datetime(day.year, day.month, day.day, 12, tzinfo=UTC).timestamp() * 1000)


def test_the_first_window_is_the_day_of_the_sources_first_commit() -> None:
    assert first_window_day(group(), ms(date(2026, 3, 4)), TODAY) == date(2026, 3, 4)
    assert first_window_day(group(start="latest"), ms(date(2026, 3, 4)), TODAY) == date(2026, 3, 4)


def test_a_source_with_no_commit_begins_today() -> None:
    assert first_window_day(group(), None, TODAY) == TODAY


def test_a_group_starting_at_a_timestamp_begins_that_day_but_not_before_the_source() -> None:
    start = {"timestamp": "2026-06-01T10:00:00Z"}
    assert first_window_day(group(start=start), ms(date(2026, 3, 4)), TODAY) == date(2026, 6, 1)
    assert first_window_day(group(start=start), ms(date(2026, 7, 1)), TODAY) == date(2026, 7, 1)
    assert first_window_day(group(start={"timestamp": "2027-01-01T00:00:00Z"}), None, TODAY) == TODAY


def test_a_window_start_in_the_config_is_kept(tmp_path: Path) -> None:
    pinned = group(window_start="2025-06-01")

    resolved = resolve_window_starts({"g": pinned}, lambda: pytest.fail("the catalog was read"), today=TODAY)

    assert resolved["g"].window_start == date(2025, 6, 1)


def test_a_lake_that_does_not_exist_is_not_created_to_find_the_first_commit(tmp_path: Path) -> None:
    lakehouse = LakehouseConfig(catalog_uri=f"sqlite:///{tmp_path}/lake/catalog.db", warehouse=str(tmp_path / "w"))

    resolved = resolve_window_starts({"g": group()}, lambda: lakehouse, today=TODAY)

    assert resolved["g"].window_start == TODAY
    assert list(tmp_path.iterdir()) == []


def test_an_unreachable_catalog_leaves_the_default_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    unreachable = LakehouseConfig(
        catalog_uri="postgresql+psycopg2://icegroup@127.0.0.1:9/nowhere?connect_timeout=2", warehouse="/tmp/nowhere"
    )
    timed = group(name="t", start={"timestamp": "2026-06-01T10:00:00Z"})

    resolved = resolve_window_starts({"g": group(), "t": timed}, lambda: unreachable, today=TODAY)

    assert resolved["g"].window_start == GroupConfig.model_fields["window_start"].default
    assert resolved["t"].window_start == date(2026, 6, 1), "a start timestamp needs no catalog"
    assert "the catalog cannot be read" in caplog.text
    assert "Set window_start in the group config" in caplog.text


def test_the_command_line_raises_an_unreachable_catalog_as_its_one_error(caplog: pytest.LogCaptureFixture) -> None:
    unreachable = LakehouseConfig(
        catalog_uri="postgresql+psycopg2://icegroup@127.0.0.1:9/nowhere?connect_timeout=2", warehouse="/tmp/nowhere"
    )

    with pytest.raises(CatalogUnavailable, match="cannot be opened"):
        resolve_window_starts({"g": group()}, lambda: unreachable, today=TODAY, strict=True)
    assert "the catalog cannot be read" not in caplog.text, "no warning before the error"
