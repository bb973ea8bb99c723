"""A Borrower renews the deadline of a lease whose Spark jobs still complete tasks.

Each lease thread runs its Spark jobs in a job group of its own. Every third of ``lease_timeout_s``
a renewer thread counts the tasks those jobs have completed, per stage, from Spark's status
tracker, and renews each lease that progressed (``iceberg/store/renewals.py``). What a job group
is, what counts as progress and what a renewal moves are decided in ``iceberg/protocol/renewal.py``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from pyiceberg.catalog import Catalog
from pyspark import SparkContext
from pyspark.sql import SparkSession
from sqlalchemy.exc import SQLAlchemyError

from icegroup.iceberg.protocol.renewal import job_group, progressed
from icegroup.iceberg.protocol.state import Lease
from icegroup.iceberg.store.renewals import renew

log = logging.getLogger(__name__)


def stage_progress(context: SparkContext, job_group_id: str) -> dict[int, int]:
    """Tasks completed so far in each stage of the jobs of ``job_group_id`` that Spark still tracks."""
    tracker = context.statusTracker()
    done: dict[int, int] = {}
    for job_id in tracker.getJobIdsForGroup(job_group_id):
        job = tracker.getJobInfo(job_id)
        for stage_id in job.stageIds if job is not None else []:
            stage = tracker.getStageInfo(stage_id)
            if stage is not None:
                done[stage_id] = stage.numCompletedTasks
    return done


class Renewer:
    """Renews, every third of the lease timeout, each running lease whose Spark jobs completed tasks since."""

    def __init__(
        self,
        session: SparkSession,
        catalog: Catalog,
        group: str,
        leases: Callable[[], list[Lease]],
        lease_timeout_s: int,
        progress: Callable[[str], None],
    ) -> None:
        """A renewer of ``leases()`` (the runner's running leases); its thread starts with ``start``."""
        self.session = session
        self.catalog = catalog
        self.group = group
        self.leases = leases
        self.lease_timeout_s = lease_timeout_s
        self.interval_s = lease_timeout_s / 3
        self.progress = progress
        self.seen: dict[str, dict[int, int]] = {}
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self.run, name=f"icegroup-renewal-{group}", daemon=True)

    def start(self) -> None:
        """Begin looking, every ``interval_s``."""
        self.thread.start()

    def stop(self) -> None:
        """Stop looking; a renewal under way completes."""
        self.stopped.set()
        if self.thread.is_alive():
            self.thread.join(timeout=self.interval_s + 5)

    def run(self) -> None:
        """The thread: look, renew the leases that progressed, wait; a look that fails is logged and tried again."""
        while not self.stopped.wait(self.interval_s):
            try:
                self.look()
            except Exception:  # a renewal is a courtesy: the deadline and the next look still decide
                log.exception(
                    "group %s: looking for lease progress failed; trying again in %.0fs", self.group, self.interval_s
                )

    def look(self) -> list[Lease]:
        """Renew each lease that completed tasks since the last look; returns those renewed."""
        renewed = []
        for lease in self.leases():
            key = job_group(self.group, lease)
            now = stage_progress(self.session.sparkContext, key)
            before = self.seen.setdefault(key, {})
            if not progressed(before, now):
                continue
            before.update(now)
            done = sum(before.values())
            try:
                renew(self.catalog, self.group, lease.lease_id, lease.attempt)
            except SQLAlchemyError as exc:  # the deadline or the next look still decides
                log.warning("group %s: renewal of lease %s failed (%s)", self.group, lease.lease_id, exc)
                continue
            renewed.append(lease)
            self.progress(
                f"{self.group} lease {lease.lease_id}#{lease.attempt}: still working ({done} Spark tasks done); "
                f"deadline renewed to {self.lease_timeout_s}s from now"
            )
        return renewed
