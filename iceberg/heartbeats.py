"""Heartbeats: a Borrower's sign of life, kept in the catalog database next to the catalog's own tables.

A Borrower renews its hold while it works: every ``session_timeout_s / 3`` seconds it writes the time
into one row of ``icegroup_heartbeats`` keyed by group and holder (see ``holder_of``). The Leader
reads the group's rows once per tick; a holder silent for longer than ``session_timeout_s`` is dead,
and its leases are re-granted (``iceberg/protocol/liveness.py``). This is Kafka's session timeout:
``lease_timeout_s`` stays the upper bound for a lease whose holder is alive but stuck.

Why here and not in Iceberg: a heartbeat is a few bytes that change every few seconds. As an Iceberg
commit it would write a metadata file, a manifest list and a snapshot each time, and in the
registry it would contend with every Leader's compare-and-swap. One row update in the catalog
database costs a single small SQL write and touches no Iceberg table. icegroup runs on SQL catalogs
only (the fence requirement is checked by pyiceberg's SQL catalog), so that database is always there.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from pyiceberg.catalog import Catalog
from pyiceberg.catalog.sql import SqlCatalog
from sqlalchemy import BigInteger, Column, Integer, MetaData, String, Table, delete, inspect, select, update
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError, SQLAlchemyError

from iceberg.errors import ConfigError

log = logging.getLogger(__name__)

METADATA = MetaData()
HEARTBEATS = Table(
    "icegroup_heartbeats",
    METADATA,
    Column("group_name", String(255), primary_key=True),
    Column("holder", String(255), primary_key=True),
    Column("beat_ms", BigInteger, nullable=False),
    Column("pid", Integer, nullable=False),
    Column("host", String(255), nullable=False),
)


@dataclass(frozen=True)
class Beat:
    """A holder's latest heartbeat."""

    holder: str
    beat_ms: int
    pid: int
    host: str


def _engine(catalog: Catalog) -> Engine:
    if not isinstance(catalog, SqlCatalog):
        raise ConfigError(f"catalog_uri: heartbeats need a SQL catalog; {type(catalog).__name__} is not one")
    engine: Engine = catalog.engine
    return engine


def ensure_table(catalog: Catalog) -> None:
    """Create the heartbeat table if it is missing; creating it at the same moment elsewhere is fine."""
    engine = _engine(catalog)
    try:
        METADATA.create_all(engine, tables=[HEARTBEATS], checkfirst=True)
    except SQLAlchemyError:
        METADATA.create_all(engine, tables=[HEARTBEATS], checkfirst=True)


def beat(catalog: Catalog, group: str, holder: str, now_ms: int | None = None) -> None:
    """Record that ``holder`` is alive now."""
    engine = _engine(catalog)
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    row = {"beat_ms": now_ms, "pid": os.getpid(), "host": socket.gethostname()}
    where = (HEARTBEATS.c.group_name == group) & (HEARTBEATS.c.holder == holder)
    with engine.begin() as connection:
        if connection.execute(update(HEARTBEATS).where(where).values(**row)).rowcount:
            return
    try:
        with engine.begin() as connection:
            connection.execute(HEARTBEATS.insert().values(group_name=group, holder=holder, **row))
    except IntegrityError:
        with engine.begin() as connection:
            connection.execute(update(HEARTBEATS).where(where).values(**row))


def read_beats(catalog: Catalog, group: str) -> dict[str, Beat]:
    """Every holder's latest heartbeat in ``group``: one query. Nobody has beaten before the table exists."""
    engine = _engine(catalog)
    query = select(HEARTBEATS).where(HEARTBEATS.c.group_name == group)
    try:
        with engine.connect() as connection:
            rows = connection.execute(query).mappings().all()
    except (OperationalError, ProgrammingError):
        if inspect(engine).has_table(HEARTBEATS.name):
            raise
        return {}
    return {r["holder"]: Beat(r["holder"], r["beat_ms"], r["pid"], r["host"]) for r in rows}


def forget(catalog: Catalog, group: str, holders: list[str]) -> None:
    """Remove holders' rows: a Borrower that ends cleanly, or the Leader pruning long-dead ones."""
    if not holders:
        return
    engine = _engine(catalog)
    where = (HEARTBEATS.c.group_name == group) & HEARTBEATS.c.holder.in_(holders)
    with engine.begin() as connection:
        connection.execute(delete(HEARTBEATS).where(where))


@contextmanager
def heartbeat(catalog: Catalog, group: str, holder: str, interval_s: float) -> Iterator[None]:
    """Beat for ``holder`` every ``interval_s`` on a daemon thread while the block runs.

    The first beat is written before the block starts, so the Leader sees the holder alive from its
    first lease on. A beat that fails (the database is briefly away) is logged and tried again at
    the next interval; if beats keep failing, the Leader re-grants the holder's leases after the
    session timeout, and fencing keeps the holder from committing them.
    """
    ensure_table(catalog)
    beat(catalog, group, holder)
    stop = threading.Event()

    def run() -> None:
        while not stop.wait(interval_s):
            try:
                beat(catalog, group, holder)
            except SQLAlchemyError as exc:
                log.warning(
                    "group %s: heartbeat of %s failed (%s); trying again in %.0fs", group, holder, exc, interval_s
                )

    thread = threading.Thread(target=run, name=f"icegroup-heartbeat-{holder}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=interval_s + 5)
        forget(catalog, group, [holder])
