"""Lease renewals: a Borrower on a long shard says "still working" for one lease, with evidence.

A lease's deadline (``lease_timeout_s``) bounds a Borrower that is alive but stuck: its heartbeat
goes on, so only the deadline ends it. The deadline moves when the lease commits, so a shard that
takes longer than the timeout to stage would be revoked while it is still progressing. The Borrower
therefore renews the lease itself, but only while its Spark jobs complete tasks
(``spark_jobs/borrower/renewal.py``): a stuck task renews nothing, and the deadline still ends it.
This is Kafka's ``max.poll.interval.ms`` with the consumer's own progress as the poll.

A renewal is one row per lease attempt in the heartbeat database (``heartbeat_engine``), never an
Iceberg commit; the Leader reads the group's rows at each tick and moves the deadline of the
attempt that renewed (``iceberg/protocol/liveness.py`` ``renewed``).
"""

from __future__ import annotations

import time

from pyiceberg.catalog import Catalog
from sqlalchemy import BigInteger, Column, Integer, String, Table, delete, inspect, select, update
from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError, SQLAlchemyError

from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.renewal import renewed
from icegroup.iceberg.protocol.state import GroupState
from icegroup.iceberg.store.heartbeats import METADATA, heartbeat_engine

RENEWALS = Table(
    "icegroup_lease_renewals",
    METADATA,
    Column("group_name", String(255), primary_key=True),
    Column("lease_id", String(255), primary_key=True),
    Column("attempt", Integer, nullable=False),
    Column("renewed_ms", BigInteger, nullable=False),
)


def renew(catalog: Catalog, group: str, lease_id: str, attempt: int, now_ms: int | None = None) -> None:
    """Record that attempt ``attempt`` of ``lease_id`` progressed at ``now_ms``; creates the table at first use."""
    engine = heartbeat_engine(catalog)
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    where = (RENEWALS.c.group_name == group) & (RENEWALS.c.lease_id == lease_id)
    row = {"attempt": attempt, "renewed_ms": now_ms}
    try:
        with engine.begin() as connection:
            if connection.execute(update(RENEWALS).where(where).values(**row)).rowcount:
                return
    except (OperationalError, ProgrammingError):
        METADATA.create_all(engine, tables=[RENEWALS], checkfirst=True)
    try:
        with engine.begin() as connection:
            connection.execute(RENEWALS.insert().values(group_name=group, lease_id=lease_id, **row))
    except IntegrityError:
        with engine.begin() as connection:
            connection.execute(update(RENEWALS).where(where).values(**row))


def read_renewals(catalog: Catalog, group: str) -> dict[str, tuple[int, int]]:
    """Each lease's last renewal in ``group`` as lease id -> (attempt, renewed at); none before the table exists."""
    engine = heartbeat_engine(catalog)
    query = select(RENEWALS).where(RENEWALS.c.group_name == group)
    try:
        with engine.connect() as connection:
            rows = connection.execute(query).mappings().all()
    except (OperationalError, ProgrammingError):
        if inspect(engine).has_table(RENEWALS.name):
            raise
        return {}
    return {r["lease_id"]: (r["attempt"], r["renewed_ms"]) for r in rows}


def forget_renewals(catalog: Catalog, group: str, lease_ids: list[str]) -> None:
    """Remove the rows of leases that are finished: the Leader drops them once a lease leaves the registry."""
    if not lease_ids:
        return
    engine = heartbeat_engine(catalog)
    where = (RENEWALS.c.group_name == group) & RENEWALS.c.lease_id.in_(lease_ids)
    try:
        with engine.begin() as connection:
            connection.execute(delete(RENEWALS).where(where))
    except SQLAlchemyError:
        if inspect(engine).has_table(RENEWALS.name):
            raise


def renewals_applied(catalog: Catalog, group: GroupConfig, state: GroupState) -> GroupState:
    """The state with each lease deadline its Borrower renewed moved on (``renewed``); stale rows are dropped."""
    renewals = read_renewals(catalog, group.name)
    forget_renewals(catalog, group.name, [lease_id for lease_id in renewals if lease_id not in state.leases])
    return renewed(state, renewals, group.lease_timeout_s)
