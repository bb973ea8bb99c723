"""One attempt of a lease in flight: its report, what its phases share, and how it stages a shard's output.

``spark_jobs/borrower/lease.py`` runs the attempt phase by phase, ``spark_jobs/borrower/publishing.py``
stages and publishes its shards, and ``spark_jobs/borrower/isolation.py`` stages a poison shard
without its failing rows. The last two build a shard's output and deliver it to the sink the same
way, through here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TypeVar

from pyiceberg.catalog import Catalog
from pyiceberg.table import Table
from pyspark.sql import Column, DataFrame, SparkSession

from icegroup.iceberg.config.lakehouse import LakehouseConfig
from icegroup.iceberg.errors import StagedOutputGone
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.liveness import BorrowerPhase
from icegroup.iceberg.protocol.shards import Shard
from icegroup.iceberg.protocol.sink_commit import SinkCommit
from icegroup.iceberg.protocol.state import Lease
from icegroup.iceberg.retry import again_after
from icegroup.spark_jobs.borrower.output import shard_output
from icegroup.spark_jobs.row_files import RowFiles
from icegroup.spark_jobs.sink.fenced_commit import Published, claim, stage_aligned
from icegroup.spark_jobs.sink.group_commit import SinkCommitter
from icegroup.spark_jobs.sink.shape import ensure_sink
from icegroup.spark_jobs.transforms import Transform

Progress = Callable[[str], None]
T = TypeVar("T")
# How often a commit whose staged output was expired before its publish is staged and published.
STAGINGS = 3


@dataclass
class LeaseReport:
    """What one Borrower run did, for run metadata and the CLI's progress lines."""

    lease_id: str
    attempt: int
    epoch: int
    window_start_ms: int
    shards_total: int
    committed: list[str] = field(default_factory=list)
    resumed: list[str] = field(default_factory=list)
    fenced: list[str] = field(default_factory=list)
    rows_in: int = 0
    rows_out: int = 0
    bytes_in: int = 0
    files_in: int = 0
    duration_s: float = 0.0
    source_from: int | None = None
    source_to: int | None = None
    sink_snapshots: list[int] = field(default_factory=list)
    commit_conflicts: int = 0
    redeliveries: int = 0
    handed_back: list[str] = field(default_factory=list)
    isolated_rows: int = 0
    phase: BorrowerPhase = BorrowerPhase.CONNECTING


@dataclass(frozen=True)
class Where:
    """Where a lease reads its shards from: what staging a refused publish's shards again needs."""

    root: int | None
    source: Table


@dataclass
class InFlight:
    """A publish of this lease that runs while the lease stages its next shards."""

    future: Future[Published]
    shards: list[Shard]
    staged_s: float
    started: float
    where: Where


@dataclass
class LeaseRun:
    """One attempt of a lease in flight: what every phase of ``run_lease`` shares."""

    spark: SparkSession
    lakehouse: LakehouseConfig
    catalog: Catalog
    group: GroupConfig
    lease: Lease
    transform: Transform
    report: LeaseReport
    progress: Progress
    run_id: str | None = None
    committer: SinkCommitter | None = None
    publisher: ThreadPoolExecutor | None = None
    in_flight: InFlight | None = None
    claimed: bool = False
    sink_ready: bool = False
    row_files: RowFiles = field(init=False)

    def __post_init__(self) -> None:
        """A new attempt has no verdict on its transform yet."""
        self.row_files = RowFiles(self.source_table)

    @property
    def sink_table(self) -> str:
        """The sink as Spark names it."""
        return f"{self.lakehouse.catalog_name}.{self.group.sink}"

    @property
    def source_table(self) -> str:
        """The source as Spark names it."""
        return f"{self.lakehouse.catalog_name}.{self.group.source}"


def deliver(run: LeaseRun, out: DataFrame, one_window: bool = True) -> str:
    """Stage one shard's output on the sink (``stage_aligned``); the first one creates the sink and claims the lease."""
    if not run.sink_ready:
        ensure_sink(run.spark, run.lakehouse.catalog_name, run.group.sink, out)
        if not run.claimed:
            run.claimed = claim(run.catalog, run.group, run.lease)
        run.sink_ready = True
    return stage_aligned(run.spark, run.sink_table, out, one_window)


def output(
    run: LeaseRun, shards: list[Shard], root: int | None, source: Table, rows: Column | None = None
) -> Callable[[], DataFrame]:
    """The shards' output for one commit, built afresh per delivery (``spark_jobs/borrower/output.py``)."""
    return shard_output(
        run.spark, run.source_table, run.group, run.lease, run.transform, shards, root, source, run.row_files, rows
    )


def staged_again(progress: Progress, commit: Callable[[], T], failed_before: int = 0) -> T:
    """``commit()`` (stage shards, then publish them), tried again when its staged output is gone at publish.

    A staged snapshot is on no branch until its publish, so an expiry of the sink's snapshots in
    between (another engine's ``expire_snapshots``, or the sink's own maintenance) can take it. The
    publish then commits nothing, so staging the same shards again and publishing that keeps every
    row exactly once; the fenced commit's shard check still refuses a shard that is in the sink.
    ``failed_before`` are the stagings of these shards already lost (a publish left in flight).
    """

    def wait_after(error: Exception, failed: int, _waited_s: float) -> float | None:
        return 0.0 if isinstance(error, StagedOutputGone) and failed_before + failed < STAGINGS else None

    def again(error: Exception, failed: int, _wait_s: float) -> None:
        progress(f"{error}; staging again ({failed_before + failed + 1}/{STAGINGS})")

    return again_after(commit, wait_after, again)


def count_own_commits(run: LeaseRun, commits: Iterable[SinkCommit]) -> None:
    """Add the sink commits made by this lease attempt to its report: rows out and sink snapshots."""
    for commit in commits:
        own = commit.lease_id == run.lease.lease_id and commit.attempt == run.lease.attempt
        if own and commit.snapshot_id not in run.report.sink_snapshots:
            run.report.rows_out += commit.added_records
            run.report.sink_snapshots.append(commit.snapshot_id)


def count_shard(run: LeaseRun, shard: Shard) -> None:
    """Add a shard this attempt committed to its report."""
    run.report.committed.append(shard.shard_id)
    run.report.rows_in += shard.rows
    run.report.bytes_in += shard.bytes
    run.report.files_in += len(shard.files)
