"""Durations and times as people write them in configs and on the command line, read in one place.

Durations: ``30d``, ``12h``, ``PT1H``, ``P1DT12H``. Times: ISO-8601, UTC when they name no zone.
Each parser raises ``ValueError`` naming the forms it takes; ``option_value`` turns that into the
``UsageError`` that names the command-line option too.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TypeVar

from icegroup.iceberg.errors import UsageError

DURATION = re.compile(r"^P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+)S)?)?$|^(\d+)([smhd])$")
FORMS = "PT1H, P1DT12H, 90s, 15m, 12h or 30d"
T = TypeVar("T")


def parse_duration(text: str) -> timedelta:
    """``PT1H``, ``P2DT3H``, or ``90s``/``15m``/``2h``/``3d``; ``ValueError`` naming the forms otherwise."""
    found = DURATION.match(text.strip())
    if found is None or not any(found.groups()):
        raise ValueError(f"{text!r} is not a duration; write it like {FORMS}")
    if found.group(5) is not None:
        unit = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}[found.group(6)]
        return timedelta(**{unit: int(found.group(5))})
    days, hours, minutes, seconds = (int(g or 0) for g in found.groups()[:4])
    return timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds)


def format_duration(value: timedelta) -> str:
    """A duration as the shortest form ``parse_duration`` reads back: ``30d``, ``12h``, ``15m`` or ``90s``."""
    seconds = int(value.total_seconds())
    for unit, width in (("d", 86_400), ("h", 3_600), ("m", 60)):
        if seconds and seconds % width == 0:
            return f"{seconds // width}{unit}"
    return f"{seconds}s"


def parse_time(text: str) -> int:
    """An ISO-8601 time in epoch milliseconds, UTC when it names no zone; ``ValueError`` naming the form otherwise."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"{text!r} is not an ISO-8601 time; write it like 2026-11-23T14:05:00Z") from None
    return int((moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp() * 1000)


def format_time(ms: int) -> str:
    """A time in epoch milliseconds as ISO-8601 UTC, as ``parse_time`` reads it back."""
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="seconds")


def option_value(option: str, parse: Callable[[str], T], text: str) -> T:
    """``parse(text)`` for a command-line option; its ``ValueError`` as a ``UsageError`` that names the option."""
    try:
        return parse(text)
    except ValueError as exc:
        raise UsageError(f"{option}: {exc}") from None
