"""Trying again, on tenacity, in one place: a compare-and-swap that lost a race, and any other try-again loop.

Every write icegroup makes to a registry or a sink is a compare-and-swap, and Leaders, Borrowers
and operators write at once: a swap that lost is made again on what is there now. How often, and
how long to back off between tries (exponential, with full jitter so that the losers do not collide
again), is decided here once, for every such write (``again_while_losing``). A try says it lost by
raising ``LostRace``; any other exception ends the retries at once and is raised as it is.

The Borrower's loops (a shard delivered again after its transform failed, a lease that goes on
after the platform failed) decide their waits from the group's settings; ``again_after`` runs
them, so every loop that sleeps between tries is driven the same way and its waits can be recorded.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from tenacity import RetryCallState, Retrying, retry_if_exception_type, stop_after_attempt, wait_random_exponential

from icegroup.iceberg.errors import LostRace

log = logging.getLogger(__name__)

T = TypeVar("T")


def again_while_losing(
    what: str,
    attempt: Callable[[], T],
    tries: int,
    first_wait_s: float = 0.05,
    gave_up: Callable[[], Exception] | None = None,
    level: int = logging.INFO,
) -> T:
    """``attempt()`` until it does not raise ``LostRace``, at most ``tries`` times; its result.

    When every try lost, raises ``gave_up()``, the error that names the remedy (``LostRace`` itself
    without one). Waits grow from ``first_wait_s`` and are capped at 2 s; each lost try is logged at ``level``.
    """

    def report(state: RetryCallState) -> None:
        lost = state.outcome.exception() if state.outcome is not None else None
        log.log(level, "%s: lost a race (%s); try %d of %d", what, lost, state.attempt_number + 1, tries)

    policy = Retrying(
        retry=retry_if_exception_type(LostRace),
        stop=stop_after_attempt(tries),
        wait=wait_random_exponential(multiplier=first_wait_s, max=2.0),
        before_sleep=report,
        sleep=time.sleep,
        reraise=True,
    )
    try:
        return policy(attempt)
    except LostRace:
        if gave_up is None:
            raise
        raise gave_up() from None


def again_after(
    attempt: Callable[[], T],
    wait_after: Callable[[Exception, int, float], float | None],
    before_wait: Callable[[Exception, int, float], None],
) -> T:
    """``attempt()`` until it returns, waiting between failed tries as ``wait_after`` says; its result.

    After each failed try, ``wait_after(error, failed tries so far, seconds waited so far)`` is the
    wait before the next try, or None to raise ``error`` now; an interrupt (any ``BaseException``
    that is not an ``Exception``) is raised at once. ``before_wait(error, failed tries, wait)``
    hears of each wait first (a progress line, a count). The seconds waited count the sleeps only, not the
    tries' own time, so a loop bounded in waiting is not spent by one slow try. ``time.sleep`` is
    looked up at each wait, so a test can record the waits instead of sleeping them.
    """
    decided: dict[int, float | None] = {}

    def next_wait(state: RetryCallState) -> float | None:
        if state.attempt_number not in decided:
            error = state.outcome.exception() if state.outcome is not None else None
            decided[state.attempt_number] = (
                wait_after(error, state.attempt_number, state.idle_for) if isinstance(error, Exception) else None
            )
        return decided[state.attempt_number]

    def announce(state: RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome is not None else None
        if isinstance(error, Exception):
            before_wait(error, state.attempt_number, next_wait(state) or 0.0)

    policy = Retrying(
        retry=lambda state: next_wait(state) is not None,
        wait=lambda state: next_wait(state) or 0.0,
        before_sleep=announce,
        sleep=lambda seconds: time.sleep(seconds),
        reraise=True,
    )
    return policy(attempt)
