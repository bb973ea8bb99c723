"""``describe`` reports what the sink already holds, even before the next Leader tick reconciles it."""

from __future__ import annotations

from datetime import UTC, datetime

import pyarrow as pa
from pyiceberg.catalog import Catalog

from icegroup.iceberg.describe import describe_group
from icegroup.iceberg.leader import tick
from icegroup.iceberg.protocol.liveness import RunState
from icegroup.iceberg.protocol.sink_commit import commit_properties
from icegroup.iceberg.store.registry import load_state
from tests.factories import MakeGroup, append_batches, create_source
from tests.sink_commits import ID_SCHEMA


def test_describe_counts_a_commit_the_registry_has_not_seen_yet(catalog: Catalog, make_group: MakeGroup) -> None:
    group = make_group(max_borrowers=3, leases_per_borrower=1, shard_caps={"max_files": 1}, lease_max_shards=1)
    append_batches(create_source(catalog, group.source), 1, 6)
    granted = tick(catalog, group, lambda _: RunState.MISSING)
    lease = granted.launch[0]
    shard = granted.state.shards[lease.shard_ids[0]]
    sink = catalog.create_table(group.sink, schema=ID_SCHEMA)
    rows = pa.Table.from_pylist([{"id": n} for n in range(shard.rows)], schema=ID_SCHEMA.as_arrow())
    props = commit_properties(group.name, group.source, lease.lease_id, lease.epoch, lease.attempt, [shard])
    sink.append(rows, snapshot_properties=props)
    before = describe_group(catalog, group)
    token = load_state(catalog, group.name).token

    view = describe_group(catalog, group)

    stream = next(s for s in view.streams if s.stream == shard.stream)
    assert stream.committed_rows == shard.rows
    assert stream.position == shard.to_snapshot
    assert stream.lag_rows == 0
    assert view.lag_rows == 6 - shard.rows, "lag is what is still left to consume"
    assert view.leases_in_flight == 2
    assert view.status == "consuming"
    assert before.lag_rows == view.lag_rows
    assert load_state(catalog, group.name).token == token, "describe committed nothing"


def test_describe_shows_lag_in_time_from_the_oldest_unconsumed_commit(catalog: Catalog, make_group: MakeGroup) -> None:
    group = make_group(max_borrowers=1, lease_max_shards=1)
    source = create_source(catalog, group.source)
    append_batches(source, 2, 6)
    tick(catalog, group, lambda _: RunState.MISSING)
    append_batches(catalog.load_table(group.source), 1, 6)
    first = catalog.load_table(group.source).snapshots()[0]

    view = describe_group(catalog, group)

    assert {s.oldest_unconsumed_ms for s in view.streams} == {first.timestamp_ms}, "cut or not yet planned alike"
    assert view.lag_age_s == (view.as_of_ms - first.timestamp_ms) / 1000
    assert view.as_dict()["lag_age_s"] == view.lag_age_s
    nothing = describe_group(catalog, make_group(name="g_other", source=group.source, sink="ns.other_out"))
    assert nothing.lag_age_s is not None, "a group that has not started lags from the source's first commit"


def test_describe_names_what_keeps_the_groups_history_and_forecasts_an_expiry_by_age(
    catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group(max_borrowers=1, lease_max_shards=1)
    source = create_source(catalog, group.source)
    append_batches(source, 2, 6)
    assert describe_group(catalog, group).retention[0].startswith("retention: not registered on the source yet")
    tick(catalog, group, lambda _: RunState.MISSING)
    first = catalog.load_table(group.source).snapshots()[0]
    catalog.load_table(group.source).transaction().set_properties(
        {"history.expire.max-snapshot-age-ms": str(3_600_000)}
    ).commit_transaction()

    registered, branch, forecast = describe_group(catalog, group).retention

    assert registered.startswith("retention: icegroup expire keeps from source sequence 0 and 7d back")
    head = catalog.load_table(group.source).snapshots()[-1].snapshot_id
    assert branch == (
        f"source branch icegroup-{group.name}: at snapshot {head}; "
        "any engine's expire_snapshots keeps it and the 1 before it. Newer snapshots it does not keep: if they "
        "expire, the group reads their rows from the files live now (a compaction among them stops it)"
    )
    expires = datetime.fromtimestamp((first.timestamp_ms + 3_600_000) / 1000, tz=UTC).isoformat(timespec="seconds")
    assert "expiry by age (0.0416667 days) outside icegroup would take the oldest snapshot" in forecast
    assert expires in forecast
    assert "AT RISK" in forecast, "no rate yet: nothing says it catches up in time"
