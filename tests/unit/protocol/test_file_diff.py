"""Catch-up without history: which files a group has not read, from what was live at its position and now."""

from __future__ import annotations

import json

from icegroup.iceberg.protocol.file_diff import GapFigures, diff_live, gap_stop
from icegroup.iceberg.protocol.sink_commit import parse_ranges, shard_range_json
from tests.factories import shard


def test_appends_in_the_gap_are_the_files_live_now_that_were_not_at_the_position() -> None:
    position = {"m1": ["a", "b"]}
    head = {"m1": ["a", "b"], "m2": ["c"], "m3": ["d", "e"]}
    diff = diff_live(position, head, {}, {})
    assert diff.added == {"c", "d", "e"}
    assert diff.removed == frozenset()
    assert diff.append_only


def test_a_merged_manifest_moves_files_without_adding_any() -> None:
    position = {"m1": ["a"], "m2": ["b"]}
    head = {"m9": ["a", "b", "c"]}
    diff = diff_live(position, head, {}, {})
    assert diff.added == {"c"}, "a and b were live at the position, in other manifests"
    assert diff.append_only


def test_a_compaction_or_a_delete_in_the_gap_is_no_append() -> None:
    compacted = diff_live({"m1": ["a", "b"]}, {"m4": ["ab", "c"]}, {}, {})
    assert compacted.removed == {"a", "b"}
    assert compacted.added == {"ab", "c"}
    assert not compacted.append_only
    deleted = diff_live({"m1": ["a"]}, {"m1": ["a"], "m2": ["c"]}, {}, {"d1": ["a-deletes"]})
    assert deleted.new_deletes == {"a-deletes"}
    assert not deleted.append_only
    kept = diff_live({"m1": ["a"]}, {"m1": ["a"]}, {"d1": ["old"]}, {"d1": ["old"]})
    assert kept.append_only, "a delete file live at the position too changes nothing in the gap"


def test_the_stop_names_the_figures_and_what_each_way_out_costs() -> None:
    figures = GapFigures(removed_files=3, removed_rows=120, added_files=2, added_rows=280, new_deletes=0)
    message = gap_stop("exp12", "shop.orders", 7156, 9001, figures)
    assert "3 data file(s) (120 rows) live at snapshot 7156 are gone" in message
    assert "The 2 data file(s) (280 rows) live at head 9001" in message
    assert "`icegroup reset exp12 --to-latest --execute`" in message
    assert "skips up to 280 unread rows" in message
    assert "delete file" not in message
    assert "2 delete file(s) appeared" in gap_stop("g", "t", None, 1, GapFigures(0, 0, 1, 5, 2))


def test_a_commit_records_how_a_file_diff_found_its_shard() -> None:
    by_diff = shard(1, read_snapshot=300)
    recorded = shard_range_json(by_diff)
    assert recorded["found"] == "files"
    assert "found" not in shard_range_json(shard(2)), "a range found by snapshots is recorded as before"
    (parsed,) = parse_ranges(json.dumps([recorded]))
    assert parsed.found_by == "files"
