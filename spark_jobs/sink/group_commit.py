"""Group commit: the leases one process runs at once publish to the sink in as few swaps as they can.

A Borrower holding several leases (several windows, or ``leases_per_borrower`` above 1) runs each
on a thread of its own. Each publish used to be a swap of the sink's metadata of its own, and two
that met raced for it: one lost, refreshed, backed off and swapped again. Through a
``SinkCommitter``, a publish that arrives while another is in flight waits for it, then goes in the
next swap with every publish that waited meanwhile, as a database's group commit batches the
transactions that reach its log together. A lone publish waits for nothing.

Each lease keeps its own snapshot in the swap, with its own summary (its lease, attempt and shards,
which the sink's history, resume, rebuild and lineage read), and its own fence, checked inside the
swap (``FencedCommit.commitAll``): a fenced lease is refused, and the others commit without it.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future

from pyspark.sql import SparkSession

from icegroup.spark_jobs.sink.fenced_commit import Published, PublishRequest, publish_all


class SinkCommitter:
    """Publishes the staged output of one process's leases to one sink, batching the publishes that meet."""

    def __init__(self, spark: SparkSession, table: str, group: str) -> None:
        """A committer for ``group``'s sink ``table`` (as Spark names it); nothing is committed yet."""
        self.spark = spark
        self.table = table
        self.group = group
        self.swaps = 0
        self.published = 0
        self._turn = threading.Condition()
        self._waiting: list[tuple[PublishRequest, Future[Published]]] = []
        self._committing = False

    def publish(self, request: PublishRequest) -> Published:
        """Publish one lease's staged shards, with whatever other publishes wait at the same moment.

        Raises what ``publish_shard`` raises: ``Fenced``, ``AlreadyCommitted``, ``StagedOutputGone``
        for this request alone, and the swap's own failure for every request in it.
        """
        mine: Future[Published] = Future()
        batch: list[tuple[PublishRequest, Future[Published]]] = []
        with self._turn:
            self._waiting.append((request, mine))
            while self._committing and not mine.done():
                self._turn.wait()
            if not mine.done():
                batch, self._waiting = self._waiting, []
                self._committing = True
        if batch:
            self._commit(batch)
        return mine.result()

    def _commit(self, batch: list[tuple[PublishRequest, Future[Published]]]) -> None:
        """One swap for ``batch``; every request's future gets its outcome, then the next batch may go."""
        outcomes: list[Published | BaseException]
        try:
            outcomes = list(publish_all(self.spark, self.table, self.group, [request for request, _ in batch]))
        except BaseException as exc:
            outcomes = [exc] * len(batch)
        with self._turn:
            for (_, future), outcome in zip(batch, outcomes, strict=True):
                if isinstance(outcome, BaseException):
                    future.set_exception(outcome)
                else:
                    future.set_result(outcome)
                    self.published += 1
            self.swaps += 1
            self._committing = False
            self._turn.notify_all()
