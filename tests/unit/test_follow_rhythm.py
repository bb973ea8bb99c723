"""How often icegroup looks at the source: a following consume, like Structured Streaming, and the Leader."""

from __future__ import annotations

import pytest

from icegroup.dagster_project.sensors import DAEMON_LOOP_S, minimum_interval_s
from icegroup.iceberg.protocol.consume import next_poll_s


@pytest.mark.parametrize(
    ("now_s", "expected_s"),
    [
        (100.0, 105.0),  # on a boundary: the next one, never now again
        (101.2, 105.0),  # a batch that ended early waits out its slot only
        (104.999, 105.0),
        (107.5, 110.0),  # a batch that overran its slot: the next boundary, not a burst of looks
    ],
)
def test_the_next_look_is_the_next_multiple_of_the_poll_interval(now_s: float, expected_s: float) -> None:
    assert next_poll_s(now_s, 5.0) == pytest.approx(expected_s)


def test_a_zero_interval_looks_again_at_once() -> None:
    assert next_poll_s(42.0, 0.0) == 42.0


@pytest.mark.parametrize(
    ("sensor_interval_s", "minimum_interval"),
    [(1, 3), (5, 3), (6, 8), (10, 8), (60, 58)],
)
def test_the_leader_sensor_asks_for_whole_daemon_loops_less_their_jitter(
    sensor_interval_s: int, minimum_interval: int
) -> None:
    assert minimum_interval_s(sensor_interval_s) == minimum_interval


def test_the_daemon_loop_is_the_one_dagster_runs() -> None:
    from dagster._daemon.sensor import MIN_INTERVAL_LOOP_TIME  # internal: this test notices when Dagster changes it

    assert DAEMON_LOOP_S == MIN_INTERVAL_LOOP_TIME
