"""Planning finds every file a gap of appends added from one manifest list, and from each append's own when it must.

The expected files are read the long way: each append's own manifest list, its ``ADDED`` entries.
"""

from __future__ import annotations

import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.expressions import EqualTo
from pyiceberg.manifest import ManifestEntryStatus
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Operation, Snapshot, Summary

from icegroup.iceberg import shards
from icegroup.iceberg.protocol.shards import FileEntry
from icegroup.iceberg.shards import added_data_files, added_files, snapshot_info
from tests.factories import MakeGroup, create_source, events, next_event_id

MERGE_EVERY_COMMIT = {"commit.manifest-merge.enabled": "true", "commit.manifest.min-count-to-merge": "2"}


def append(source: Table, count: int) -> None:
    first = next_event_id(source)
    source.append(events(first, count, seed=first))


def added_the_long_way(table: Table, snapshot_id: int) -> list[tuple[int, str]]:
    """The files ``snapshot_id`` added, from its own manifest list: (snapshot, path), sorted."""
    snapshot = table.snapshot_by_id(snapshot_id)
    assert snapshot is not None
    return sorted(
        (snapshot_id, entry.data_file.file_path)
        for manifest in snapshot.manifests(table.io)
        if manifest.added_snapshot_id == snapshot_id
        for entry in manifest.fetch_manifest_entry(table.io)
        if entry.status == ManifestEntryStatus.ADDED
    )


def found(entries: list[FileEntry]) -> list[tuple[int, str]]:
    return sorted((entry.snapshot_id, entry.path) for entry in entries)


@pytest.fixture
def manifest_lists_read(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The snapshots whose manifest list planning reads, in order."""
    read: list[int] = []
    manifests = shards.Snapshot.manifests

    def counted(snapshot: shards.Snapshot, io: object) -> object:
        read.append(snapshot.snapshot_id)
        return manifests(snapshot, io)  # type: ignore[arg-type]

    monkeypatch.setattr(shards.Snapshot, "manifests", counted)
    return read


def test_a_gap_of_fast_appends_is_planned_from_the_newest_manifest_list_alone(
    catalog: Catalog, make_group: MakeGroup, manifest_lists_read: list[int]
) -> None:
    source = create_source(catalog, make_group().source)
    for _ in range(6):
        append(source, 9)
    gap = [snapshot_info(s) for s in source.snapshots()][2:]
    manifest_lists_read.clear()

    planned = added_files(source, gap)
    read = list(manifest_lists_read)

    assert read == [gap[-1].snapshot_id]
    assert found(planned) == sorted(f for info in gap for f in added_the_long_way(source, info.snapshot_id))
    order = [info.snapshot_id for info in gap]
    assert [e.snapshot_id for e in planned] == sorted((e.snapshot_id for e in planned), key=order.index)


def test_appends_whose_manifests_were_merged_are_found_as_the_merged_entries_they_became(
    catalog: Catalog, make_group: MakeGroup, manifest_lists_read: list[int]
) -> None:
    source = create_source(catalog, make_group().source)
    source.transaction().set_properties(MERGE_EVERY_COMMIT).commit_transaction()
    for _ in range(5):
        append(source, 9)  # a merge-append: the property makes pyiceberg merge manifests
    snapshots = list(source.snapshots())
    newest = snapshots[-1]
    assert len(newest.manifests(source.io)) == 1, "every append's files were merged into the newest manifest"
    gap = [snapshot_info(s) for s in snapshots if s.summary and s.summary.operation.value == "append"]
    manifest_lists_read.clear()

    planned = added_files(source, gap)
    read = list(manifest_lists_read)

    assert read == [newest.snapshot_id], "the merged manifest accounts for every append"
    assert found(planned) == sorted(f for info in gap for f in added_the_long_way(source, info.snapshot_id))


def test_an_append_whose_files_a_later_delete_took_is_read_from_its_own_manifest_list(
    catalog: Catalog, make_group: MakeGroup, manifest_lists_read: list[int]
) -> None:
    source = create_source(catalog, make_group().source)
    append(source, 9)
    append(source, 9)
    source.delete(EqualTo("region", "eu"))
    append(source, 9)
    snapshots = list(source.snapshots())
    gap = [snapshot_info(s) for s in snapshots if s.summary and s.summary.operation.value == "append"]
    manifest_lists_read.clear()

    planned = added_files(source, gap)
    read = list(manifest_lists_read)

    assert read[0] == gap[-1].snapshot_id
    assert sorted(read[1:]) == sorted([gap[0].snapshot_id, gap[1].snapshot_id]), "their eu files are gone"
    assert found(planned) == sorted(f for info in gap for f in added_the_long_way(source, info.snapshot_id))


@pytest.mark.parametrize(
    ("counts", "added"),
    [
        ({"added-data-files": "4", "total-data-files": "9"}, 4),
        ({"total-data-files": "9"}, 0),  # Iceberg's writers leave a count of 0 out
        ({}, None),  # a writer that keeps no counts: the snapshot is read from its own manifest list
    ],
)
def test_a_snapshot_s_added_files_are_counted_from_its_summary_and_unknown_without_counts(
    counts: dict[str, str], added: int | None
) -> None:
    summary = Summary(Operation.APPEND, **counts)
    snapshot = Snapshot(snapshot_id=1, sequence_number=1, timestamp_ms=1, manifest_list="m.avro", summary=summary)

    assert added_data_files(snapshot) == added
