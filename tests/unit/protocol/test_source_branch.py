"""Where a group's source branch goes: how many snapshots it keeps, and when it must move."""

from __future__ import annotations

import pytest

from icegroup.iceberg.protocol.source_branch import RefPosition, ref_move, ref_name, snapshots_to_keep


def test_the_branch_keeps_its_head_and_every_ancestor_back_to_the_low_watermark() -> None:
    assert snapshots_to_keep([9, 8, 7, 6, 5], low_watermark=7) == 3


@pytest.mark.parametrize(
    ("low_watermark", "why"),
    [(None, "the group reads from the table's first snapshot"), (3, "the low watermark is not an ancestor")],
)
def test_without_a_low_watermark_in_the_ancestry_every_ancestor_is_kept(low_watermark: int | None, why: str) -> None:
    assert snapshots_to_keep([9, 8, 7], low_watermark) == 3, why


def test_a_branch_at_the_same_head_keeping_enough_is_not_rewritten() -> None:
    assert ref_move(RefPosition(9, 5), RefPosition(9, 3)) is None, "the group's progress alone writes nothing"


@pytest.mark.parametrize(
    "current",
    [None, RefPosition(8, 5), RefPosition(9, 2)],
    ids=["no branch yet", "planning moved on", "a reset moved the low watermark back"],
)
def test_the_branch_moves_when_it_would_keep_less_than_the_group_reads(current: RefPosition | None) -> None:
    assert ref_move(current, RefPosition(9, 3)) == RefPosition(9, 3)


def test_the_branch_is_named_after_its_group() -> None:
    assert ref_name("orders") == "icegroup-orders"
