"""Several leases at once on one warm SparkSession: one thread and one FAIR scheduler pool per lease.

``consume`` and a warm Borrower run both hold up to a number of leases at once. Each lease is its
own thread, so one lease's publish (a catalog round trip) overlaps another lease's Spark job, and
each thread submits its jobs to its own pool (``spark.scheduler.mode=FAIR``), so a large shard
cannot keep a small lease waiting. The leases publish through one ``SinkCommitter``: publishes that
meet go in one swap of the sink's metadata, a snapshot per lease, each still fenced by its own
attempt, where they used to race for it. The Leader puts a stream in one lease at a time, so per-stream
order holds however the threads interleave; each lease's commits stay fenced by its own attempt.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from types import TracebackType

from pyspark.sql import SparkSession

from icegroup.iceberg.config.lakehouse import LakehouseConfig
from icegroup.iceberg.errors import PoisonShard, StaleLease
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.liveness import RunState
from icegroup.iceberg.protocol.renewal import job_group
from icegroup.iceberg.protocol.shards import Shard
from icegroup.iceberg.protocol.state import Lease
from icegroup.spark_jobs.borrower.attempt import LeaseReport
from icegroup.spark_jobs.borrower.lease import run_lease
from icegroup.spark_jobs.borrower.renewal import Renewer
from icegroup.spark_jobs.session import use_pool
from icegroup.spark_jobs.sink.group_commit import SinkCommitter

Key = tuple[str, int]
LeaseCallback = Callable[[Lease, LeaseReport], None]


@dataclass
class LeaseTotals:
    """What the leases one process ran added up to."""

    leases: int = 0
    shards: int = 0
    rows_in: int = 0
    rows_out: int = 0
    reports: list[LeaseReport] = field(default_factory=list)

    def add(self, finished: list[tuple[Lease, LeaseReport]], on_lease: LeaseCallback | None) -> None:
        """Count the leases that ended, and hand each to ``on_lease`` (run metadata, say)."""
        for lease, report in finished:
            self.leases += 1
            self.shards += len(report.committed)
            self.rows_in += report.rows_in
            self.rows_out += report.rows_out
            self.reports.append(report)
            if on_lease is not None:
                on_lease(lease, report)


class LeaseRunner:
    """Runs granted leases on up to ``slots`` threads of one SparkSession and reports how each ended.

    ``spark`` is called for the session at the first lease only, on the calling thread, so a
    process that never gets a lease starts no JVM. A lease fenced by a re-grant elsewhere, or
    parked as poison under ``on_poison: park``, ends as failed and the others go on; any other
    error is raised by ``finished`` once the leases still running have ended.
    """

    def __init__(
        self,
        spark: Callable[[], SparkSession],
        lakehouse: LakehouseConfig,
        group: GroupConfig,
        run_id: str,
        slots: int,
        progress: Callable[[str], None],
    ) -> None:
        """A runner of ``slots`` threads for ``run_id``'s leases of ``group``; no thread starts yet."""
        self.spark = spark
        self.lakehouse = lakehouse
        self.group = group
        self.run_id = run_id
        self.slots = slots
        self.progress = progress
        self.running: dict[Key, tuple[Lease, Future[LeaseReport]]] = {}
        self.ended: dict[Key, RunState] = {}
        self.session: SparkSession | None = None
        self.threads = ThreadPoolExecutor(max_workers=slots, thread_name_prefix=f"{group.name}-lease")
        self.stopping = threading.Event()
        self.renewer: Renewer | None = None
        self.committer: SinkCommitter | None = None

    def __enter__(self) -> LeaseRunner:
        """The runner itself; leaving the block waits for the leases still running."""
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        """Wait for the leases still running: a lease is never abandoned halfway by its own process.

        Leaving on an error (a SIGTERM, a Dagster run termination, a failed lease) stops each lease
        after the commit in flight, so the run ends within one shard and hands back the rest
        (``LeaseReport.handed_back``), instead of working through every shard it was granted.
        """
        if error is not None:
            self.stop()
        self.threads.shutdown(wait=True)
        if self.renewer is not None:
            self.renewer.stop()

    def stop(self) -> None:
        """Let each running lease finish the shard it is on, then end, handing back its other shards."""
        said = self.working and not self.stopping.is_set()
        self.stopping.set()  # before the line: whoever reads it may take the leases as stopping
        if said:
            self.progress(
                f"{self.group.name}: stopping: each running lease ends after its current shard and hands back the rest"
            )

    @property
    def busy(self) -> int:
        """Leases running now."""
        return len(self.running)

    @property
    def working(self) -> bool:
        """Whether a lease thread still runs: ``busy`` counts leases not yet accounted for, ended or not."""
        return any(not future.done() for _, future in self.running.values())

    def in_flight(self) -> list[Lease]:
        """The leases whose threads still run: those the renewer looks at."""
        return [lease for lease, future in list(self.running.values()) if not future.done()]

    @property
    def free(self) -> int:
        """Leases that could start now."""
        return self.slots - len(self.running)

    def state(self, lease: Lease) -> RunState:
        """How this process's run of the lease attempt stands, as the Leader's run observer reports it."""
        key = (lease.lease_id, lease.attempt)
        return RunState.RUNNING if key in self.running else self.ended.get(key, RunState.MISSING)

    def knows(self, lease: Lease) -> bool:
        """Whether this attempt was started here already (running or ended)."""
        return self.state(lease) is not RunState.MISSING

    def start(self, lease: Lease, shards: list[Shard]) -> None:
        """Begin the lease on a free thread."""
        if self.session is None:
            self.session = self.spark()
            self.renewer = Renewer(
                self.session,
                self.lakehouse.catalog(),
                self.group.name,
                self.in_flight,
                self.group.lease_timeout_s,
                self.progress,
            )
            self.renewer.start()
            self.committer = SinkCommitter(
                self.session, f"{self.lakehouse.catalog_name}.{self.group.sink}", self.group.name
            )
        session, committer = self.session, self.committer

        def execute() -> LeaseReport:
            use_pool(session, threading.current_thread().name, job_group(self.group.name, lease))
            return run_lease(
                session, self.lakehouse, self.group, lease, shards, self.progress, self.run_id, self.stopping, committer
            )

        self.running[(lease.lease_id, lease.attempt)] = (lease, self.threads.submit(execute))

    def finished(self, timeout: float | None) -> list[tuple[Lease, LeaseReport]]:
        """Wait up to ``timeout`` for a lease to end; returns those that committed everything."""
        if not self.running:
            return []
        wait([future for _, future in self.running.values()], timeout=timeout, return_when=FIRST_COMPLETED)
        done: list[tuple[Lease, LeaseReport]] = []
        for key, (lease, future) in list(self.running.items()):
            if not future.done():
                continue
            del self.running[key]
            error = future.exception()
            if error is None:
                self.ended[key] = RunState.SUCCEEDED
                done.append((lease, future.result()))
            elif isinstance(error, StaleLease) or (isinstance(error, PoisonShard) and self.group.on_poison == "park"):
                self.ended[key] = RunState.FAILED
                self.progress(f"{self.group.name}: lease {lease.lease_id} attempt {lease.attempt} ended: {error}")
            else:
                self.ended[key] = RunState.FAILED
                self.stop()  # the run fails: the other leases end after their current shard, not their last
                self.drain()
                raise error
        return done

    def drain(self) -> None:
        """Let every lease still running end, whatever happened to the others."""
        wait([future for _, future in self.running.values()])
