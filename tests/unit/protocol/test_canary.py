"""When a canary may be promoted: the group names its transform, and none of its window's shards waits."""

from __future__ import annotations

from icegroup.iceberg.protocol.canary import Canary, CanaryDiff, promotion_refusal
from icegroup.iceberg.protocol.group import GroupConfig
from tests.factories import WINDOW_START_MS

NEW = "tests.integration.transforms:amount_in_cents"


def canary(transform: str = NEW) -> Canary:
    """A canary of 2026-01-01 under ``transform``."""
    return Canary(
        window="2026-01-01", transform=transform, token="t", staged_snapshot=1, sink_head=None, covers=[],
        replay_fence=0, at_ms=WINDOW_START_MS,
    )  # fmt: skip


def group(transform: str = NEW) -> GroupConfig:
    """A daily group under ``transform``."""
    return GroupConfig(name="g", source="ns.events", sink="ns.events_out", transform=transform)


def test_a_canary_of_the_groups_transform_and_a_finished_window_is_promotable() -> None:
    assert promotion_refusal(canary(), group(), pending_windows={WINDOW_START_MS + 86_400_000}) is None


def test_the_group_must_name_the_canarys_transform_first() -> None:
    refusal = promotion_refusal(canary(), group("icegroup.spark_jobs.transforms:identity"), pending_windows=())
    assert refusal is not None
    assert f"set `transform: {NEW}`" in refusal


def test_a_window_with_shards_still_waiting_is_refused() -> None:
    refusal = promotion_refusal(canary(), group(), pending_windows={WINDOW_START_MS})
    assert refusal is not None
    assert "has shards not committed yet" in refusal


def test_a_diff_reads_as_one_line() -> None:
    diff = CanaryDiff("2026-01-01", NEW, main_rows=10, canary_rows=11, added=2, removed=1, changed=3, key="event_id")
    assert diff.line() == "window 2026-01-01: main 10 rows, canary 11 rows: 2 added, 1 removed, 3 changed (by event_id)"
