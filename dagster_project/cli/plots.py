"""``icegroup describe GROUP --plot``: the group's lag after each lease, and its rows per window, drawn in the terminal.

The lag is what each lease's observation recorded in the Dagster instance as the lease ended
(``lag_rows``, the rows not yet committed then): the same numbers the sink asset's Plots tab draws,
from every consume and Borrower run. The rows per window are the sink's now, from its manifests
(``iceberg/window_audit.py``). Bars, not pixels, so it works over ssh and in CI logs.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from pyiceberg.catalog import Catalog

from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.window_audit import audit_sink

BAR = "█"
WIDTH = 40
LAST = 20


def bars(points: Sequence[tuple[str, float]], width: int = WIDTH) -> list[str]:
    """One line per point: its label, a bar scaled to the largest value, and the value."""
    top = max((value for _, value in points), default=0.0)
    label = max((len(name) for name, _ in points), default=0)
    return [
        f"  {name:<{label}}  {BAR * (round(value / top * width) if top else 0):<{width}}  {value:,.0f}"
        for name, value in points
    ]


def lag_after_leases(home: Path, group: GroupConfig, catalog_name: str, last: int = LAST) -> list[tuple[str, float]]:
    """The ``lag_rows`` of the group's latest lease observations, oldest first, labelled by when they were made.

    Dagster is imported here, so that ``describe`` without ``--plot`` starts without it.
    """
    from icegroup.dagster_project.assets import table_key
    from icegroup.dagster_project.runs.execute import open_instance

    if not home.is_dir():
        return []  # no instance: no lease was observed, and reading must not create one
    with open_instance(home) as instance:
        records = instance.fetch_observations(table_key(catalog_name, group.sink), limit=200).records
    points = []
    for record in sorted(records, key=lambda r: r.timestamp):
        observed = record.asset_observation
        lag = observed.metadata.get("lag_rows") if observed is not None else None
        if lag is not None and isinstance(lag.value, int):
            at = datetime.fromtimestamp(record.timestamp, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")
            points.append((at, float(lag.value)))
    return points[-last:]


def plot_lines(catalog: Catalog, group: GroupConfig, home: Path, catalog_name: str) -> list[str]:
    """Both charts, each under a line that says what it shows; a chart with nothing to draw says so."""
    lag = lag_after_leases(home, group, catalog_name)
    windows = [(w.window, float(w.rows)) for w in audit_sink(catalog, group).windows][-LAST:]
    lines = [f"lag after each lease (rows not yet committed), the last {len(lag)} leases' observations:"]
    lines += bars(lag) if lag else ["  no lease observed in this Dagster instance yet"]
    lines.append(f"rows per window in {group.sink} now, the last {len(windows)} windows:")
    lines += bars(windows) if windows else ["  the sink holds no window yet"]
    return lines
