"""What the ``icegroup`` commands share: naming a group, times, tables, a group as text, the Dagster home.

Nothing here imports Dagster; running a job in the instance is ``dagster_project/runs/execute.py``.
"""

from __future__ import annotations

import io
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from pyiceberg.catalog import Catalog

from icegroup.dagster_project.cli.output import text
from icegroup.iceberg.config.lakehouse import ENV_HOME
from icegroup.iceberg.errors import UsageError
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.store.registrations import read_registrations
from icegroup.iceberg.store.registry import load_state
from icegroup.iceberg.store.tables import load_optional

if TYPE_CHECKING:
    from icegroup.iceberg.describe import GroupView

GROUP_HELP = "the group's name, as its groups file defines it (`icegroup list` shows them)"


def pick(groups: dict[str, GroupConfig], name: str, source: Path) -> GroupConfig:
    """The named group, or an error listing the defined ones."""
    if name not in groups:
        raise UsageError(f"group {name!r} is not defined in {source}; defined: {sorted(groups) or 'none'}")
    return groups[name]


def table(rows: list[dict[str, object]], columns: list[str]) -> str:
    """Left-aligned columns under upper-case headers, as plain text (rich lays them out; no colour, no wrapping).

    Cells are printed as they are (an absent value as ``none``, a list joined by commas, a column
    the row does not have as an empty cell): no markup
    or emoji codes are read in them, and a long cell is never folded, so the output greps and pipes
    like any Unix tool's.
    """
    from rich.console import Console  # rich loads only for a table: not before a consume's JVM starts
    from rich.table import Table

    grid = Table(box=None, pad_edge=False, show_edge=False, header_style="", padding=(0, 1))
    for column in columns:
        grid.add_column(column.upper(), no_wrap=True, overflow="ignore")
    for row in rows:
        grid.add_row(*(text(row[column]).expandtabs() if column in row else "" for column in columns))
    out = io.StringIO()
    Console(file=out, width=1_000_000, color_system=None, highlight=False, markup=False, emoji=False).print(grid)
    return "\n".join(line.rstrip() for line in out.getvalue().splitlines())


def dagster_home(create: bool = True) -> Path:
    """``$DAGSTER_HOME``, else ``.dagster`` under ``$ICEGROUP_HOME``: the instance ``make ui`` shows.

    A command that only reads passes ``create=False``: it must leave no folder behind, and an
    instance that is not there has nothing to show.
    """
    home = Path(os.environ.get("DAGSTER_HOME") or Path(os.environ.get(ENV_HOME, ".")) / ".dagster").resolve()
    if create:
        home.mkdir(parents=True, exist_ok=True)
    return home


def view_json(catalog: Catalog, group: GroupConfig, view: GroupView) -> dict[str, object]:
    """``describe --json``: the view's fields, with its registration and replays as fields rather than sentences.

    The text form's retention and replay lines are written for a person; a program gets what they
    are made of: the group's registration on its source (what ``icegroup expire`` keeps for it) and
    each replay ticket in flight (none for a view ``--as-of`` the past).
    """
    data = view.as_dict()
    del data["retention"]
    source = load_optional(catalog, group.source)
    registration = read_registrations(source).get(group.name) if source is not None else None
    data["registration"] = registration.model_dump() if registration is not None else None
    state = None if view.historical else load_state(catalog, group.name).state
    tickets = sorted(state.replays.values(), key=lambda t: t.window) if state is not None else []
    data["replays"] = [ticket.model_dump() for ticket in tickets]
    return data


def render(view: GroupView) -> str:
    """``describe`` as text: a header, then one line per stream."""
    at = datetime.fromtimestamp(view.as_of_ms / 1000, tz=UTC).isoformat(timespec="seconds")
    head = (
        (f"as of {at} (the registry's commit then; not reconciled with the sink)\n" if view.historical else "")
        + f"group {view.group}: {view.source} -> {view.sink}  epoch {view.epoch}  {view.status}\n"
        f"source head {text(view.source_head)}  planned through {text(view.planned_through)}  "
        f"pending shards {view.pending_shards}  leases in flight {view.leases_in_flight}  "
        + (f"leases parked {view.leases_parked}  " if view.leases_parked else "")
        + f"leases done {view.leases_done}  lag {view.lag_snapshots} snapshots / {view.lag_rows} rows"
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
            "lag_age": None if (age := s.age_at(view.as_of_ms)) is None else f"{age:.1f}s",
            "committed_rows": s.committed_rows,
            "rate": None if s.rate_rows_s is None else f"{rate_text(s.rate_rows_s)} rows/s",
            "leases": s.leases,
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


def rate_text(rows_s: float) -> str:
    """A rate with the digits that matter: whole rows from 10 a second up, else three significant digits.

    Rounded to whole rows, a stream that commits a few rows a minute read ``0 rows/s`` beside the
    0.077 that ``metrics`` gives for it.
    """
    return f"{rows_s:,.0f}" if rows_s >= 10 or rows_s == 0 else f"{rows_s:.3g}"
