"""Reading progress back from the sink: the commits Borrowers made, newest first.

Walking parent pointers from the sink head back to the last reconciled snapshot costs one metadata
lookup per new sink snapshot, so reconciliation stays cheap however long the sink's history grows.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyiceberg.catalog import Catalog
from pyiceberg.table import Table

from iceberg.errors import SinkError
from iceberg.protocol.lineage import SinkCommit, epoch_key, parse_commit, reset_key, resets_key
from iceberg.tables import former_parent, load_optional, walk_back


@dataclass(frozen=True)
class SinkHistory:
    """Commits of one group found in the sink after a cursor, oldest first, the group's epoch fence and reset marker."""

    head: int | None
    commits: list[SinkCommit]
    epoch: int = 0
    reset_marker: str = ""
    resets: str = ""

    def shard_ids(self) -> set[str]:
        """Every shard committed in these commits."""
        return {shard.shard_id for commit in self.commits for shard in commit.shards}


def group_commits(table: Table, group: str, since: int | None) -> list[SinkCommit]:
    """The group's commits after ``since`` on the sink's main branch, oldest first.

    If the walk cannot get back to ``since`` (sink snapshots after it were expired), commits may
    be missing from what it found, and treating their shards as pending would commit them twice:
    that is an error, not a shorter history. A walk that ends at a snapshot whose parent pyiceberg's
    expiry cleared asks the table's older metadata whether that parent was ``since``.
    """
    commits = []
    last = None
    for snapshot in walk_back(table, since):
        last = snapshot
        summary = snapshot.summary
        if summary is None:
            continue
        props = summary.additional_properties
        commit = parse_commit(snapshot.snapshot_id, snapshot.timestamp_ms, props, int(props.get("added-records", "0")))
        if commit is not None and commit.group == group:
            commits.append(commit)
    head = table.current_snapshot()
    reached = since is None or (
        last.parent_snapshot_id == since if last is not None else head is None or head.snapshot_id == since
    )
    if not reached and last is not None and last.parent_snapshot_id is None and (last.sequence_number or 0) > 1:
        reached = former_parent(table, last.snapshot_id) == since
    if not reached:
        raise SinkError(
            f"sink: snapshots of {'.'.join(table.name())} between {since} (the last one group {group!r} "
            "reconciled) and "
            "its head were expired, so commits since then cannot be read back; restore them, and expire sink "
            "snapshots only once the group has reconciled them (icegroup describe shows its sink cursor)"
        )
    commits.reverse()
    return commits


def read_sink_history(catalog: Catalog, sink: str, group: str, since: int | None) -> SinkHistory:
    """Commits of ``group`` in ``sink`` after snapshot ``since``; empty while the sink does not exist."""
    table = load_optional(catalog, sink)
    if table is None:
        return SinkHistory(head=None, commits=[])
    head = table.current_snapshot()
    return SinkHistory(
        head=head.snapshot_id if head else None,
        commits=group_commits(table, group, since),
        epoch=int(table.properties.get(epoch_key(group), "0")),
        reset_marker=table.properties.get(reset_key(group), ""),
        resets=table.properties.get(resets_key(group), ""),
    )
