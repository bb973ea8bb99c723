"""``describe --plot``'s bars: scaled to the largest value, labels aligned, values printed."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyiceberg.catalog import Catalog

from icegroup.dagster_project.cli import main
from icegroup.dagster_project.cli.plots import bars
from icegroup.dagster_project.group_files import DEFAULT_GROUPS


def test_bars_scale_to_the_largest_value_and_align_their_labels() -> None:
    lines = bars([("a", 10.0), ("bbb", 5.0), ("c", 0.0)], width=10)
    assert lines == [
        "  a    ██████████  10",
        "  bbb  █████       5",
        "  c                0",
    ]
    assert bars([("x", 0.0)], width=4) == ["  x        0"], "all zero: no bar, no division by zero"
    assert bars([]) == []


def test_plot_refuses_json_and_as_of(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, lake_home: Path, catalog: Catalog
) -> None:
    monkeypatch.setenv("ICEGROUP_HOME", str(lake_home))
    assert main(["--groups", str(DEFAULT_GROUPS), "describe", "demo", "--plot", "--json"]) == 2
    assert "--plot: draws the group's history as it is now, for a person" in capsys.readouterr().err
