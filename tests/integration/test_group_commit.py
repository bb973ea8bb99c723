"""Leases publish in one swap of the sink's metadata, each fenced by its own attempt; a lease publishes as it stages."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import pytest
from pyiceberg.catalog import Catalog
from pyspark.sql import DataFrame, SparkSession

from icegroup.iceberg.config.lakehouse import LakehouseConfig
from icegroup.iceberg.errors import AlreadyCommitted, Fenced, StaleLease
from icegroup.iceberg.failpoints import ENV
from icegroup.iceberg.leader import tick
from icegroup.iceberg.protocol.fences import fence_key
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.liveness import RunState
from icegroup.iceberg.protocol.shards import Shard
from icegroup.iceberg.protocol.sink_commit import KEY_STAGE, commit_properties
from icegroup.iceberg.protocol.state import Lease
from icegroup.iceberg.store.fences import raise_fences
from icegroup.iceberg.store.sink_history import read_sink_history
from icegroup.iceberg.verify import verify_group
from icegroup.spark_jobs.borrower.attempt import LeaseReport
from icegroup.spark_jobs.borrower.lease import run_lease
from icegroup.spark_jobs.session import activate
from icegroup.spark_jobs.shards import read_shard
from icegroup.spark_jobs.sink.fenced_commit import Published, PublishRequest, publish_all, stage_shard
from icegroup.spark_jobs.sink.group_commit import SinkCommitter
from icegroup.spark_jobs.sink.shape import ensure_sink, with_lineage
from tests.factories import MakeGroup, append_batches, create_source
from tests.integration.helpers import quiet
from tests.integration.test_fencing_and_resume import first_lease

pytestmark = pytest.mark.spark


@dataclass(frozen=True)
class Staged:
    """One lease's shard, its output staged on the sink, and the request that publishes it."""

    request: PublishRequest
    rows: int
    output: DataFrame


def staged_leases(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, group: GroupConfig
) -> list[Staged]:
    """Three leases of one shard each, granted by one tick, each shard's output staged on the sink."""
    append_batches(create_source(catalog, group.source), 1, 30)
    result = tick(catalog, group, lambda _: RunState.MISSING)
    assert len(result.launch) == 3
    root = catalog.load_table(group.source).snapshots()[0].snapshot_id
    requests = []
    for lease in result.launch:
        shard = result.state.shards[lease.shard_ids[0]]
        out = with_lineage(
            read_shard(spark, f"{lakehouse.catalog_name}.{group.source}", shard, root, None),
            shard.shard_id,
            date(2026, 1, 1),
        )
        ensure_sink(spark, lakehouse.catalog_name, group.sink, out)
        token = stage_shard(out, group_sink(lakehouse, group))
        props = commit_properties(group.name, group.source, lease.lease_id, lease.epoch, lease.attempt, [shard])
        requests.append(Staged(PublishRequest(token, lease, [shard.shard_id], props), shard.rows, out))
    return requests


def metadata_versions(catalog: Catalog, group: GroupConfig) -> int:
    """How many metadata files the sink has had: one more per swap."""
    return len(catalog.load_table(group.sink).metadata.metadata_log)


def carriers(catalog: Catalog, group: GroupConfig) -> dict[str, str]:
    """Each committed shard, and the lease whose commit carries it."""
    history = read_sink_history(catalog, group.sink, group.name, None)
    return {shard.shard_id: commit.lease_id for commit in history.commits for shard in commit.shards}


