"""The CLI's text output: table() and render()."""

from __future__ import annotations

from dataclasses import replace

from icegroup.dagster_project.cli.support import rate_text, render, table
from icegroup.iceberg.describe import GroupView, StreamView
from icegroup.iceberg.protocol.liveness import Hold


def view() -> GroupView:
    return GroupView(
        group="orders",
        source="demo.events",
        sink="demo.events_out",
        epoch=2,
        source_head=109,
        planned_through=107,
        pending_shards=3,
        leases_in_flight=1,
        leases_done=4,
        unplanned_snapshots=2,
        streams=[
            StreamView("0/region=eu", 101, 109, 3, 120, 2, 40, ["0123456789abcdef#1"], 1_010_000 - 12_500, 2500.0),
            StreamView("0/region=us", 100, 104, 2, 30, 0, 0, []),
        ],
        holds=[Hold("0123456789abcdef", 1, ("0/region=eu",), "run-7", 1_000_000, 1_030_000, 2_800_000)],
        as_of_ms=1_010_000,
        status="consuming",
    )


def test_table_aligns_columns_under_upper_case_headers() -> None:
    rows: list[dict[str, object]] = [{"group": "orders", "lag_rows": 5}, {"group": "x", "lag_rows": 12345}]

    assert table(rows, ["group", "lag_rows"]) == "GROUP   LAG_ROWS\norders  5\nx       12345"


def test_table_follows_the_column_order_and_leaves_missing_cells_empty() -> None:
    rows: list[dict[str, object]] = [{"b": 1, "a": 2}, {"a": 3}]

    assert table(rows, ["a", "b"]).splitlines() == ["A  B", "2  1", "3"]


def test_table_prints_a_cell_with_a_tab_or_markup_whole() -> None:
    rows: list[dict[str, object]] = [{"error": "bad\tvalue (at t.py:3 in f)"}, {"error": "[red]x[/red] :smile:"}]

    assert table(rows, ["error"]).splitlines() == ["ERROR", "bad     value (at t.py:3 in f)", "[red]x[/red] :smile:"]


def test_table_without_rows_is_the_header() -> None:
    assert table([], ["group"]) == "GROUP"


def test_render_header_has_group_positions_and_lag_totals() -> None:
    header = render(view()).splitlines()[:2]

    assert header[0] == "group orders: demo.events -> demo.events_out  epoch 2  consuming"
    assert "source head 109" in header[1]
    assert "planned through 107" in header[1]
    assert "pending shards 3" in header[1]
    assert "leases in flight 1" in header[1]
    assert "leases done 4" in header[1]
    assert header[1].endswith("lag 5 snapshots / 150 rows / 12.5s (oldest unconsumed commit)")


def test_render_names_the_streams_folded_out_of_the_registry_only_when_there_are_some() -> None:
    retired = view()
    retired.retired_streams, retired.retired_rows = 364, 10_920

    assert render(retired).splitlines()[2] == "streams done and folded out of the registry: 364 (10920 rows)"
    assert "folded out" not in render(view())


def test_render_has_one_line_per_stream() -> None:
    lines = render(view()).splitlines()[2:5]

    assert lines[0].split() == [
        "STREAM",
        "POSITION",
        "HEAD",
        "LAG_SNAPSHOTS",
        "LAG_ROWS",
        "LAG_AGE",
        "COMMITTED_ROWS",
        "RATE",
        "LEASES",
    ]
    eu = ["0/region=eu", "101", "109", "3", "120", "12.5s", "40", "2,500", "rows/s", "0123456789abcdef#1"]
    assert lines[1].split() == eu
    assert lines[2].split() == ["0/region=us", "100", "104", "2", "30", "none", "0", "none", "none"], "absent: none"
    assert render(view()).splitlines()[5] == "leases in flight:", "the streams come first, then the holds"


def test_render_ends_with_who_holds_each_lease_and_until_when() -> None:
    lines = render(view()).splitlines()

    assert lines[-2:] == [
        "leases in flight:",
        "  lease 0123456789abcdef#1 (0/region=eu) held by run-7: last heartbeat 10s ago; re-granted in 20s if it "
        "stays silent, at the latest in 1790s",
    ]


def test_a_slow_rate_keeps_its_digits_as_metrics_gives_them() -> None:
    assert rate_text(0.077) == "0.077", "a few rows a minute is not 0 rows/s"
    assert rate_text(3.14159) == "3.14"
    assert rate_text(2500.0) == "2,500"
    assert rate_text(0) == "0"


def test_parked_leases_show_apart_from_the_leases_in_flight() -> None:
    parked = replace(view(), leases_in_flight=0, leases_parked=2)
    assert "leases in flight 0  leases parked 2  leases done 4" in render(parked)
    assert "leases parked" not in render(view())


def test_table_cells_are_words_not_python_literals() -> None:
    out = table([{"complete": True, "missing": None}, {"complete": False, "missing": []}], ["complete", "missing"])
    assert out.splitlines()[1:] == ["yes       none", "no        none"]
