"""cut_shards: deterministic shards, closed on caps, schema changes and replay-window boundaries."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from datetime import UTC, date, datetime

import pytest

from icegroup.iceberg.protocol.group import GroupConfig, ShardCaps
from icegroup.iceberg.protocol.shards import (
    FileEntry,
    Shard,
    SnapshotInfo,
    Window,
    commit_batches,
    cut_shards,
    make_shard_id,
    one_window,
    window_label,
    window_start_ms,
    window_texts,
    window_value,
)
from tests.factories import WINDOW_START_MS, shard


def ms(text: str) -> int:
    return int(datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp() * 1000)


T0 = ms("2026-01-01T10:00:00")


def snap(snapshot_id: int, *, ts: int | None = None, schema_id: int | None = 0) -> SnapshotInfo:
    """Snapshot n has sequence number n and is committed n seconds after T0 unless told otherwise."""
    return SnapshotInfo(
        snapshot_id=snapshot_id,
        parent_id=snapshot_id - 1 or None,
        sequence_number=snapshot_id,
        timestamp_ms=T0 + snapshot_id * 1000 if ts is None else ts,
        schema_id=schema_id,
        operation="append",
    )


def entry(stream: str, snapshot_id: int, n: int = 0, *, rows: int = 10, size: int = 100) -> FileEntry:
    return FileEntry(stream, snapshot_id, f"wh/{stream}/{snapshot_id}-{n}.parquet", rows, size)


def cut(
    snapshots: Iterable[SnapshotInfo],
    files: Iterable[FileEntry],
    *,
    cursors: Mapping[str, int | None] | None = None,
    plan_from: int | None = None,
    caps: ShardCaps | None = None,
    window: Window = "day",
    group: str = "orders",
    epoch: int = 0,
) -> list[Shard]:
    return cut_shards(
        group=group,
        epoch=epoch,
        snapshots=list(snapshots),
        files=list(files),
        stream_cursors=cursors or {},
        plan_from=plan_from,
        caps=caps or ShardCaps(),
        window=window,
    )


def ranges(shards: list[Shard]) -> list[list[int]]:
    return [shard.snapshots for shard in shards]


def test_one_shard_per_stream_when_under_caps() -> None:
    files = [entry("a", 1), entry("b", 1), entry("a", 2, rows=5, size=50), entry("a", 3), entry("b", 3, n=1)]

    shards = cut([snap(1), snap(2), snap(3)], files, plan_from=None)

    assert [(s.stream, s.snapshots) for s in shards] == [("a", [1, 2, 3]), ("b", [1, 3])]
    a, b = shards
    assert a.from_snapshot is None
    assert a.to_snapshot == 3
    assert a.to_sequence == 3
    assert a.schema_id == 0
    assert a.window_start_ms == ms("2026-01-01T00:00:00")
    assert a.files == ["wh/a/1-0.parquet", "wh/a/2-0.parquet", "wh/a/3-0.parquet"]
    assert a.rows == 25
    assert a.bytes == 250
    assert b.files == ["wh/b/1-0.parquet", "wh/b/3-1.parquet"]
    assert b.rows == 20


def test_all_files_of_a_snapshot_go_into_one_shard() -> None:
    files = [entry("a", 1, n) for n in range(3)]

    (shard,) = cut([snap(1)], files)

    assert len(shard.files) == 3
    assert shard.rows == 30


@pytest.mark.parametrize(
    "caps",
    [
        pytest.param(ShardCaps(max_files=2), id="files"),
        pytest.param(ShardCaps(max_rows=20), id="rows"),
        pytest.param(ShardCaps(max_bytes=200), id="bytes"),
    ],
)
def test_cap_closes_shard_before_the_snapshot_that_would_exceed_it(caps: ShardCaps) -> None:
    files = [entry("a", sid, rows=10, size=100) for sid in (1, 2, 3, 4, 5)]

    shards = cut([snap(sid) for sid in (1, 2, 3, 4, 5)], files, caps=caps)

    assert ranges(shards) == [[1, 2], [3, 4], [5]]


def test_caps_count_files_not_snapshots() -> None:
    files = [entry("a", 1, 0), entry("a", 1, 1), entry("a", 2), entry("a", 3)]

    shards = cut([snap(1), snap(2), snap(3)], files, caps=ShardCaps(max_files=3))

    assert ranges(shards) == [[1, 2], [3]]


def test_single_oversize_snapshot_becomes_its_own_shard() -> None:
    files = [entry("a", 1), *(entry("a", 2, n, rows=100) for n in range(5)), entry("a", 3)]

    shards = cut([snap(1), snap(2), snap(3)], files, caps=ShardCaps(max_files=2, max_rows=50))

    assert ranges(shards) == [[1], [2], [3]]
    assert len(shards[1].files) == 5
    assert shards[1].rows == 500


def test_schema_change_closes_a_shard() -> None:
    snaps = [snap(1, schema_id=0), snap(2, schema_id=0), snap(3, schema_id=1), snap(4, schema_id=1)]

    shards = cut(snaps, [entry("a", sid) for sid in (1, 2, 3, 4)])

    assert ranges(shards) == [[1, 2], [3, 4]]
    assert [s.schema_id for s in shards] == [0, 1]


@pytest.mark.parametrize(
    ("window", "before", "after"),
    [
        pytest.param("day", "2026-01-01T23:59:59", "2026-01-02T00:00:00", id="day"),
        pytest.param("hour", "2026-01-01T10:59:59", "2026-01-01T11:00:00", id="hour"),
    ],
)
def test_replay_window_boundary_closes_a_shard(window: Window, before: str, after: str) -> None:
    snaps = [snap(1, ts=ms(before) - 1000), snap(2, ts=ms(before)), snap(3, ts=ms(after))]

    shards = cut(snaps, [entry("a", sid) for sid in (1, 2, 3)], window=window)

    assert ranges(shards) == [[1, 2], [3]]
    assert shards[0].window_start_ms == window_start_ms(ms(before), window)
    assert shards[1].window_start_ms == ms(after)


def test_hour_boundary_does_not_close_a_day_window_shard() -> None:
    snaps = [snap(1, ts=ms("2026-01-01T10:59:59")), snap(2, ts=ms("2026-01-01T11:00:00"))]

    shards = cut(snaps, [entry("a", 1), entry("a", 2)], window="day")

    assert ranges(shards) == [[1, 2]]


def test_shards_of_a_stream_are_contiguous() -> None:
    files = [entry("a", sid) for sid in (2, 3, 5, 6)] + [entry("b", 4)]

    shards = cut([snap(sid) for sid in range(2, 7)], files, plan_from=1, caps=ShardCaps(max_files=1))

    a_shards = [s for s in shards if s.stream == "a"]
    assert [(s.from_snapshot, s.to_snapshot) for s in a_shards] == [(1, 2), (2, 3), (3, 5), (5, 6)]


def test_known_stream_starts_at_its_cursor_and_new_stream_at_plan_from() -> None:
    files = [entry("known", 11), entry("new", 12)]

    shards = cut([snap(11), snap(12)], files, cursors={"known": 7}, plan_from=10)

    assert {s.stream: s.from_snapshot for s in shards} == {"known": 7, "new": 10}


def test_known_stream_with_no_position_starts_at_the_first_snapshot() -> None:
    (shard,) = cut([snap(11)], [entry("known", 11)], cursors={"known": None}, plan_from=10)

    assert shard.from_snapshot is None


def test_shard_ids_are_deterministic_16_hex() -> None:
    snaps = [snap(1), snap(2)]
    files = [entry("a", 1), entry("b", 2)]

    first = cut(snaps, files)
    second = cut(snaps, files)

    assert [s.shard_id for s in first] == [s.shard_id for s in second]
    assert all(re.fullmatch(r"[0-9a-f]{16}", s.shard_id) for s in first)
    assert len({s.shard_id for s in first}) == 2
    assert first[0].shard_id == make_shard_id("orders", 0, "a", None, 1)


@pytest.mark.parametrize(("group", "epoch"), [("orders", 1), ("refunds", 0)], ids=["epoch", "group"])
def test_shard_ids_differ_by_epoch_and_group(group: str, epoch: int) -> None:
    base = cut([snap(1)], [entry("a", 1)], group="orders", epoch=0)
    other = cut([snap(1)], [entry("a", 1)], group=group, epoch=epoch)

    assert base[0].shard_id != other[0].shard_id


def test_make_shard_id_depends_on_every_part() -> None:
    ids = {
        make_shard_id("g", 0, "s", None, 2),
        make_shard_id("g", 1, "s", None, 2),
        make_shard_id("h", 0, "s", None, 2),
        make_shard_id("g", 0, "t", None, 2),
        make_shard_id("g", 0, "s", 1, 2),
        make_shard_id("g", 0, "s", None, 3),
    }

    assert len(ids) == 6


def test_output_is_sorted_by_to_sequence_then_stream() -> None:
    files = [entry("a", 3), entry("b", 1), entry("c", 2), entry("d", 2)]

    shards = cut([snap(1), snap(2), snap(3)], files)

    assert [(s.to_sequence, s.stream) for s in shards] == [(1, "b"), (2, "c"), (2, "d"), (3, "a")]


def test_snapshots_not_touching_a_stream_do_not_create_shards_for_it() -> None:
    files = [entry("a", 1), entry("b", 2), entry("a", 3)]

    shards = cut([snap(1), snap(2), snap(3), snap(4)], files)

    assert [(s.stream, s.snapshots) for s in shards] == [("b", [2]), ("a", [1, 3])]


def test_no_files_no_shards() -> None:
    assert cut([snap(1), snap(2)], []) == []


@pytest.mark.parametrize(
    ("window", "start", "label"),
    [
        pytest.param("hour", "2026-03-04T05:00:00", "2026-03-04-05:00", id="hour"),
        pytest.param("day", "2026-03-04T00:00:00", "2026-03-04", id="day"),
    ],
)
def test_window_start_and_label(window: Window, start: str, label: str) -> None:
    moment = ms("2026-03-04T05:06:07.890")

    assert window_start_ms(moment, window) == ms(start)
    assert window_label(window_start_ms(moment, window), window) == label
    value = window_value(label, window)
    assert value == (date(2026, 3, 4) if window == "day" else label), "a day is a date in the sink, an hour its label"
    assert window_texts([value, label, None]) == [label, label, None], "either kind reads back as the label"


@pytest.mark.parametrize("window", ["hour", "day"])
def test_window_start_of_a_window_start_is_itself(window: Window) -> None:
    start = ms("2026-03-04T00:00:00")

    assert window_start_ms(start, window) == start


def batch_shard(n: int, rows: int, schema_id: int = 0) -> Shard:
    return Shard(
        shard_id=f"{n:016x}",
        stream="s",
        from_snapshot=n,
        to_snapshot=n + 1,
        to_sequence=n + 1,
        schema_id=schema_id,
        window_start_ms=0,
        snapshots=[n + 1],
        files=[f"f{n}"],
        rows=rows,
        bytes=rows * 10,
        identity={},
    )


def test_small_shards_commit_together_up_to_the_row_bound() -> None:
    shards = [batch_shard(n, 300) for n in range(10)]

    batches = commit_batches(shards, max_rows=1000)

    assert [len(b) for b in batches] == [3, 3, 3, 1]
    assert [s for b in batches for s in b] == shards  # order kept


def test_a_shard_at_the_bound_commits_alone_and_zero_turns_batching_off() -> None:
    shards = [batch_shard(0, 100), batch_shard(1, 5000), batch_shard(2, 100)]

    assert [len(b) for b in commit_batches(shards, max_rows=1000)] == [1, 1, 1]
    assert [len(b) for b in commit_batches([batch_shard(n, 1) for n in range(3)], max_rows=0)] == [1, 1, 1]


def test_by_default_a_full_lease_of_small_shards_is_one_batch() -> None:
    group = GroupConfig(name="g", source="ns.src", sink="ns.sink")
    shards = [batch_shard(n, 1_500_000) for n in range(group.lease_max_shards)]

    assert commit_batches(shards, group.commit_batch_rows) == [shards], "one Spark job and one commit per lease"


def test_by_default_a_full_lease_of_full_shards_is_cut_at_the_row_bound() -> None:
    group = GroupConfig(name="g", source="ns.src", sink="ns.sink")
    shards = [batch_shard(n, group.shard_caps.max_rows) for n in range(group.lease_max_shards)]

    batches = commit_batches(shards, group.commit_batch_rows)

    assert [len(b) for b in batches] == [20, 20, 20, 4], "a killed Borrower redoes 100M rows at most"


def test_a_schema_change_starts_a_new_batch() -> None:
    shards = [batch_shard(0, 10), batch_shard(1, 10, schema_id=1), batch_shard(2, 10, schema_id=1)]

    assert [[s.schema_id for s in b] for b in commit_batches(shards, max_rows=1000)] == [[0], [1, 1]]


@pytest.mark.parametrize(
    ("window", "hours", "one"),
    [("day", [10, 23], True), ("day", [10, 24], False), ("hour", [10, 10], True), ("hour", [10, 11], False)],
)
def test_one_window_holds_when_every_shard_falls_in_the_same_sink_window(
    window: Window, hours: list[int], one: bool
) -> None:
    shards = [shard(n + 1, window_start_ms=WINDOW_START_MS + h * 3_600_000) for n, h in enumerate(hours)]
    assert one_window(shards, window) is one
    assert one_window(shards[:1], window)