def test_three_leases_publish_in_one_swap_each_in_a_snapshot_of_its_own(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group(max_borrowers=3, leases_per_borrower=1)
    requests = [staged.request for staged in staged_leases(spark, lakehouse, catalog, group)]
    before = metadata_versions(catalog, group)

    outcomes = publish_all(spark, f"{lakehouse.catalog_name}.{group.sink}", group.name, requests)

    assert all(isinstance(o, Published) for o in outcomes), outcomes
    assert metadata_versions(catalog, group) == before + 1, "one swap"
    assert len({o.snapshot_id for o in outcomes if isinstance(o, Published)}) == 3
    assert carriers(catalog, group) == {r.shard_ids[0]: r.lease.lease_id for r in requests}
    sink = catalog.load_table(group.sink)
    assert not [s for s in sink.snapshots() if (s.summary or {}).get(KEY_STAGE)], "every staged snapshot dropped"
    check = verify_group(catalog, group, key="event_id")
    assert (check.missing, check.duplicates) == (0, 0)


def test_a_fenced_lease_is_refused_and_the_others_commit_without_it(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group(max_borrowers=3, leases_per_borrower=1)
    leases = staged_leases(spark, lakehouse, catalog, group)
    requests = [staged.request for staged in leases]
    zombie = requests[1].lease
    raise_fences(catalog.load_table(group.sink), {fence_key(group.name, zombie.lease_id): zombie.attempt + 1})

    outcomes = publish_all(spark, f"{lakehouse.catalog_name}.{group.sink}", group.name, requests)

    assert isinstance(outcomes[1], Fenced)
    assert "lease fenced" in str(outcomes[1])
    assert isinstance(outcomes[0], Published)
    assert isinstance(outcomes[2], Published)
    assert carriers(catalog, group) == {r.shard_ids[0]: r.lease.lease_id for r in (requests[0], requests[2])}
    staged = [s for s in catalog.load_table(group.sink).snapshots() if (s.summary or {}).get(KEY_STAGE)]
    assert not staged, "the fenced lease's staged output is expired, the others' published"
    check = verify_group(catalog, group, key="event_id")
    assert (check.missing, check.duplicates) == (leases[1].rows, 0)


def test_two_requests_carrying_one_shard_commit_it_once(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group(max_borrowers=3, leases_per_borrower=1)
    staged, *_ = staged_leases(spark, lakehouse, catalog, group)
    first = staged.request
    again = PublishRequest(
        stage_shard(staged.output, group_sink(lakehouse, group)), first.lease, first.shard_ids, first.properties
    )

    outcomes = publish_all(spark, group_sink(lakehouse, group), group.name, [first, again])

    assert isinstance(outcomes[0], Published)
    assert isinstance(outcomes[1], AlreadyCommitted)
    assert "two requests of one commit" in str(outcomes[1])
    assert carriers(catalog, group) == {first.shard_ids[0]: first.lease.lease_id}
    check = verify_group(catalog, group, key="event_id")
    assert check.duplicates == 0


def test_publishes_that_meet_share_a_swap_and_never_race(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    """The same three publishes that race each other through ``publish_shard`` (``test_commit_races``)."""
    group = make_group(max_borrowers=3, leases_per_borrower=1)
    requests = [staged.request for staged in staged_leases(spark, lakehouse, catalog, group)]
    committer = SinkCommitter(spark, group_sink(lakehouse, group), group.name)
    before = metadata_versions(catalog, group)
    barrier = threading.Barrier(len(requests), timeout=60)

    def publish(request: PublishRequest) -> Published:
        activate(spark)
        barrier.wait()
        return committer.publish(request)

    with ThreadPoolExecutor(len(requests)) as pool:
        published = list(pool.map(publish, requests))

    assert sum(p.conflicts for p in published) == 0
    assert committer.published == 3
    assert committer.swaps <= 2, "the publishes that arrived while one was in flight went in one swap"
    assert metadata_versions(catalog, group) == before + committer.swaps
    assert carriers(catalog, group) == {r.shard_ids[0]: r.lease.lease_id for r in requests}


def group_sink(lakehouse: LakehouseConfig, group: GroupConfig) -> str:
    """The sink as Spark names it."""
    return f"{lakehouse.catalog_name}.{group.sink}"


def test_a_lease_fenced_while_its_publish_is_in_flight_ends_and_leaves_its_next_stage_behind_nowhere(
    spark: SparkSession,
    lakehouse: LakehouseConfig,
    catalog: Catalog,
    make_group: MakeGroup,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A lease's publish runs while it stages its next shard; a fence raised meanwhile stops it at its next publish."""
    group, lease, shards = lease_of_shards(catalog, make_group, commit_batch_rows=1)
    points = armed(tmp_path, monkeypatch, "borrower.after_commit")  # the first publish holds once it has landed
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(run_lease, spark, lakehouse, group, lease, shards, quiet)
        deadline = time.monotonic() + 120
        try:
            held_at(points, running, deadline)
            while len(staged_snapshots(catalog, group)) < 1 and time.monotonic() < deadline:
                time.sleep(0.05)  # the lease staged its second shard while the first publish is held
            assert staged_snapshots(catalog, group), "the second shard is staged while the first publish is held"
            raise_fences(catalog.load_table(group.sink), {fence_key(group.name, lease.lease_id): lease.attempt + 1})
        finally:
            release(points)
        with pytest.raises(StaleLease, match="lease fenced"):
            running.result(timeout=120)

    assert carriers(catalog, group) == {shards[0].shard_id: lease.lease_id}
    assert staged_snapshots(catalog, group) == [], "the second shard's staged output is expired, not left behind"


def staged_snapshots(catalog: Catalog, group: GroupConfig) -> list[int]:
    """The sink's staged snapshots: output no publish has taken yet."""
    sink = catalog.load_table(group.sink)
    return [s.snapshot_id for s in sink.snapshots() if (s.summary or {}).get(KEY_STAGE)]


def held_at(points: Path, running: Future[LeaseReport], deadline: float) -> Path:
    """The hit file of the one fail point the lease in ``running`` is held at, once it is reached."""
    while not list(points.glob("hit.*")) and not running.done() and time.monotonic() < deadline:
        time.sleep(0.05)
    if running.done():
        running.result()  # raises what ended the lease
        raise AssertionError("the lease ended without reaching its fail point")
    hits = list(points.glob("hit.*"))
    assert len(hits) == 1, f"the lease did not reach its fail point in time: {hits}"
    return hits[0]


def release(points: Path) -> None:
    """Disarm every fail point and let a held lease go on: a failing test must not leave it waiting forever."""
    for path in points.iterdir():
        path.unlink(missing_ok=True)


def armed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, point: str) -> Path:
    """A fail point folder with ``point`` armed, for this test's process."""
    points = tmp_path / "failpoints"
    points.mkdir()
    (points / point).touch()
    monkeypatch.setenv(ENV, str(points))
    return points


def lease_of_shards(
    catalog: Catalog, make_group: MakeGroup, commit_batch_rows: int
) -> tuple[GroupConfig, Lease, list[Shard]]:
    """A group's first lease, of three shards or more, one source file each, committed in batches of these rows."""
    group = make_group(
        max_borrowers=1, shard_caps={"max_files": 1}, lease_max_shards=4, commit_batch_rows=commit_batch_rows
    )
    append_batches(create_source(catalog, group.source), 3, 9)
    lease, shards = first_lease(catalog, group)
    assert len(shards) >= 3
    return group, lease, shards


def test_a_batch_in_flight_refused_as_a_duplicate_counts_its_own_shard_and_commits_the_rest(
    spark: SparkSession,
    lakehouse: LakehouseConfig,
    catalog: Catalog,
    make_group: MakeGroup,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A batch refused because one of its shards is in the sink by this very run: that one counts, the rest commit once.

    The run of the same lease attempt in the test's thread stands in for a swap Iceberg retried that
    had landed after all: the batch's publish then finds one of its shards committed by its own run.
    """
    group, lease, shards = lease_of_shards(catalog, make_group, commit_batch_rows=10_000)
    points = armed(tmp_path, monkeypatch, "borrower.after_stage")
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(run_lease, spark, lakehouse, group, lease, shards, quiet)
        try:
            held_at(points, running, time.monotonic() + 120)  # the shards are staged together, not published
            earlier = run_lease(spark, lakehouse, group, lease, [shards[1]], quiet)
        finally:
            release(points)
        done = running.result(timeout=120)

    assert earlier.committed == [shards[1].shard_id]
    assert sorted(done.committed) == sorted(shard.shard_id for shard in shards), "its own run's shard counts"
    assert done.rows_out == done.rows_in == sum(shard.rows for shard in shards)
    assert done.resumed == []
    assert done.fenced == []
    assert set(carriers(catalog, group)) == {shard.shard_id for shard in shards}
    assert staged_snapshots(catalog, group) == [], "the refused batch's staged output is expired"
    check = verify_group(catalog, group, key="event_id")
    other_leases = catalog.load_table(group.source).scan().to_arrow().num_rows - sum(s.rows for s in shards)
    assert (check.missing, check.duplicates) == (other_leases, 0), "this lease's rows are in the sink, once"


def test_a_lease_stopped_with_a_publish_in_flight_lands_it_and_hands_back_the_rest(
    spark: SparkSession,
    lakehouse: LakehouseConfig,
    catalog: Catalog,
    make_group: MakeGroup,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Stopped with its first publish held and its second shard staged, a lease commits both, hands back the rest."""
    group, lease, shards = lease_of_shards(catalog, make_group, commit_batch_rows=1)
    points = armed(tmp_path, monkeypatch, "borrower.after_commit")
    stop = threading.Event()
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(run_lease, spark, lakehouse, group, lease, shards, quiet, None, stop)
        deadline = time.monotonic() + 120
        try:
            held_at(points, running, deadline)
            while not staged_snapshots(catalog, group) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert staged_snapshots(catalog, group), "the second shard is staged while the first publish is held"
        finally:
            stop.set()
            release(points)
        done = running.result(timeout=120)

    assert done.committed == [shards[0].shard_id, shards[1].shard_id]
    assert done.handed_back == [shard.shard_id for shard in shards[2:]]
    assert carriers(catalog, group) == {shards[0].shard_id: lease.lease_id, shards[1].shard_id: lease.lease_id}
    assert staged_snapshots(catalog, group) == [], "nothing staged is left behind"
