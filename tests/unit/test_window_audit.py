"""The window audit: every commit's rows intact, nothing written by hand, no shard twice; pure, then on a real sink."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import DateType, LongType, NestedField

from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.sink_commit import COL_SHARD, COL_WINDOW, commit_properties, shard_number
from icegroup.iceberg.protocol.window_audit import COMPACTION, RESET, CommitFacts, audit_window
from icegroup.iceberg.window_audit import audit_sink
from tests.factories import shard

WINDOW = "2026-11-26"


def ours(snapshot_id: int, rows: int, *shards: str, sequence: int | None = None) -> CommitFacts:
    """A consumption commit of group ``g`` that added ``rows`` rows to the window."""
    return CommitFacts(snapshot_id, sequence or snapshot_id, "g", "append", rows, shards)


def test_a_window_whose_commits_are_all_there_is_exactly_once() -> None:
    facts = {1: ours(1, 10, "a"), 2: ours(2, 5, "b"), 3: CommitFacts(3, 3, "other", "append", 7, ("z",))}

    audit = audit_window("g", WINDOW, {1: 10, 2: 5, 3: 7}, {}, facts, expected={1, 2})

    assert audit.ok
    assert (audit.rows, audit.commits) == (15, 2), "another group's rows on the sink are theirs to judge"
    assert audit.describe() == f"window {WINDOW}: 15 rows from 2 commits of g, exactly once"


def test_a_row_deleted_by_hand_fails_the_window_naming_the_commit_and_the_rewrite() -> None:
    rewrite = CommitFacts(4, 4, None, "overwrite", 9, ())
    facts = {1: ours(1, 10, "a"), 4: rewrite}

    audit = audit_window("g", WINDOW, {4: 9}, {}, facts, expected={1})

    assert not audit.ok
    assert audit.problems[0].startswith("9 rows were written outside icegroup by sink snapshot 4 (overwrite)")
    assert audit.problems[1].startswith("all 10 rows sink snapshot 1 added are gone")
    assert audit.describe().startswith(f"window {WINDOW} of group g: 9 rows were written outside icegroup")
    assert audit.describe().endswith(f"`icegroup replay g --window {WINDOW} --execute` writes it again from its source")
    assert audit.describe().count("icegroup replay") == 1, "the remedy once, after every problem of the window"


def test_missing_rows_delete_files_and_a_shard_committed_twice_each_fail() -> None:
    facts = {1: ours(1, 10, "a"), 2: ours(2, 4, "a"), 5: CommitFacts(5, 5, None, "delete", 0)}

    audit = audit_window("g", WINDOW, {1: 8, 2: 4}, {5: 2}, facts, expected={1, 2})

    assert [p.split(";")[0] for p in audit.problems] == [
        "sink snapshot 1 added 10 rows, and 8 are left",
        "shard a was committed twice, by sink snapshots 1 and 2",
        "delete files of sink snapshot 5 hide up to 2 rows",
    ]


def test_commits_before_a_reset_of_the_group_are_not_counted_and_expired_snapshots_are_not_judged() -> None:
    reset = CommitFacts(3, 3, "g", "overwrite", 6, rewrite=RESET)
    facts = {1: ours(1, 10, "a"), 2: ours(2, 5, "b"), 3: reset, 4: ours(4, 5, "b2")}

    audit = audit_window("g", WINDOW, {1: 6, 3: 6, 4: 5, 99: 3}, {}, facts, expected={1, 2, 4})

    assert audit.ok, "the reset deleted shard b's rows and rewrote part of commit 1; commit 4 consumed them again"
    assert (audit.rows, audit.commits) == (17, 2)


def test_a_compaction_keeps_the_window_exactly_once_and_a_hand_delete_after_it_still_fails() -> None:
    compaction = CommitFacts(3, 3, None, "replace", 15, rewrite=COMPACTION)
    facts = {1: ours(1, 10, "a"), 2: ours(2, 5, "b"), 3: compaction}

    compacted = audit_window("g", WINDOW, {3: 15}, {}, facts, expected={1, 2})
    assert compacted.ok, "the same rows in fewer files, by an engine that writes no group"
    assert compacted.rows == 0, "a compaction's files are not told apart by group"

    rewrite = CommitFacts(4, 4, None, "overwrite", 14)
    deleted = audit_window("g", WINDOW, {4: 14}, {}, {**facts, 4: rewrite}, expected={1, 2})
    assert not deleted.ok
    assert deleted.problems[0].startswith("14 rows were written outside icegroup by sink snapshot 4 (overwrite)")


def window_sink(catalog: Catalog, group: GroupConfig) -> Table:
    """A sink in a Borrower's shape, partitioned by day window: rows carry their shard and window."""
    schema = Schema(
        NestedField(1, "id", LongType(), required=True),
        NestedField(2, COL_SHARD, LongType(), required=False),
        NestedField(3, COL_WINDOW, DateType(), required=False),
    )
    spec = PartitionSpec(PartitionField(3, 1000, IdentityTransform(), COL_WINDOW))
    return catalog.create_table(group.sink, schema=schema, partition_spec=spec)


def commit(sink: Table, group: GroupConfig, n: int, ids: range, day: date) -> None:
    """One consumption commit of the ``n``-th shard into ``day``, with the summary a Borrower's commit carries."""
    made = shard(
        n, rows=len(ids), window_start_ms=int(datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp() * 1000)
    )
    rows = [{"id": i, COL_SHARD: shard_number(made.shard_id), COL_WINDOW: day} for i in ids]
    props = commit_properties(group.name, group.source, "lease", 0, 0, [made], None, None)
    sink.append(pa.Table.from_pylist(rows, schema=sink.schema().as_arrow()), snapshot_properties=props)


def test_the_audit_reads_a_real_sink_and_fails_a_window_after_a_row_is_deleted_by_hand(
    catalog: Catalog, group: GroupConfig
) -> None:
    sink = window_sink(catalog, group)
    today, yesterday = date(2026, 11, 26), date(2026, 11, 25)
    commit(sink, group, 1, range(0, 10), today)
    commit(sink, group, 2, range(10, 15), today)
    commit(sink, group, 3, range(15, 20), yesterday)

    audit = audit_sink(catalog, group)
    assert audit.ok
    assert [(w.window, w.rows, w.commits) for w in audit.windows] == [("2026-11-25", 5, 1), ("2026-11-26", 15, 2)]
    assert audit.describe() == f"2 windows, 20 rows of group {group.name}: exactly once"

    sink.delete("id = 3")

    broken = audit_sink(catalog, group)
    assert [w.window for w in broken.failing()] == ["2026-11-26"], "the other window is untouched"
    problems = broken.window("2026-11-26").problems
    assert problems[0].startswith("9 rows were written outside icegroup by sink snapshot")
    assert problems[1].startswith("all 10 rows sink snapshot")
    assert broken.describe().startswith(f"window 2026-11-26 of group {group.name}: 9 rows were written outside")
