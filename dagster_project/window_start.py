"""Where a group's sink partitions begin when its config leaves ``window_start`` unset.

A fixed first day gave the sink of a table created today hundreds of empty daily partitions (and
the Leader as many empty windows to complete). Left unset, the first window is the day of the
source's first commit, so the partitions cover exactly the history the group can consume; a
group starting at a timestamp begins on that day, and a source with no commit yet begins today
(the group's registration: everything it will read is committed from now on).

This is read when the definitions load, never at import. A catalog that cannot be reached then
leaves the field's default in place: more partitions than needed, but every commit still has one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from datetime import UTC, date, datetime

from pyiceberg.exceptions import NoSuchNamespaceError
from pyiceberg.table import Table

from icegroup.iceberg.config.lakehouse import LakehouseConfig
from icegroup.iceberg.errors import CatalogUnavailable
from icegroup.iceberg.protocol.group import GroupConfig, StartAtTimestamp
from icegroup.iceberg.store.tables import load_optional

log = logging.getLogger(__name__)


def first_window_day(group: GroupConfig, first_commit_ms: int | None, today: date) -> date:
    """The first day of a group's partitions: its first commit's day, its start timestamp's day, or today.

    Never after today, so the current window always has a partition; never before the source's
    first commit, which no window of the group can hold anything from.
    """
    first = datetime.fromtimestamp(first_commit_ms / 1000, UTC).date() if first_commit_ms is not None else None
    if isinstance(group.start, StartAtTimestamp):
        day = group.start.timestamp.astimezone(UTC).date()
        return min(max(day, first) if first else day, today)
    return min(first, today) if first else today


def first_commit_ms(table: Table | None) -> int | None:
    """When the table's oldest snapshot still in its metadata was committed (None: no table, or no commit)."""
    if table is None:
        return None
    times = [s.timestamp_ms for s in table.snapshots()] + [e.timestamp_ms for e in table.metadata.snapshot_log]
    return min(times, default=None)


def resolve_window_starts(
    groups: Mapping[str, GroupConfig],
    lakehouse: Callable[[], LakehouseConfig],
    today: date | None = None,
    strict: bool = False,
) -> dict[str, GroupConfig]:
    """The groups, each with ``window_start`` set: as configured, or from its source in the catalog.

    ``lakehouse`` is only called when a group needs the catalog, and a local lake that does not
    exist yet is not created by asking: its tables have no commits, so their groups begin today.
    A code location must load while the catalog is down, so by default an unreadable catalog is
    logged; with ``strict`` (the command line) it is raised, as the one named error the user sees.
    """
    today = today or datetime.now(UTC).date()
    unset = [g for g in groups.values() if "window_start" not in g.model_fields_set]
    if not unset:
        return dict(groups)
    resolved = dict(groups)
    needs_catalog = [g for g in unset if not isinstance(g.start, StartAtTimestamp)]
    try:
        firsts = first_commits(lakehouse(), [g.source for g in needs_catalog]) if needs_catalog else {}
    except (CatalogUnavailable, OSError) as exc:
        if strict:
            raise
        log.warning(
            "icegroup: the catalog cannot be read (%s); groups %s keep window_start %s until the definitions load "
            "again. Set window_start in the group config to fix their first day",
            exc,
            ", ".join(g.name for g in needs_catalog),
            needs_catalog[0].window_start,
        )
        unset = [g for g in unset if isinstance(g.start, StartAtTimestamp)]
        firsts = {}
    for group in unset:
        day = first_window_day(group, firsts.get(group.source), today)
        resolved[group.name] = group.model_copy(update={"window_start": day})
    return resolved


def first_commits(lakehouse: LakehouseConfig, sources: list[str]) -> dict[str, int | None]:
    """Each source's first commit time; a lake that does not exist yet is not created to find out."""
    if lakehouse.missing_lake() is not None:
        return {}
    catalog = lakehouse.catalog()
    firsts: dict[str, int | None] = {}
    for source in sources:
        try:
            firsts[source] = first_commit_ms(load_optional(catalog, source))
        except NoSuchNamespaceError:
            firsts[source] = None
    return firsts
