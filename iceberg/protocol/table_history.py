"""Whether a catalog serves a table with its own snapshot history, which every group position stands on.

A group's position is a source snapshot, and its exactly-once bookkeeping is the sink's snapshot
summaries walked by parent pointers. Iceberg's own catalogs (JDBC, Hive, Glue, Polaris, Lakekeeper,
Iceberg's REST fixture) keep every snapshot in the table's metadata until it expires. Project
Nessie does not: its Iceberg REST endpoint writes each commit's metadata with only the current
snapshot, and no parent (history is kept in Nessie's own commit log), so a position is never found
again and the sink's commits cannot be walked. icegroup refuses such a table before it reads or
writes anything, rather than plan from a history that is not there.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

# A table property Nessie sets on every table it serves through its Iceberg REST endpoint.
NESSIE_COMMIT_PROPERTY = "nessie.commit.id"


@dataclass(frozen=True)
class HistoryView:
    """What a table's metadata says about where it is served from: the facts the check reads, from any client."""

    properties: Mapping[str, str]


def history_missing(view: HistoryView) -> str | None:
    """Why the table's metadata holds no snapshot history, or None when it does.

    Nessie is named by the property it sets on every table it serves. The shape it leaves (one
    snapshot, no parent) is not enough on its own: icegroup's own sink after its first publish, and a
    table replaced and then expired, look the same and keep their history.
    """
    if NESSIE_COMMIT_PROPERTY in view.properties:
        return (
            "it is served by Project Nessie, whose Iceberg REST endpoint keeps only the current snapshot in a "
            "table's metadata (history is in Nessie's commit log)"
        )
    return None
