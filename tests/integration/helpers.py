"""Driving a group in tests: Leader ticks and Borrowers, without Dagster."""

from __future__ import annotations

import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from pyiceberg.catalog import Catalog
from pyspark.sql import DataFrame, SparkSession

from icegroup.iceberg.config.lakehouse import LakehouseConfig
from icegroup.iceberg.failpoints import ENV
from icegroup.iceberg.leader import TickResult, tick
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.liveness import RunState
from icegroup.iceberg.protocol.state import Lease
from icegroup.spark_jobs.borrower.attempt import LeaseReport
from icegroup.spark_jobs.borrower.lease import run_lease
from tests.factories import append_batches, create_source

REPO = Path(__file__).resolve().parents[2]


def quiet(_: str) -> None:
    """Progress sink that drops messages."""


def consumed(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, group: GroupConfig, batches: int, rows: int
) -> None:
    """A new source of ``batches`` appends of ``rows`` events each, consumed by ``group`` until caught up."""
    append_batches(create_source(catalog, group.source), batches, rows)
    drive(spark, lakehouse, group)


def drive(
    spark: SparkSession,
    lakehouse: LakehouseConfig,
    group: GroupConfig,
    borrowers: int = 1,
    max_ticks: int = 50,
    observe: Callable[[Lease], RunState] | None = None,
) -> tuple[list[TickResult], list[LeaseReport]]:
    """Tick until caught up; each tick's leases run on up to ``borrowers`` threads at once.

    Leases that a tick hands out are run to completion before the next tick, so the runs are
    SUCCEEDED when it looks; a lease that is still held would be reported as running.
    """
    catalog = lakehouse.catalog()
    finished: dict[tuple[str, int], RunState] = {}

    def default_observe(lease: Lease) -> RunState:
        return finished.get((lease.lease_id, lease.attempt), RunState.MISSING)

    ticks: list[TickResult] = []
    reports: list[LeaseReport] = []
    for _ in range(max_ticks):
        result = tick(catalog, group, observe or default_observe)
        ticks.append(result)
        if result.caught_up:
            return ticks, reports

        def execute(lease: Lease, result: TickResult = result) -> LeaseReport:
            shards = [result.state.shards[sid] for sid in lease.shard_ids if sid in result.state.shards]
            report = run_lease(spark, lakehouse, group, lease, shards, progress=quiet)
            finished[(lease.lease_id, lease.attempt)] = RunState.SUCCEEDED
            return report

        with ThreadPoolExecutor(max_workers=borrowers) as pool:
            reports.extend(pool.map(execute, result.launch))
    raise AssertionError(f"group {group.name} not caught up after {max_ticks} ticks")


def wait_for(predicate: Callable[[], object], timeout_s: float, what: str) -> None:
    """Poll until ``predicate()`` is true."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


@dataclass
class Held:
    """A process held at a fail point: the block acts on it, then lets it go on."""

    process: subprocess.Popen[str]
    points: Path

    def release(self) -> None:
        """Let the process go on from the fail point."""
        for hit in self.points.glob("hit.*"):
            hit.unlink()


@contextmanager
def held_at(point: str, command: list[str], env: dict[str, str], points: Path, what: str) -> Iterator[Held]:
    """Run ``command`` (from the checkout) until it reaches fail point ``point``, and hold it there for the block.

    Its output is captured as text. A process the block leaves running is killed.
    """
    (points / point).touch()
    process = subprocess.Popen(
        command, cwd=REPO, env={**env, ENV: str(points)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        wait_for(lambda: any(p.name.startswith("hit.") for p in points.iterdir()) or process.poll() is not None,
                 120, what)  # fmt: skip
        assert process.poll() is None, f"it ended before {what}: {process.communicate()}"
        yield Held(process, points)
    finally:
        if process.poll() is None:
            process.kill()


def sink_ids(catalog: Catalog, group: GroupConfig) -> Counter[int]:
    """Multiset of event ids in the sink."""
    rows = catalog.load_table(group.sink).scan(selected_fields=("event_id",)).to_arrow()
    return Counter(rows.column("event_id").to_pylist())


# A changed transform for an upstream group: its amounts in cents.
CENTS = "tests.integration.transforms:amount_in_cents"


@dataclass(frozen=True)
class Chain:
    """An upstream group over the events, a downstream group over its sink, and today's window."""

    first: GroupConfig
    second: GroupConfig
    cents: GroupConfig
    window: str

    def consume(self, spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, batches: int) -> None:
        """Append ``batches`` of 12 events to the source, then let both groups catch up."""
        consumed(spark, lakehouse, catalog, self.first, batches, 12)
        drive(spark, lakehouse, self.second)


def scans(df: DataFrame) -> list[str]:
    """The class of each scan the read's physical plan runs: ``SparkStagedScan`` for a staged task set."""
    leaves = df._jdf.queryExecution().executedPlan().collectLeaves().iterator()
    found = []
    while leaves.hasNext():
        leaf = leaves.next()
        if str(leaf.nodeName()).startswith("BatchScan"):
            found.append(str(leaf.scan().getClass().getSimpleName()))
    return found
