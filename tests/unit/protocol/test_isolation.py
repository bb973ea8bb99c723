"""Bisection of a failing shard down to the rows that fail on their own."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from icegroup.iceberg.protocol.isolation import (
    FILES_GONE,
    NOT_ROWWISE,
    OVER_CAP,
    REST_FAILS,
    TOGETHER,
    PoisonRow,
    Probe,
    Span,
    bisect,
    halves,
    not_isolated,
    positions_by_file,
    rows_in,
)

FILES: list[Span] = [("a.parquet", 0, 40_000), ("b.parquet", 0, 35_000), ("c.parquet", 0, 25_000)]


def probe_failing_on(poison: dict[tuple[str, int], str]) -> tuple[list[int], Probe]:
    """A probe that fails when a span holds a poison row, naming the first; counts the rows it was given."""
    sizes: list[int] = []

    def probe(spans: Sequence[Span]) -> str | None:
        sizes.append(rows_in(spans))
        hits = sorted((path, pos) for path, pos in poison if any(p == path and a <= pos < b for p, a, b in spans))
        return poison[hits[0]] if hits else None

    return sizes, probe


def test_three_poison_rows_of_a_hundred_thousand_are_found_with_their_own_errors() -> None:
    poison = {("a.parquet", 17): "ValueError: 17", ("b.parquet", 34_999): "ValueError: b", ("c.parquet", 0): "KeyError"}
    sizes, probe = probe_failing_on(poison)

    found = bisect(FILES, "ValueError: 17", probe, cap=100)

    assert found.stopped is None
    assert found.rows == [
        PoisonRow("a.parquet", 17, "ValueError: 17"),
        PoisonRow("b.parquet", 34_999, "ValueError: b"),
        PoisonRow("c.parquet", 0, "KeyError"),
    ]
    assert found.probes == len(sizes) <= 2 * 3 * 17, "at most about 2 k log2(n) tries"


def test_more_poison_rows_than_the_cap_stop_the_search() -> None:
    poison = {("a.parquet", pos): "boom" for pos in range(0, 40_000, 1000)}
    _, probe = probe_failing_on(poison)

    found = bisect(FILES, "boom", probe, cap=5)

    assert found.stopped == "more than max_isolated_rows (5) rows fail"
    assert len(found.rows) == 6


def test_a_failure_no_single_row_causes_stops_the_search() -> None:
    def fails_only_whole(spans: Sequence[Span]) -> str | None:
        return "needs every row" if rows_in(spans) == rows_in(FILES) else None

    found = bisect(FILES, "needs every row", fails_only_whole, cap=100)

    assert found.stopped == "the failure needs several rows together: no single row fails on its own"
    assert found.rows == []


def test_a_row_known_to_fail_only_because_its_sibling_passed_is_tried_alone_before_it_counts() -> None:
    def fails_with_both_of_two(spans: Sequence[Span]) -> str | None:
        held = {(path, pos) for path, first, end in spans for pos in range(first, end)}
        return "needs 5 and 9" if {("a.parquet", 5), ("a.parquet", 9)} <= held else None

    found = bisect([("a.parquet", 0, 16)], "needs 5 and 9", fails_with_both_of_two, cap=100)

    assert found.stopped == "the failure needs several rows together: no single row fails on its own"
    assert found.rows == []


def test_when_the_first_half_passes_the_second_is_not_tried() -> None:
    sizes, probe = probe_failing_on({("a.parquet", 39_999): "last row"})

    found = bisect([("a.parquet", 0, 40_000)], "last row", probe, cap=100)

    assert found.rows == [PoisonRow("a.parquet", 39_999, "last row")]
    assert found.probes == len(sizes) == 17, "one try a level (16 levels), and one to confirm the row alone"


def test_halves_split_whole_files_first_then_positions() -> None:
    assert halves(FILES) == (FILES[:2], FILES[2:])
    assert halves([("a.parquet", 10, 21)]) == ([("a.parquet", 10, 15)], [("a.parquet", 15, 21)])


def test_isolated_rows_group_by_file_in_order() -> None:
    rows = [PoisonRow("b", 9, "x"), PoisonRow("a", 3, "y"), PoisonRow("b", 2, "z")]

    assert positions_by_file(rows) == {"a": [3], "b": [2, 9]}


@pytest.mark.parametrize(
    ("reason", "remedy"),
    [
        (NOT_ROWWISE, "set on_poison: park"),
        (TOGETHER, "fix the transform or the data"),
        (FILES_GONE, "redrive the shard"),
        (OVER_CAP.format(cap=5), "raise max_isolated_rows"),
        (REST_FAILS, "the other rows fail as a whole"),
    ],
)
def test_why_isolation_did_not_apply_names_the_setting_or_fix(reason: str, remedy: str) -> None:
    said = not_isolated(reason)
    assert said.startswith(f"on_poison: isolate could not isolate its rows: {reason}; ")
    assert remedy in said
