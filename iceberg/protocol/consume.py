"""Consuming until caught up, the pure half: how long ``consume`` waits and how often it looks.

The ``icegroup consume`` flags and the consume job's run config share these defaults, so that a
scheduled run and a command behave alike unless told otherwise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class RunOptions:
    """A consume run's patience: seconds without progress before it gives up, seconds between looks, and follow."""

    max_wait_s: float = 600.0
    poll_s: float = 1.0
    follow: bool = False


DEFAULTS = RunOptions()


def next_poll_s(now_s: float, poll_s: float) -> float:
    """When a following consume looks at the source next: the next multiple of ``poll_s`` after ``now_s``.

    This is Structured Streaming's ``processingTime`` trigger (``ProcessingTimeExecutor``): looks
    keep a fixed rhythm whatever a batch took, so a commit waits for the next look, not for a
    whole ``poll_s`` after the last batch ended. A batch that overran its slot is followed by the
    next slot boundary, not by a burst of catch-up looks.
    """
    if poll_s <= 0:
        return now_s
    return (math.floor(now_s / poll_s) + 1) * poll_s
