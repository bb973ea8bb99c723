"""A helper module of a user's transform package: a UDF that calls it needs this module on the executors."""

from __future__ import annotations

import time


def cents(amount: float, pause_s: float = 0.0) -> int:
    """The amount in cents; ``pause_s`` slows each row, so a test can act while a task runs."""
    if pause_s:
        time.sleep(pause_s)
    return round(amount * 100)
