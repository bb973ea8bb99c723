"""Consuming until caught up, the pure half: how long ``consume`` waits and how often it looks.

The ``icegroup consume`` flags and the consume job's run config share these defaults, so that a
scheduled run and a command behave alike unless told otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RunOptions:
    """A consume run's patience: seconds without progress before it gives up, seconds between looks, and follow."""

    max_wait_s: float = 600.0
    poll_s: float = 1.0
    follow: bool = False


DEFAULTS = RunOptions()
