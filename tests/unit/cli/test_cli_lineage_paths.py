"""lineage --source-file takes a path as a shell user types it (relative to the current folder); --source-row-id ids."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from icegroup.dagster_project.cli.lineage import absolute_if_relative, row_ids
from icegroup.iceberg.protocol.locations import file_forms


def test_a_relative_path_is_read_from_the_current_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)

    absolute = absolute_if_relative(".lake/warehouse/shop/orders/data/a.parquet")

    assert absolute == f"{tmp_path.resolve()}/.lake/warehouse/shop/orders/data/a.parquet"
    assert f"file://{absolute}" in file_forms(absolute)


@pytest.mark.parametrize("location", ["/abs/a.parquet", "file:/abs/a.parquet", "file:///abs/a.parquet", "s3://b/a"])
def test_absolute_paths_and_uris_are_left_as_they_are(location: str) -> None:
    assert absolute_if_relative(location) == location


def test_source_row_ids_are_whole_numbers_comma_separated() -> None:
    assert row_ids("17") == [17]
    assert row_ids("17,18") == [17, 18]
    with pytest.raises(argparse.ArgumentTypeError, match=r"'17,x' is not a list of row ids: .* like 17 or 17,18"):
        row_ids("17,x")
