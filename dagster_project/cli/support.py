"""What the ``icegroup`` commands share: naming a group, times, tables, a group as text, the Dagster home.

Nothing here imports Dagster; running a job in the instance is ``cli_runs.py``.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

from iceberg.config.lakehouse import ENV_HOME
from iceberg.describe import GroupView
from iceberg.errors import UsageError
from iceberg.protocol.group import GroupConfig


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


def render(view: GroupView) -> str:
    """``describe`` as text: a header, then one line per stream."""
    at = datetime.fromtimestamp(view.as_of_ms / 1000, tz=UTC).isoformat(timespec="seconds")
    head = (
        (f"as of {at} (the registry's commit then; not reconciled with the sink)\n" if view.historical else "")
        + f"group {view.group}: {view.source} -> {view.sink}  epoch {view.epoch}  {view.status}\n"
        f"source head {view.source_head}  planned through {view.planned_through}  "
        f"pending shards {view.pending_shards}  leases in flight {view.leases_in_flight}  "
        f"leases done {view.leases_done}  lag {view.lag_snapshots} snapshots / {view.lag_rows} rows"
        + (f" / {view.lag_age_s:.1f}s (oldest unconsumed commit)" if view.lag_age_s is not None else "")
        + (
            f"\nstreams done and folded out of the registry: {view.retired_streams} ({view.retired_rows} rows)"
            if view.retired_streams
            else ""
        )
    )
    rows: list[dict[str, object]] = [
        {
            "stream": s.stream,
            "position": s.position,
            "head": s.head,
            "lag_snapshots": s.lag_snapshots,
            "lag_rows": s.lag_rows,
            "lag_age": "-" if (age := s.age_at(view.as_of_ms)) is None else f"{age:.1f}s",
            "committed_rows": s.committed_rows,
            "rate": "-" if s.rate_rows_s is None else f"{s.rate_rows_s:,.0f} rows/s",
            "leases": ",".join(s.leases) or "-",
        }
        for s in view.streams
    ]
    columns = ["stream", "position", "head", "lag_snapshots", "lag_rows", "lag_age", "committed_rows", "rate", "leases"]
    holds = "".join(f"\n  {line}" for line in view.hold_lines())
    replays = "".join(f"\n  {line}" for line in view.replays)
    retention = "".join(f"\n{line}" for line in view.retention)
    return (
        f"{head}\n{table(rows, columns)}"
        + (f"\nleases in flight:{holds}" if holds else "")
        + (f"\nreplays in flight:{replays}" if replays else "")
        + retention
    )
