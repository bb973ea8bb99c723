"""Durations as people write them in configs and on the command line: ``30d``, ``12h``, ``PT1H``, ``P1DT12H``."""

from __future__ import annotations

import re
from datetime import timedelta

DURATION = re.compile(r"^P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+)S)?)?$|^(\d+)([smhd])$")
FORMS = "PT1H, P1DT12H, 90s, 15m, 12h or 30d"


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
