"""The dead-letter table on a real SQLite catalog: record, latest, open_letters and redrive."""

from __future__ import annotations

import dataclasses

import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.table import Table

from icegroup.iceberg.protocol.dead_letters import PARKED, REDRIVEN, STOPPED, DeadLetter
from icegroup.iceberg.store import dead_letters
from icegroup.iceberg.store.dead_letters import dead_letter_identifier, latest, open_letters, record, redrive
from icegroup.iceberg.store.registry import NAMESPACE
from tests.factories import MakeDeadLetter


@pytest.fixture
def group(ns: str) -> str:
    return f"g_{ns}"


def test_a_group_without_dead_letters_has_none(catalog: Catalog, group: str) -> None:
    assert latest(catalog, group) == {}
    assert open_letters(catalog, group) == {}
    assert redrive(catalog, group) == []


def test_dead_letters_live_in_the_icegroup_namespace(
    catalog: Catalog, group: str, make_dead_letter: MakeDeadLetter
) -> None:
    record(catalog, group, [make_dead_letter("s1", PARKED)])

    assert dead_letter_identifier(group) == f"{NAMESPACE}.dead_letter_{group}"
    assert catalog.table_exists(dead_letter_identifier(group))


def test_recorded_letters_round_trip(catalog: Catalog, group: str, make_dead_letter: MakeDeadLetter) -> None:
    parked = make_dead_letter("s1", PARKED, from_snapshot=None)  # from the table's first snapshot: a null
    stopped = make_dead_letter("s2", STOPPED, stream="1/region=us", from_snapshot=101)

    record(catalog, group, [parked, stopped])

    assert latest(catalog, group) == {"s1": parked, "s2": stopped}
    assert open_letters(catalog, group) == {"s1": parked, "s2": stopped}


def test_latest_is_the_newest_row_of_each_shard_whatever_the_append_order(
    catalog: Catalog, group: str, make_dead_letter: MakeDeadLetter
) -> None:
    newest_first = make_dead_letter("s1", STOPPED, at_ms=2_000)
    newest_last = make_dead_letter("s2", STOPPED, at_ms=2_000)
    record(catalog, group, [newest_first, make_dead_letter("s2", PARKED, at_ms=1_000)])
    record(catalog, group, [make_dead_letter("s1", PARKED, at_ms=1_000), newest_last])

    assert latest(catalog, group) == {"s1": newest_first, "s2": newest_last}


def test_redrive_of_one_shard_leaves_the_other_open(
    catalog: Catalog, group: str, make_dead_letter: MakeDeadLetter
) -> None:
    record(catalog, group, [make_dead_letter("s1", PARKED, at_ms=1_000), make_dead_letter("s2", STOPPED)])

    released = redrive(catalog, group, ["s1"])

    assert [(d.shard_id, d.action, d.error) for d in released] == [("s1", REDRIVEN, "")]
    assert released[0].at_ms > 1_000
    assert list(open_letters(catalog, group)) == ["s2"]
    assert latest(catalog, group)["s1"].action == REDRIVEN


def test_redrive_of_all_clears_every_open_letter(
    catalog: Catalog, group: str, make_dead_letter: MakeDeadLetter
) -> None:
    record(catalog, group, [make_dead_letter("s2", STOPPED), make_dead_letter("s1", PARKED)])

    released = redrive(catalog, group)

    assert sorted(d.shard_id for d in released) == ["s1", "s2"]
    assert open_letters(catalog, group) == {}
    assert {d.action for d in latest(catalog, group).values()} == {REDRIVEN}


def test_redrive_keeps_the_shards_lineage(catalog: Catalog, group: str, make_dead_letter: MakeDeadLetter) -> None:
    original = make_dead_letter("s1", PARKED, from_snapshot=101)
    record(catalog, group, [original])

    (released,) = redrive(catalog, group)

    assert dataclasses.replace(released, action=PARKED, error=original.error, at_ms=original.at_ms) == original


def test_redrive_is_newer_than_a_letter_from_the_future(
    catalog: Catalog, group: str, make_dead_letter: MakeDeadLetter
) -> None:
    """Redriven rows must sort after the row they release even if the Borrower's clock ran ahead."""
    far = 32_503_680_000_000  # year 3000
    record(catalog, group, [make_dead_letter("s1", PARKED, at_ms=far)])

    (released,) = redrive(catalog, group)

    assert released.at_ms == far + 1
    assert open_letters(catalog, group) == {}


@pytest.mark.parametrize("shard_ids", [["nope"], []], ids=["unknown", "none"])
def test_redrive_of_unknown_shards_releases_nothing(
    catalog: Catalog, group: str, shard_ids: list[str], make_dead_letter: MakeDeadLetter
) -> None:
    record(catalog, group, [make_dead_letter("s1", PARKED)])
    table = catalog.load_table(dead_letter_identifier(group))
    snapshots = len(table.snapshots())

    assert redrive(catalog, group, shard_ids) == []

    assert list(open_letters(catalog, group)) == ["s1"]
    assert len(catalog.load_table(dead_letter_identifier(group)).snapshots()) == snapshots  # nothing appended


def test_redrive_of_an_already_redriven_shard_releases_nothing(
    catalog: Catalog, group: str, make_dead_letter: MakeDeadLetter
) -> None:
    record(catalog, group, [make_dead_letter("s1", PARKED)])
    redrive(catalog, group, ["s1"])

    assert redrive(catalog, group, ["s1"]) == []
    assert redrive(catalog, group) == []


def test_a_shard_parked_again_after_a_redrive_is_open_again(
    catalog: Catalog, group: str, make_dead_letter: MakeDeadLetter
) -> None:
    record(catalog, group, [make_dead_letter("s1", PARKED)])
    (released,) = redrive(catalog, group)

    again = make_dead_letter("s1", STOPPED, at_ms=released.at_ms + 1)
    record(catalog, group, [again])

    assert open_letters(catalog, group) == {"s1": again}


def test_groups_do_not_see_each_others_letters(catalog: Catalog, group: str, make_dead_letter: MakeDeadLetter) -> None:
    record(catalog, group, [make_dead_letter("s1", PARKED)])

    assert open_letters(catalog, f"{group}_other") == {}
    assert redrive(catalog, f"{group}_other") == []
    assert list(open_letters(catalog, group)) == ["s1"]


def test_the_leader_reads_the_rows_only_when_the_table_changed(
    catalog: Catalog, group: str, make_dead_letter: MakeDeadLetter, monkeypatch: pytest.MonkeyPatch
) -> None:
    record(catalog, group, [make_dead_letter("s1", PARKED)])
    scans: list[Table] = []
    real = dead_letters.scan_letters

    def counted(table: Table) -> dict[str, DeadLetter]:
        scans.append(table)
        return real(table)

    monkeypatch.setattr(dead_letters, "scan_letters", counted)

    for _ in range(5):
        assert set(open_letters(catalog, group)) == {"s1"}
    assert len(scans) == 1, "ticks without a new letter read the metadata, not the rows"
    redrive(catalog, group)
    assert open_letters(catalog, group) == {}, "a new row is read at once"
    assert len(scans) == 2
