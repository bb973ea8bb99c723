"""The pure expiry rules: only the oldest run of snapshots that nothing pins expires, never the head."""

from __future__ import annotations

from icegroup.iceberg.protocol.durations import format_duration, parse_duration
from icegroup.iceberg.protocol.retention import Pin, judge, reset_reach, staleness
from icegroup.iceberg.protocol.shards import SnapshotInfo
from icegroup.iceberg.protocol.sink_commit import ShardRange


def history(count: int) -> list[SnapshotInfo]:
    """``count`` snapshots on main, sequence numbers 1.., committed a second apart from t=1000 s."""
    return [
        SnapshotInfo(100 + n, 99 + n if n > 1 else None, n, 1_000_000 + 1000 * n, 0, "append")
        for n in range(1, count + 1)
    ]


def expired(found: list[SnapshotInfo], *pins: Pin) -> list[int]:
    """Sequence numbers that expire."""
    return [s.sequence_number for s in judge(found, pins).expire]


def test_a_sequence_pin_keeps_its_snapshot_and_everything_after_it() -> None:
    assert expired(history(6), Pin("group a", sequence=4)) == [1, 2, 3]
    assert expired(history(6), Pin("group a", sequence=4), Pin("group b", sequence=2)) == [1], "the oldest pin wins"


def test_a_pin_at_zero_keeps_everything_and_no_pin_still_keeps_the_head() -> None:
    assert expired(history(4), Pin("group a (not started)", sequence=0)) == []
    assert expired(history(4)) == [1, 2, 3]


def test_a_time_pin_and_a_count_pin_keep_what_is_recent() -> None:
    assert expired(history(6), Pin("horizon", since_ms=1_000_000 + 4500)) == [1, 2, 3, 4]
    assert expired(history(6), Pin("keep", last=2)) == [1, 2, 3, 4]


def test_nothing_newer_than_a_kept_snapshot_expires_so_the_chain_stays_unbroken() -> None:
    """Only 2 (by its sequence) and 6 (the last one) are held; 3 to 5 stay because 2 does."""
    judged = judge(history(6), [Pin("group a", sequence=2), Pin("keep", last=1)])
    assert [s.sequence_number for s in judged.expire] == [1]
    assert [s.sequence_number for s in judged.keep] == [2, 3, 4, 5, 6]
    assert judged.held_by == ("group a",)


def test_dry_run_names_what_holds_the_oldest_kept_snapshot() -> None:
    pins = [Pin("group a", sequence=3), Pin("horizon of a (7 days)", since_ms=1_000_000 + 3000)]
    judged = judge(history(5), pins)
    assert judged.held_by == ("group a", "horizon of a (7 days)")
    assert pins[0].describe() == "group a: from sequence 3"


DAY = 86_400_000


def test_the_forecast_is_safe_when_the_lag_clears_before_the_oldest_needed_snapshot_ages_out() -> None:
    now = 10 * DAY
    safe = staleness(now - DAY, 5 * DAY, lag_rows=3600, rate_rows_s=1.0, now_ms=now)
    assert (safe.expires_at_ms, safe.catches_up_at_ms, safe.at_risk) == (now + 4 * DAY, now + 3_600_000, False)
    assert "safe: that is after the lag clears" in safe.line(5 * DAY)


def test_the_forecast_is_at_risk_when_the_lag_outlasts_the_age_limit_or_nothing_is_moving() -> None:
    now = 10 * DAY
    slow = staleness(now - 4 * DAY, 5 * DAY, lag_rows=10 * 86_400, rate_rows_s=1.0, now_ms=now)
    assert slow.at_risk
    assert "AT RISK: that is before the lag clears" in slow.line(5 * DAY)
    stuck = staleness(now - 4 * DAY - 3_600_000, 5 * DAY, lag_rows=10, rate_rows_s=None, now_ms=now)
    assert stuck.at_risk, "no rate, and the expiry by age is under a day away"
    assert "AT RISK: no recent rate yet" in stuck.line(5 * DAY)
    idle = staleness(None, 5 * DAY, lag_rows=0, rate_rows_s=None, now_ms=now)
    assert not idle.at_risk
    assert "nothing unconsumed" in idle.line(5 * DAY)


def test_durations_read_back_as_they_print() -> None:
    for text in ("30d", "12h", "15m", "90s", "0s"):
        assert format_duration(parse_duration(text)) == text
    assert parse_duration("P1DT12H") == parse_duration("36h")


def ranges(*to_sequences: int | None) -> tuple[ShardRange, ...]:
    """Shard ranges of one commit, ending at these source sequence numbers."""
    return tuple(ShardRange(f"{n}", "0", None, 100 + (n or 0), (), to_sequence=n) for n in to_sequences)


def test_the_sink_keeps_every_commit_that_consumed_source_history_a_reset_can_still_reach() -> None:
    commits = [(1, ranges(3)), (2, ranges(5, 4)), (3, ranges(6)), (4, ranges(9))]

    present = range(105, 110)

    assert reset_reach(commits, 5, present) == 2, "commit 2 consumed snapshot 5, still in the source"
    assert reset_reach(commits, 7, present) == 4
    assert reset_reach(commits, 10, present) is None, "the source expired past every commit"
    legacy = [(7, ranges(None)), (8, ranges(None))]  # no sequence numbers recorded: ends at snapshot 100
    assert reset_reach(legacy, 5, [100, *present]) == 7, "an old range is kept while its snapshot is there"
    assert reset_reach(legacy, 5, present) is None, "and not once the source expired it"


def test_a_new_group_with_no_rate_yet_is_not_at_risk_days_before_any_expiry() -> None:
    now = 10 * DAY
    new = staleness(now - 60_000, 5 * DAY, lag_rows=10, rate_rows_s=None, now_ms=now)
    assert not new.at_risk
    assert new.line(5 * DAY).startswith("retention: no recent rate yet, so no catch-up forecast")
