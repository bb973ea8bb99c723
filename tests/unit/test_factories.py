"""The test factories themselves: their defaults hang together and overrides win."""

from __future__ import annotations

from pyiceberg.catalog import Catalog

from icegroup.iceberg.protocol.dead_letters import PARKED, is_open
from icegroup.iceberg.protocol.state import LeasePhase
from tests.factories import REGIONS, MakeDeadLetter, MakeLease, MakeShard, append_batches, create_source, events


def test_the_nth_shard_follows_the_one_before_it(make_shard: MakeShard) -> None:
    first, second = make_shard(1), make_shard(2)

    assert second.from_snapshot == first.to_snapshot
    assert second.to_sequence > first.to_sequence
    assert first.shard_id != second.shard_id
    assert second.snapshots == [second.to_snapshot]


def test_a_shard_override_wins_and_bytes_follow_rows(make_shard: MakeShard) -> None:
    shard = make_shard(3, stream="a", rows=7)

    assert (shard.stream, shard.rows, shard.bytes) == ("a", 7, 70)
    assert shard.files == ["wh/a/3.parquet"]
    assert make_shard(rows=7, bytes=1).bytes == 1


def test_leases_of_different_shards_have_different_ids(make_lease: MakeLease) -> None:
    one, other = make_lease(["s1"]), make_lease(["s2"])

    assert one.lease_id != other.lease_id
    assert (one.attempt, one.phase) == (0, LeasePhase.GRANTING)
    assert make_lease(["s1"], streams=["a"], lease_id="la").model_dump(include={"lease_id", "streams"}) == {
        "lease_id": "la",
        "streams": ["a"],
    }


def test_a_dead_letter_is_open_until_overridden(make_dead_letter: MakeDeadLetter) -> None:
    letter = make_dead_letter("s1", PARKED)

    assert is_open(letter)
    assert make_dead_letter("s1", PARKED, at_ms=5).at_ms == 5


def test_events_are_deterministic_and_spread_over_the_regions() -> None:
    batch = events(1, 6, seed=3)

    assert batch.equals(events(1, 6, seed=3))
    assert batch.column("event_id").to_pylist() == [1, 2, 3, 4, 5, 6]
    assert batch.column("region").to_pylist() == [*REGIONS, *REGIONS]


def test_appended_batches_continue_after_the_highest_id(catalog: Catalog, ns: str) -> None:
    source = create_source(catalog, f"{ns}.events")

    assert append_batches(source, 2, 3) == 6
    assert append_batches(catalog.load_table(f"{ns}.events"), 1, 3) == 3

    ids = catalog.load_table(f"{ns}.events").scan().to_arrow().column("event_id").to_pylist()
    assert sorted(ids) == list(range(1, 10))
    assert create_source(catalog, f"{ns}.events").current_snapshot() is not None  # an existing table is kept
