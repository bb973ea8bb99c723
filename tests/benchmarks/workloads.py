"""The benchmark's source data: W1 (a few large snapshots), W2 (many small ones) and L's small appends.

Every arm of a workload reads the same source table, so the data is identical by construction.
Rows follow the tests' events schema (``tests/factories.py``), partitioned by region, so each
region is one stream. Columns are drawn with numpy from a fixed seed: building W1's five million
rows as Python dicts would take minutes.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from pyiceberg.table import Table
from pyiceberg.table.refs import MAIN_BRANCH
from pyiceberg.table.snapshots import Snapshot

from tests.factories import EVENTS_START, REGIONS, SCHEMA

# The branch ``fill_at_once`` writes a workload to before ``main`` moves to it.
BACKLOG = "bench-backlog"


@dataclass(frozen=True)
class Workload:
    """``snapshots`` appends of ``rows_per_snapshot`` rows each."""

    name: str
    snapshots: int
    rows_per_snapshot: int

    @property
    def rows(self) -> int:
        """Rows in the whole source."""
        return self.snapshots * self.rows_per_snapshot


W1 = Workload("W1", snapshots=12, rows_per_snapshot=420_000)
W2 = Workload("W2", snapshots=300, rows_per_snapshot=300)


def events(first_id: int, count: int, seed: int, regions: Sequence[str] = REGIONS) -> pa.Table:
    """``count`` events with ids from ``first_id``, round-robin over ``regions``, drawn from ``seed``."""
    rng = np.random.default_rng(seed)
    ids = np.arange(first_id, first_id + count, dtype=np.int64)
    region = np.array(regions)[ids % len(regions)]
    start_us = int(EVENTS_START.timestamp() * 1_000_000)
    columns = {
        "event_id": ids,
        "region": region,
        "event_ts": pa.array(start_us + ids * 1_000_000, type=pa.timestamp("us", tz="UTC")),
        "amount": np.round(rng.uniform(1, 100, count), 2),
        "user_id": rng.integers(1, 500, count, dtype=np.int64),
    }
    return pa.Table.from_pydict(columns, schema=SCHEMA.as_arrow())


def append_events(table: Table, first_id: int, count: int, seed: int, branch: str = MAIN_BRANCH) -> Snapshot:
    """Commit one snapshot of ``count`` events to ``branch``; returns it (its commit time is the latency's start)."""
    table.append(events(first_id, count, seed), branch=branch)
    snapshot = table.snapshot_by_name(branch)
    assert snapshot is not None
    return snapshot


def fill(table: Table, workload: Workload, seed: int = 11) -> None:
    """Commit the workload's snapshots to an empty source table, event ids from 1."""
    for index in range(workload.snapshots):
        append_events(table, 1 + index * workload.rows_per_snapshot, workload.rows_per_snapshot, seed + index)


def fill_at_once(table: Table, workload: Workload, seed: int = 11) -> int:
    """Commit the workload's snapshots to a branch, then move ``main`` to them in one commit; returns its time (ms).

    Every snapshot of the workload appears to a reader of ``main`` at one moment, as a backlog
    does: an arm that is already up (a warm Borrower) is timed from that moment, and finds the whole
    workload, not the first of its snapshots while the rest are still being written.
    """
    head = table.current_snapshot()
    assert head is not None, "fill_at_once extends a source that has a snapshot"
    table.manage_snapshots().create_branch(head.snapshot_id, BACKLOG).commit()
    for index in range(workload.snapshots):
        append_events(table, 1 + index * workload.rows_per_snapshot, workload.rows_per_snapshot, seed + index, BACKLOG)
    moved_ms = int(time.time() * 1000)  # no reader of main sees the backlog before this commit starts
    table.manage_snapshots().set_current_snapshot(ref_name=BACKLOG).commit()
    table.manage_snapshots().remove_branch(BACKLOG).commit()
    return moved_ms
