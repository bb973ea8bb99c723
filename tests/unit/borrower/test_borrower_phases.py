"""The Borrower's phases that need no Spark: connect (the claim on the sink), resume and report.

Deliver and publish stage and commit through Spark; the integration tier runs them
(``test_fencing_and_resume.py``, ``test_zombie.py``). Sink commits are simulated here with pyiceberg
appends that carry the summary a Borrower writes.
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.table import Table

from icegroup.iceberg.config.lakehouse import LakehouseConfig
from icegroup.iceberg.errors import ConfigError, StaleLease
from icegroup.iceberg.protocol.fences import fence_key
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.liveness import BorrowerPhase
from icegroup.iceberg.protocol.shards import Shard
from icegroup.iceberg.protocol.sink_commit import commit_properties
from icegroup.iceberg.protocol.state import Lease, Origin
from icegroup.iceberg.store.fences import raise_fences
from icegroup.spark_jobs.borrower.attempt import LeaseReport, LeaseRun
from icegroup.spark_jobs.borrower.lease import connect, report, resume
from icegroup.spark_jobs.transforms import identity
from tests.factories import MakeGroup, lease, shard
from tests.sink_commits import ID_SCHEMA, create_sink


def lease_run(
    lakehouse: LakehouseConfig, catalog: Catalog, group: GroupConfig, held: Lease, run_id: str | None = None
) -> LeaseRun:
    """A lease attempt in flight, without a Spark session (these phases never touch one)."""
    return LeaseRun(
        spark=None,  # type: ignore[arg-type]
        lakehouse=lakehouse,
        catalog=catalog,
        group=group,
        lease=held,
        transform=identity,
        report=LeaseReport(held.lease_id, held.attempt, held.epoch, held.window_start_ms, len(held.shard_ids)),
        progress=lambda _: None,
        run_id=run_id,
    )


def commit(sink: Table, group: GroupConfig, by: Lease, done: Shard, rows: int, run_id: str | None = None) -> int:
    """Append ``rows`` rows as ``by``'s commit of ``done`` (made by run ``run_id``); returns the sink snapshot."""
    props = commit_properties(group.name, group.source, by.lease_id, by.epoch, by.attempt, [done], run_id=run_id)
    data = pa.Table.from_pylist([{"id": i} for i in range(rows)], schema=ID_SCHEMA.as_arrow())
    sink.append(data, snapshot_properties=props)
    head = sink.current_snapshot()
    assert head is not None
    return head.snapshot_id


def test_connect_without_a_sink_claims_nothing_yet(
    lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    run = lease_run(lakehouse, catalog, make_group(), lease([shard(1).shard_id], attempt=1))

    connect(run, shards=1)

    assert run.claimed is False
    assert run.report.phase is BorrowerPhase.CONNECTED


def test_connect_raises_the_fence_to_its_own_attempt(
    lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group()
    sink = create_sink(catalog, group)
    held = lease([shard(1).shard_id], attempt=2)

    connect(lease_run(lakehouse, catalog, group, held), shards=1)

    sink.refresh()
    assert sink.metadata.properties[fence_key(group.name, held.lease_id)] == "2"


def test_connect_refuses_a_lease_granted_under_another_filter_or_transform_and_claims_nothing(
    lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group()
    sink = create_sink(catalog, group)
    held = lease([shard(1).shard_id], origin=Origin(start_position=None, config_hash="0" * 16))

    with pytest.raises(ConfigError, match=r"differ from the config lease .* was granted under"):
        connect(lease_run(lakehouse, catalog, group, held), shards=1)

    sink.refresh()
    assert fence_key(group.name, held.lease_id) not in sink.metadata.properties


def test_connect_of_an_attempt_already_fenced_off_is_stale(
    lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group()
    held = lease([shard(1).shard_id], attempt=1)
    raise_fences(create_sink(catalog, group), {fence_key(group.name, held.lease_id): 2})

    with pytest.raises(StaleLease, match="fenced at attempt 2"):
        connect(lease_run(lakehouse, catalog, group, held), shards=1)


def test_resume_skips_the_shards_in_the_sink_and_counts_this_attempts_own_commits(
    lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    """Shards in the sink are resumed after; the rows of this attempt's own commits count in its report."""
    group = make_group()
    sink = create_sink(catalog, group)
    first, second, third = shard(1), shard(2), shard(3)
    held = lease([first.shard_id, second.shard_id, third.shard_id], attempt=1)
    commit(sink, group, held.model_copy(update={"attempt": 0}), first, rows=4)
    own = commit(sink, group, held, second, rows=5, run_id="an-earlier-run")
    run = lease_run(lakehouse, catalog, group, held, run_id="this-run")

    todo = resume(run, [first, second, third])

    assert todo == [third]
    assert run.report.resumed == [first.shard_id, second.shard_id]
    assert run.report.committed == []
    assert run.report.rows_out == 5
    assert run.report.sink_snapshots == [own]
    assert (run.report.source_from, run.report.source_to) == (first.from_snapshot, third.to_snapshot)


def test_a_shard_this_run_committed_in_a_try_whose_answer_was_lost_counts_as_committed(
    lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    """The platform failed as the commit landed; the run's next try finds the commit naming this run."""
    group = make_group()
    sink = create_sink(catalog, group)
    first, second = shard(1), shard(2)
    held = lease([first.shard_id, second.shard_id], attempt=1)
    landed = commit(sink, group, held, first, rows=4, run_id="this-run")
    run = lease_run(lakehouse, catalog, group, held, run_id="this-run")

    todo = resume(run, [first, second])

    assert todo == [second]
    assert run.report.committed == [first.shard_id]
    assert run.report.resumed == []
    assert run.report.rows_in == first.rows
    assert run.report.rows_out == 4
    assert run.report.sink_snapshots == [landed]


def test_a_try_after_a_platform_failure_lists_a_resumed_shard_once(
    lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup
) -> None:
    """The tries of one run share its report: the second try's resume does not list the first's shards again."""
    group = make_group()
    sink = create_sink(catalog, group)
    first, second = shard(1), shard(2)
    held = lease([first.shard_id, second.shard_id], attempt=1)
    commit(sink, group, held.model_copy(update={"attempt": 0}), first, rows=4)
    run = lease_run(lakehouse, catalog, group, held, run_id="this-run")

    resume(run, [first, second])
    todo = resume(run, [first, second])

    assert todo == [second]
    assert run.report.resumed == [first.shard_id]


def test_report_closes_the_attempt(lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup) -> None:
    run = lease_run(lakehouse, catalog, make_group(), lease([shard(1).shard_id]))

    closed = report(run)

    assert closed is run.report
    assert closed.phase is BorrowerPhase.UNSUBSCRIBING
