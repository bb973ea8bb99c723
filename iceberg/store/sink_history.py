"""Reading progress back from the sink: the commits Borrowers made, newest first.

Walking parent pointers from the sink head back to the last reconciled snapshot costs one metadata
lookup per new sink snapshot, so reconciliation stays cheap however long the sink's history grows.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from pyiceberg.catalog import Catalog
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot

from icegroup.iceberg.errors import SinkError
from icegroup.iceberg.protocol.fences import epoch_key
from icegroup.iceberg.protocol.sink_commit import (
    ReplayCommit,
    SinkCommit,
    parse_commit,
    parse_replay,
    reset_key,
    resets_key,
)
from icegroup.iceberg.store.tables import former_parent, load_optional, walk_back


@dataclass(frozen=True)
class Written:
    """One snapshot of a sink, as icegroup reads it: the consumption or the replay commit it is, if either."""

    snapshot: Snapshot
    commit: SinkCommit | None
    replay: ReplayCommit | None

    @property
    def group(self) -> str | None:
        """The group that wrote the snapshot; None for snapshots icegroup did not write."""
        made = self.commit or self.replay
        return made.group if made is not None else None


def walk_commits(sink: Table, since: int | None) -> Iterator[Written]:
    """The sink's snapshots on main after ``since`` (None: all), newest first, each decoded once.

    Every reader of the sink's history walks it here, so the summary keys are parsed in one place.
    """
    for snapshot in walk_back(sink, since):
        props = snapshot.summary.additional_properties if snapshot.summary is not None else {}
        added, deleted = int(props.get("added-records", "0")), int(props.get("deleted-records", "0"))
        yield Written(
            snapshot,
            parse_commit(snapshot.snapshot_id, snapshot.timestamp_ms, props, added),
            parse_replay(snapshot.snapshot_id, snapshot.timestamp_ms, props, added, deleted),
        )


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
    for written in walk_commits(table, since):
        last = written.snapshot
        if written.commit is not None and written.commit.group == group:
            commits.append(written.commit)
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


def deleted_key(group: str) -> str:
    """Sink table property: the sink snapshot at which ``icegroup delete`` removed the group's state."""
    return f"icegroup.deleted.{group}"


def deleted_through(table: Table, group: str) -> int | None:
    """The sink snapshot through which the group's commits belong to a deleted group (None: never deleted).

    A group started again after ``icegroup delete`` is a new group: the commits before this
    snapshot are the deleted group's, so a missing registry is not rebuilt from them.
    """
    value = table.properties.get(deleted_key(group))
    return int(value) if value else None


def other_groups_shards(table: Table, group: str) -> set[str]:
    """The shards other groups committed to the sink: a group renamed after a config change keeps its sink.

    Rows carry their shard, not their group, so the rows of ``group`` are those of no other group's
    shard (rows whose commits expired from the history count as the group's own).
    """
    commits, _ = sink_history(table, None)
    return {shard.shard_id for commit in commits if commit.group != group for shard in commit.shards}


def read_sink_history(catalog: Catalog, sink: str, group: str, since: int | None) -> SinkHistory:
    """Commits of ``group`` in ``sink`` after snapshot ``since``; empty while the sink does not exist."""
    return history_of(load_optional(catalog, sink), group, since)


def history_of(table: Table | None, group: str, since: int | None) -> SinkHistory:
    """``read_sink_history`` of a sink already loaded (None: it does not exist yet)."""
    if table is None:
        return SinkHistory(head=None, commits=[])
    head = table.current_snapshot()
    since = since if since is not None else deleted_through(table, group)
    return SinkHistory(
        head=head.snapshot_id if head else None,
        commits=group_commits(table, group, since),
        epoch=int(table.properties.get(epoch_key(group), "0")),
        reset_marker=table.properties.get(reset_key(group), ""),
        resets=table.properties.get(resets_key(group), ""),
    )


def sink_history(sink: Table, group: str | None) -> tuple[list[SinkCommit], list[ReplayCommit]]:
    """Every consumption and replay commit of ``group`` (None: any group's) in the sink's history, newest first.

    A group's history starts after its ``icegroup delete``: the commits before belong to the deleted
    group, and a reset, replay or retention pin of the new one must not act on them.
    """
    commits: list[SinkCommit] = []
    replays: list[ReplayCommit] = []
    for written in walk_commits(sink, deleted_through(sink, group) if group is not None else None):
        if written.commit is not None and group in (None, written.commit.group):
            commits.append(written.commit)
        if written.replay is not None and group in (None, written.replay.group):
            replays.append(written.replay)
    return commits, replays
