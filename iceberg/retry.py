"""The one retry policy for a compare-and-swap that lost a race to another writer.

Every write icegroup makes to a registry or a sink is a compare-and-swap, and Leaders, Borrowers
and operators write at once: a swap that lost is made again on what is there now. How often, and
how long to back off between tries (exponential, with full jitter so that the losers do not collide
again), is decided here once, on tenacity, for every such write. A try says it lost by raising
``LostRace``; any other exception ends the retries at once and is raised as it is.
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
