"""The lag check's verdict: the same rules whether the Leader judges from its tick or a run from describe."""

from __future__ import annotations

from datetime import timedelta

import pytest

from icegroup.iceberg.protocol.freshness import STATES, judge_lag, lag_verdict, oldest_unconsumed_ms, state_of
from icegroup.iceberg.protocol.group import GroupConfig
from tests.factories import group_state, shard

WARN = timedelta(minutes=30)
ERROR = timedelta(hours=2)


def verdict(age_s: float | None, **status: str) -> tuple[bool, str, str]:
    """The verdict's passed, severity and description, for ``orders`` with bounds 30m and 2h."""
    v = lag_verdict("orders", age_s, 120, WARN, ERROR, **status)
    return v.passed, v.severity, v.description


def test_within_the_bounds_it_passes_saying_how_old_the_lag_is() -> None:
    assert verdict(None) == (True, "warn", "group orders is caught up (warn after 30m, error after 2h)")
    passed, _, description = verdict(42.4)
    assert passed
    assert description == (
        "the oldest source commit group orders has not consumed is 42s old, 120 rows behind "
        "(warn after 30m, error after 2h)"
    )


def test_past_the_first_bound_a_warning_past_the_second_an_error_each_naming_its_field() -> None:
    assert verdict(30 * 60)[0], "at the bound exactly: not past it"
    passed, severity, description = verdict(31 * 60)
    assert (passed, severity) == (False, "warn")
    assert "is 31m old, 120 rows behind: past lag_warn_after (30m); see `icegroup describe orders`" in description
    passed, severity, description = verdict(3 * 3600 + 5 * 60)
    assert (passed, severity) == (False, "error")
    assert "is 3h05m old" in description
    assert "past lag_error_after (2h)" in description


def test_a_stopped_group_fails_with_an_error_whatever_its_lag_and_a_paused_one_warns() -> None:
    stop = "stopped at source snapshot 7, a replay of window 2026-01-31 upstream (icegroup replay b --follow-upstream)"
    assert verdict(None, stopped=stop) == (False, "error", f"group orders is {stop}")
    pause = "paused (icegroup resume orders continues it)"
    assert verdict(5.0, paused=pause) == (False, "warn", f"group orders is {pause}")


def test_the_key_moves_with_the_verdict_not_with_the_age() -> None:
    def key(age: float | None, **status: str) -> str:
        return lag_verdict("orders", age, None, WARN, ERROR, **status).key

    assert key(None) == key(10) == key(20 * 60) == "pass"
    assert key(31 * 60) == key(100 * 60) == "warn"
    assert key(3 * 3600) == "error"
    assert key(5, stopped="stopped at source snapshot 7, x (y)") != key(
        5, stopped="stopped at source snapshot 9, x (y)"
    )


def test_judge_reads_the_state_from_describes_status_line() -> None:
    group = GroupConfig(name="orders", source="demo.events", sink="demo.out", lag_warn_after="1m", lag_error_after="5m")
    assert judge_lag(group, "stopped (poison shard; see icegroup dead-letters)", None, None).severity == "error"
    assert judge_lag(group, "paused (icegroup resume orders continues it)", None, None).cause == "paused"
    assert judge_lag(group, "consuming; it stops next at source snapshot 3, x (y)", 90, 5).severity == "warn"
    assert judge_lag(group, "lagging", 400, 5).severity == "error"
    assert [state_of(s) for s in ("caught up", "lagging", "consuming; it stops next", "parked (poison)")] == [
        "caught up", "lagging", "consuming", "parked",
    ]  # fmt: skip
    assert state_of("stopped: the source was rewritten") == "stopped"
    assert set(STATES) >= {"caught up", "stopped", "paused"}


def test_bounds_out_of_order_are_refused_naming_both_fields() -> None:
    with pytest.raises(ValueError, match="lag_error_after: 1h is shorter than lag_warn_after 2h"):
        GroupConfig(name="orders", source="demo.events", sink="demo.out", lag_warn_after="2h", lag_error_after="1h")


def test_the_oldest_unconsumed_commit_is_in_an_open_shard_or_not_planned_yet() -> None:
    state = group_state([shard(2), shard(3)], planned_through_sequence=3)
    appends = [(101, 1, 1_000), (102, 2, 2_000), (103, 3, 3_000), (104, 4, 4_000)]
    assert oldest_unconsumed_ms(state, appends) == 2_000, "101 is committed; 102 is in an open shard"
    assert oldest_unconsumed_ms(group_state([], planned_through_sequence=3), appends) == 4_000, "104 is not planned"
    assert oldest_unconsumed_ms(group_state([], planned_through_sequence=4), appends) is None, "caught up"
