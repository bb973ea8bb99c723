"""What the ``icegroup`` commands share: naming a group, times, tables, and where the Dagster instance is.

Nothing here imports Dagster; running a job in the instance is ``cli_runs.py``.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

from iceberg.errors import UsageError
from iceberg.groups import GroupConfig
from iceberg.lakehouse import ENV_HOME


def pick(groups: dict[str, GroupConfig], name: str, source: Path) -> GroupConfig:
    """The named group, or an error listing the defined ones."""
    if name not in groups:
        raise UsageError(f"group {name!r} is not defined in {source}; defined: {sorted(groups) or 'none'}")
    return groups[name]


def parse_time(text: str, option: str) -> int:
    """An ISO-8601 time (UTC if it names no zone) as epoch milliseconds, or an error naming the option."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(f"{option}: {text!r} is not an ISO-8601 time; write it like 2026-11-23T14:05:00Z") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def table(rows: list[dict[str, object]], columns: list[str]) -> str:
    """Left-aligned columns, upper-case headers."""
    cells = [[c.upper() for c in columns]] + [[str(row.get(c, "")) for c in columns] for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)).rstrip() for line in cells)


def dagster_home() -> Path:
    """``$DAGSTER_HOME``, else ``.dagster`` under ``$ICEGROUP_HOME``: the instance ``make ui`` shows."""
    home = Path(os.environ.get("DAGSTER_HOME") or Path(os.environ.get(ENV_HOME, ".")) / ".dagster").resolve()
    home.mkdir(parents=True, exist_ok=True)
    return home
