"""The lakes near a catalog path that does not exist: what a mistyped ``catalog_uri`` most likely meant."""

from __future__ import annotations

from pathlib import Path

SQLITE_HEADER = b"SQLite format 3\x00"


def nearby_lakes(missing: Path) -> list[Path]:
    """SQLite catalogs beside a missing catalog file, or one folder up: what a mistyped path most likely meant.

    Only a file that starts with SQLite's header counts; at most five, nearest first.
    """
    found: list[Path] = []
    for folder in (missing.parent, missing.parent.parent):
        try:
            candidates = sorted(p for p in folder.glob("*.db") if p.is_file())
            candidates += sorted(p for p in folder.glob("*/catalog.db") if p.is_file())
        except OSError:
            continue
        for path in candidates:
            if path not in found and _is_sqlite(path):
                found.append(path)
    return found[:5]


def _is_sqlite(path: Path) -> bool:
    try:
        with path.open("rb") as handle:
            return handle.read(len(SQLITE_HEADER)) == SQLITE_HEADER
    except OSError:
        return False
