"""Test data: factories for shards, leases and dead letters, and a synthetic events source.

The factories fill every field with the values the tests used to spell out by hand, so a test
names only what it is about; ``tests/conftest.py`` serves them as the ``make_group``,
``make_shard``, ``make_lease`` and ``make_dead_letter`` fixtures. The events source is the demo's
(``infra/demo_data.py``): a table partitioned by ``identity(region)``, so each region is one stream.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Protocol

import yaml
from pyiceberg.catalog import Catalog

from icegroup.iceberg.protocol.assignment import make_lease_id
from icegroup.iceberg.protocol.dead_letters import DeadLetter
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.shards import Shard, window_label
from icegroup.iceberg.protocol.state import GroupState, Lease
from icegroup.iceberg.store.group_tables import GroupTables, load_group_tables
from icegroup.iceberg.store.registry import Loaded, load_state
from icegroup.infra.demo_data import EVENTS_START as EVENTS_START
from icegroup.infra.demo_data import REGIONS as REGIONS
from icegroup.infra.demo_data import SCHEMA as SCHEMA
from icegroup.infra.demo_data import SPEC as SPEC
from icegroup.infra.demo_data import append_batches as append_batches
from icegroup.infra.demo_data import create_source as create_source
from icegroup.infra.demo_data import events as events
from icegroup.infra.demo_data import next_event_id as next_event_id

GROUP = "orders"
STREAM = "0/region=eu"
WINDOW_START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z, the day every test shard falls in

# Shards, leases and dead letters


def shard(n: int = 1, *, stream: str = STREAM, **overrides: Any) -> Shard:
    """The ``n``-th one-snapshot shard of ``stream``: source snapshots 100+n-1 (exclusive) to 100+n."""
    rows = overrides.get("rows", 10)
    fields: dict[str, Any] = {
        "shard_id": f"{n:016x}",
        "stream": stream,
        "from_snapshot": 100 + n - 1,
        "to_snapshot": 100 + n,
        "to_sequence": n,
        "schema_id": 0,
        "window_start_ms": WINDOW_START_MS,
        "snapshots": [100 + n],
        "files": [f"wh/{stream}/{n}.parquet"],
        "rows": rows,
        "bytes": rows * 10,
    }
    return Shard(**{**fields, **overrides})


# The warm Borrower run that factory leases are taken by; pass owner_run_id=None for a lease still waiting.
BORROWER_RUN = "borrower-run-1"


def lease(shard_ids: list[str], *, streams: list[str] | None = None, **overrides: Any) -> Lease:
    """A first attempt at epoch 0 of ``shard_ids`` (on ``streams``, default the one stream), taken by a Borrower."""
    epoch = overrides.get("epoch", 0)
    fields: dict[str, Any] = {
        "lease_id": make_lease_id(GROUP, epoch, shard_ids),  # distinct shards, distinct leases, as granted
        "epoch": epoch,
        "window_start_ms": WINDOW_START_MS,
        "shard_ids": shard_ids,
        "streams": [STREAM] if streams is None else streams,
        "granted_at_ms": 0,
        "deadline_ms": 60_000,
        "sink_snapshot_at_grant": None,
        "owner_run_id": BORROWER_RUN,
    }
    return Lease(**{**fields, **overrides})


def dead_letter(shard_id: str, action: str, **overrides: Any) -> DeadLetter:
    """A dead letter with ``action`` for a shard over source snapshots 101..103 that divided by zero."""
    fields: dict[str, Any] = {
        "shard_id": shard_id,
        "stream": STREAM,
        "lease_id": "fedcba9876543210",
        "attempt": 2,
        "action": action,
        "error": "ZeroDivisionError: division by zero",
        "from_snapshot": 101,
        "to_snapshot": 103,
        "at_ms": 1_000,
    }
    return DeadLetter(**{**fields, **overrides})


def group_state(shards: list[Shard], leases: list[Lease] | None = None, **overrides: Any) -> GroupState:
    """The state of group ``orders`` holding these pending shards and leases."""
    fields: dict[str, Any] = {
        "group": GROUP,
        "source": "demo.events",
        "sink": "demo.events_out",
        "start_position": None,
        "planned_through": max((s.to_snapshot for s in shards), default=None),
        "shards": {s.shard_id: s for s in shards},
        "leases": {x.lease_id: x for x in leases or []},
    }
    return GroupState(**{**fields, **overrides})


class MakeGroup(Protocol):
    """The ``make_group`` fixture's type: a ``GroupConfig`` in the test's namespace, with overrides."""

    def __call__(self, **overrides: Any) -> GroupConfig:
        """Build a group."""
        ...


class MakeShard(Protocol):
    """The ``make_shard`` fixture's type: ``tests.factories.shard``."""

    def __call__(self, n: int = 1, *, stream: str = STREAM, **overrides: Any) -> Shard:
        """Build a shard."""
        ...


class MakeLease(Protocol):
    """The ``make_lease`` fixture's type: ``tests.factories.lease``."""

    def __call__(self, shard_ids: list[str], *, streams: list[str] | None = None, **overrides: Any) -> Lease:
        """Build a lease."""
        ...


class MakeDeadLetter(Protocol):
    """The ``make_dead_letter`` fixture's type: ``tests.factories.dead_letter``."""

    def __call__(self, shard_id: str, action: str, **overrides: Any) -> DeadLetter:
        """Build a dead letter."""
        ...


# The events source: the demo's own generator (``infra/demo_data.py``), so tests and demo share one shape.


def tables_of(catalog: Catalog, group: GroupConfig, loaded: Loaded | None = None) -> GroupTables:
    """The group's tables as a Leader tick opens them, with the registry as ``loaded`` (default: as it is now)."""
    return load_group_tables(catalog, group, loaded if loaded is not None else load_state(catalog, group.name))


def today(group: GroupConfig) -> str:
    """The replay window that every snapshot committed now falls in."""
    return window_label(int(time.time() * 1000), group.replay_window)


def write_groups(path: Path, *groups: GroupConfig) -> Path:
    """The groups as a YAML file that a worker or an ``icegroup`` process loads."""
    path.write_text(yaml.safe_dump({"groups": [g.model_dump(mode="json", exclude_defaults=True) for g in groups]}))
    return path


def no_spark() -> Any:
    """A SparkSession factory for paths that must not start Spark: calling it fails the test."""
    raise AssertionError("Spark was started, but nothing here needed it")
