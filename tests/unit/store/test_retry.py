"""The one retry policy for a lost compare-and-swap: what it tries again, how often, and how it gives up."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from icegroup.iceberg.errors import LostRace, RegistryConflict, SinkError
from icegroup.iceberg.retry import again_after, again_while_losing


@pytest.fixture(autouse=True)
def no_waiting(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The waits the policy asked for, without waiting them."""
    waits: list[float] = []
    monkeypatch.setattr("icegroup.iceberg.retry.time.sleep", waits.append)
    return waits


def losing(times: int) -> tuple[list[int], Callable[[], int]]:
    """An attempt that loses its race ``times`` times, then returns how many tries it took."""
    tries: list[int] = []

    def attempt() -> int:
        tries.append(1)
        if len(tries) <= times:
            raise LostRace("main moved")
        return len(tries)

    return tries, attempt


def test_a_lost_race_is_made_again_until_it_wins(no_waiting: list[float]) -> None:
    tries, attempt = losing(2)

    assert again_while_losing("a change", attempt, tries=5) == 3
    assert len(tries) == 3
    assert len(no_waiting) == 2
    assert all(0 <= wait <= 2.0 for wait in no_waiting)


def test_it_gives_up_after_its_tries_with_the_error_that_names_the_remedy() -> None:
    tries, attempt = losing(10)

    with pytest.raises(RegistryConflict, match="kept moving under 4 tries"):
        again_while_losing(
            "a change",
            attempt,
            tries=4,
            gave_up=lambda: RegistryConflict("the registry kept moving under 4 tries"),
        )
    assert len(tries) == 4


def test_without_a_remedy_the_last_lost_race_is_raised() -> None:
    tries, attempt = losing(10)

    with pytest.raises(LostRace, match="main moved"):
        again_while_losing("a change", attempt, tries=2)
    assert len(tries) == 2


def test_any_other_error_ends_the_retries_at_once(no_waiting: list[float]) -> None:
    tries: list[int] = []

    def attempt() -> None:
        tries.append(1)
        raise SinkError("sink: the table is gone")

    with pytest.raises(SinkError, match="the table is gone"):
        again_while_losing("a change", attempt, tries=5)
    assert tries == [1]
    assert no_waiting == []


def test_waits_grow_from_the_first_and_stay_under_two_seconds(no_waiting: list[float]) -> None:
    _, attempt = losing(30)

    with pytest.raises(LostRace):
        again_while_losing("a change", attempt, tries=12, first_wait_s=0.2)

    assert len(no_waiting) == 11
    assert max(no_waiting[:1]) <= 0.2
    assert max(no_waiting) <= 2.0


def test_again_after_waits_as_told_and_counts_only_the_waits_as_waited(no_waiting: list[float]) -> None:
    _, attempt = losing(3)
    asked: list[tuple[int, float]] = []
    heard: list[tuple[int, float]] = []

    def wait_after(error: Exception, failed: int, waited_s: float) -> float:
        asked.append((failed, waited_s))
        return float(failed)

    assert again_after(attempt, wait_after, lambda _e, failed, wait: heard.append((failed, wait))) == 4
    assert no_waiting == [1.0, 2.0, 3.0]
    assert heard == [(1, 1.0), (2, 2.0), (3, 3.0)], "each wait is heard of once, before it is waited"
    assert asked == [(1, 0.0), (2, 1.0), (3, 3.0)], "waited: the sum of the waits before, not the tries' time"


def test_again_after_raises_the_error_it_is_told_not_to_wait_after(no_waiting: list[float]) -> None:
    tries, attempt = losing(5)

    with pytest.raises(LostRace):
        again_after(attempt, lambda _e, failed, _w: None if failed == 2 else 0.5, lambda *_: None)
    assert len(tries) == 2
    assert no_waiting == [0.5]


def test_again_after_raises_an_interrupt_at_once(no_waiting: list[float]) -> None:
    tries: list[int] = []

    def interrupted() -> int:
        tries.append(1)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        again_after(interrupted, lambda *_: 0.5, lambda *_: None)
    assert (len(tries), no_waiting) == (1, []), "an interrupt is not a failure to try again"
