"""Reading Borrower commits back from a real SQLite-catalog sink, including expired sink history.

Borrower commits are simulated with pyiceberg appends carrying the lineage summary a Borrower
writes. Snapshots are expired two ways, metadata only: with pyiceberg's ``expire_snapshots``, which
also clears the ``parent-snapshot-id`` of a surviving child of an expired snapshot, and as Java
Iceberg (Spark's ``expire_snapshots`` procedure) does, which leaves that parent id dangling.
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.serializers import ToOutputFile
from pyiceberg.table import Table

from icegroup.iceberg.errors import SinkError
from icegroup.iceberg.protocol.sink_commit import commit_properties
from icegroup.iceberg.store.sink_history import group_commits, read_sink_history
from tests.factories import shard
from tests.sink_commits import ID_SCHEMA

GROUP = "orders"


def commit(sink: Table, n: int, group: str = GROUP) -> int:
    """Append what a Borrower's commit of shard ``n`` records; returns the new sink snapshot id."""
    properties = commit_properties(group, "src.events", "fedcba9876543210", 0, 0, [shard(n)])
    sink.append(pa.Table.from_pylist([{"id": n}], schema=ID_SCHEMA.as_arrow()), snapshot_properties=properties)
    head = sink.current_snapshot()
    assert head is not None
    return head.snapshot_id


def build_sink(catalog: Catalog, ns: str, shards: int) -> tuple[Table, list[int]]:
    """A sink with one commit of this group per shard 1..shards; returns it and its snapshot ids."""
    catalog.create_namespace_if_not_exists(ns)
    sink = catalog.create_table(f"{ns}.events_out", schema=ID_SCHEMA)
    return sink, [commit(sink, n) for n in range(1, shards + 1)]


def expire(sink: Table, snapshot_ids: list[int]) -> None:
    """Pyiceberg's expiry: the child of an expired snapshot loses its parent id."""
    sink.maintenance.expire_snapshots().by_ids(snapshot_ids).commit()
    assert not {s.snapshot_id for s in sink.snapshots()} & set(snapshot_ids)


def expire_as_java(catalog: Catalog, sink: Table, snapshot_ids: list[int]) -> Table:
    """Java Iceberg's expiry, registered as a table of its own: parent ids of survivors are kept."""
    gone = set(snapshot_ids)
    metadata = sink.metadata.model_copy(
        update={
            "snapshots": [s for s in sink.metadata.snapshots if s.snapshot_id not in gone],
            "snapshot_log": [e for e in sink.metadata.snapshot_log if e.snapshot_id not in gone],
        }
    )
    location = sink.metadata_location.replace(".metadata.json", "-java-expired.metadata.json")
    ToOutputFile.table_metadata(metadata, sink.io.new_output(location))
    namespace, name = sink.name()[-2:]
    expired = catalog.register_table(f"{namespace}.{name}_java", location)
    assert not {s.snapshot_id for s in expired.snapshots()} & gone
    return expired


def expired_sink(catalog: Catalog, sink: Table, snapshot_ids: list[int], style: str) -> str:
    """Expire the snapshots in the given style; returns the identifier to read the sink by."""
    if style == "pyiceberg":
        expire(sink, snapshot_ids)
        return ".".join(sink.name()[-2:])
    return ".".join(expire_as_java(catalog, sink, snapshot_ids).name()[-2:])


def shard_ids(sink: Table, since: int | None) -> list[str]:
    """The ids of the shards the group committed after ``since``, oldest first."""
    return [s.shard_id for c in group_commits(sink, GROUP, since) for s in c.shards]


def test_commits_after_the_cursor_come_oldest_first(catalog: Catalog, ns: str) -> None:
    sink, snapshots = build_sink(catalog, ns, 4)

    commits = group_commits(sink, GROUP, snapshots[1])

    assert [c.snapshot_id for c in commits] == snapshots[2:]
    assert [s.shard_id for c in commits for s in c.shards] == [shard(3).shard_id, shard(4).shard_id]


def test_without_a_cursor_the_walk_reads_every_commit_of_the_group(catalog: Catalog, ns: str) -> None:
    sink, snapshots = build_sink(catalog, ns, 2)
    other = commit(sink, 9, group="other")
    sink.append(pa.Table.from_pylist([{"id": 0}], schema=ID_SCHEMA.as_arrow()))  # not icegroup's
    last = commit(sink, 3)

    commits = group_commits(sink, GROUP, None)

    assert [c.snapshot_id for c in commits] == [*snapshots, last]
    assert other not in {c.snapshot_id for c in commits}
    assert read_sink_history(catalog, f"{ns}.events_out", GROUP, None).shard_ids() == {
        shard(n).shard_id for n in (1, 2, 3)
    }


def test_a_cursor_at_the_head_finds_nothing_new(catalog: Catalog, ns: str) -> None:
    sink, snapshots = build_sink(catalog, ns, 2)

    assert group_commits(sink, GROUP, snapshots[-1]) == []


@pytest.mark.parametrize("style", ["pyiceberg", "java"])
@pytest.mark.parametrize("expired", [[1], [0, 1], [1, 2]], ids=["after-cursor", "cursor-and-after", "two-after"])
def test_expired_snapshots_after_the_cursor_are_an_error_naming_sink_cursor_and_remedy(
    catalog: Catalog, ns: str, expired: list[int], style: str
) -> None:
    sink, snapshots = build_sink(catalog, ns, 4)
    since = snapshots[0]
    identifier = expired_sink(catalog, sink, [snapshots[i] for i in expired], style)

    with pytest.raises(SinkError) as info:
        read_sink_history(catalog, identifier, GROUP, since)

    message = str(info.value)
    assert message.startswith("sink: ")
    assert identifier.split(".")[1] in message
    assert ns in message
    assert f"between {since} (the last one group {GROUP!r} reconciled)" in message
    assert "were expired" in message
    assert "restore them" in message
    assert "expire sink snapshots only once the group has reconciled them" in message
    assert "icegroup describe" in message


def test_an_expired_cursor_that_is_still_the_parent_of_the_oldest_snapshot_is_not_an_error(
    catalog: Catalog, ns: str
) -> None:
    sink, snapshots = build_sink(catalog, ns, 3)
    identifier = expired_sink(catalog, sink, [snapshots[0]], "java")

    history = read_sink_history(catalog, identifier, GROUP, snapshots[0])

    assert [c.snapshot_id for c in history.commits] == snapshots[1:]
    assert history.head == snapshots[-1]
    assert history.shard_ids() == {shard(2).shard_id, shard(3).shard_id}


def test_a_cursor_expired_by_pyiceberg_that_was_the_parent_of_the_oldest_snapshot_is_not_an_error(
    catalog: Catalog, ns: str
) -> None:
    sink, snapshots = build_sink(catalog, ns, 3)
    expire(sink, [snapshots[0]])

    assert shard_ids(sink, snapshots[0]) == [shard(2).shard_id, shard(3).shard_id]


def test_a_cursor_on_an_empty_or_missing_sink_finds_nothing(catalog: Catalog, ns: str) -> None:
    catalog.create_namespace_if_not_exists(ns)
    assert read_sink_history(catalog, f"{ns}.events_out", GROUP, 123).commits == []
    sink = catalog.create_table(f"{ns}.events_out", schema=ID_SCHEMA)

    assert group_commits(sink, GROUP, 123) == []
