"""The pure parts of lineage answers: pending entries merged with stored ones, and rows told apart by file."""

from __future__ import annotations

from dataclasses import replace

import pytest
from pyiceberg.expressions.parser import parse

from icegroup.iceberg.lineage import Answer, forward_filter
from icegroup.iceberg.lineage_rows import MAX_ROW_IDS, by_their_files, source_rows
from icegroup.iceberg.protocol.file_ref import file_ref
from icegroup.iceberg.protocol.lineage import CONSUMED, LineageEntry
from icegroup.iceberg.protocol.sink_commit import shard_number, shard_texts
from icegroup.iceberg.store.lineage import Pending, matching

ENTRY = LineageEntry(
    group="g",
    window="2026-11-26",
    stream="0:region=eu",
    shard_id="s1",
    from_snapshot=None,
    to_snapshot=2,
    to_sequence=2,
    source_file="/w/a.parquet",
    source_snapshot=1,
    file_records=10,
    file_bytes=100,
    shard_rows=20,
    sink_snapshot=7,
    committed_at_ms=0,
    kind=CONSUMED,
    generation=0,
    lease_id="l1",
    attempt=0,
    epoch=0,
    run_id=None,
    config_hash=None,
)
A, B = ENTRY, replace(ENTRY, source_file="/w/b.parquet")
C = replace(ENTRY, shard_id="s2", source_file="/w/c.parquet", window="2026-11-27")


def test_pending_commits_replace_what_they_supersede_or_void_and_match_a_filter_like_a_scan() -> None:
    pending = Pending(entries=[C], superseded=frozenset({"2026-11-26"}), drop_shards=frozenset({"s9"}))
    voided = replace(ENTRY, shard_id="s9", window="2026-11-25")
    kept = replace(ENTRY, shard_id="s3", window="2026-11-25")

    assert pending.current([A, B, voided, kept]) == [kept]
    assert matching([A, C], "shard_id = 's2' AND window = '2026-11-27'") == [C]
    assert matching([A, C], "sink_snapshot = 8") == []


def test_rows_name_their_files_per_shard_and_a_shard_that_cannot_is_left_to_the_source() -> None:
    refs: dict[str, set[int | None]] = {"s1": {file_ref("/w/b.parquet")}, "s2": {None}}

    kept, rest = by_their_files([A, B, C], refs)

    assert kept == [B], "only the file the row was read from"
    assert rest == [C], "a row with no reference: its shard is asked of the source files"
    assert by_their_files([A], {"s1": {file_ref("/w/elsewhere.parquet")}}) == ([], [A]), "a file the shard did not read"
    assert by_their_files([replace(A, source_file=None)], {"s1": {1}})[1], "an entry without its file"


def test_the_forward_filter_names_exact_shards_by_reference_and_the_others_whole() -> None:
    exact, whole = "00000000000000ff", "ffffffffffffffff"
    asked = {exact: (["/w/a.parquet"], True), whole: ([""], False)}

    where = forward_filter(asked, {"2026-11-26"}, by_file=True, numeric=True)

    by_reference = f"_ig_file IN ({file_ref('/w/a.parquet')}) OR _ig_file IS NULL"
    assert where == (
        "(_ig_window IN ('2026-11-26') OR _ig_window IS NULL) AND "
        f"(_ig_shard IN (-1) OR (_ig_shard IN (255) AND ({by_reference})))"
    )
    parse(where)
    older_sink = forward_filter(asked, set(), by_file=False, numeric=False)
    assert older_sink == f"_ig_shard IN ('{exact}', '{whole}')"


def test_a_shard_id_is_stored_as_one_signed_long_and_read_back_from_either_kind_of_sink() -> None:
    ids = ["0000000000000000", "7fffffffffffffff", "8000000000000000", "ffffffffffffffff", "0123456789abcdef"]
    numbers = [shard_number(i) for i in ids]
    assert numbers[:4] == [0, 2**63 - 1, -(2**63), -1]
    assert all(-(2**63) <= n < 2**63 for n in numbers)
    assert shard_texts([*numbers, None]) == [*ids, None]
    assert shard_texts(ids) == ids, "an older sink's text is the id already"
    for bad in ("s1", "0123456789ABCDEF", "0123456789abcdef0"):
        with pytest.raises(ValueError, match=r"_ig_shard: .* is not a shard id"):
            shard_number(bad)


def test_source_rows_are_named_by_their_row_ids_and_rows_without_one_are_counted() -> None:
    found = Answer(group="g", question="q", found=[], recorded_through=None, unrecorded=0, note="3 sink rows match")

    source_rows(found, [20, None, 3, 20])

    assert found.source_filter == "_row_id IN (3, 20)"
    assert parse(found.source_filter), "a filter pyiceberg and Spark read alike"
    assert found.note.startswith("3 sink rows match; 1 of them carry no source row id (from a transform that holds")
    assert found.note.endswith("so only their shards and files say")


def test_more_source_rows_than_can_be_listed_are_counted_not_named() -> None:
    found = Answer(group="g", question="q", found=[], recorded_through=None, unrecorded=0)

    source_rows(found, list(range(MAX_ROW_IDS + 1)))

    assert found.source_filter is None
    assert f"{MAX_ROW_IDS + 1} source rows by _row_id, more than {MAX_ROW_IDS}: narrow the filter" in found.note
