"""Heartbeats: a Borrower's sign of life, one row per holder in a SQL database, never an Iceberg commit.

A Borrower renews its hold while it works: every ``session_timeout_s / 3`` seconds it writes the time
into one row of ``icegroup_heartbeats`` keyed by group and holder (see ``holder_of``). The Leader
reads the group's rows once per tick; a holder silent for longer than ``session_timeout_s`` is dead,
and its leases are re-granted (``iceberg/protocol/liveness.py``). This is Kafka's session timeout:
``lease_timeout_s`` stays the upper bound for a lease whose holder is alive but stuck.

A beat also names its process on this kernel (``process_token``: boot id, pid namespace, pid and
start time). A Leader on the same machine, in the same pid namespace, can then tell a holder that
``kill -9`` ended from one that is merely quiet, and re-grant its leases at the next tick instead of
a session timeout later (``gone_holders``): the way a Kafka broker notices a consumer whose
connection closed without waiting for its session to run out. On another machine, or where
``/proc`` is missing, only the session timeout applies.

Why a database and not Iceberg: a heartbeat is a few bytes that change every few seconds. As an
Iceberg commit it would write a metadata file, a manifest list and a snapshot each time, and in the
registry it would contend with every Leader's compare-and-swap. One row update costs a single small
SQL write and touches no Iceberg table. On a SQL catalog the catalog's own database keeps the rows;
a REST catalog has no database icegroup may write to, so the lakehouse names one
(``heartbeats_uri``): a database every Leader and Borrower already reaches, such as the Dagster
instance's PostgreSQL. Not Dagster's own storage API: Borrowers write beats from ``spark_jobs``,
which never imports Dagster, and a beat must not wait on a Dagster event write.
"""

from __future__ import annotations

import logging
import os
import socket
import sqlite3
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from pyiceberg.catalog import Catalog
from pyiceberg.catalog.sql import SqlCatalog
from sqlalchemy import (
    BigInteger,
    Column,
    Integer,
    MetaData,
    String,
    Table,
    create_engine,
    delete,
    inspect,
    select,
    text,
    update,
)
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError, SQLAlchemyError

from icegroup.iceberg.errors import ConfigError
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.liveness import HEARTBEATS_URI, holder_of
from icegroup.iceberg.protocol.state import GroupState

log = logging.getLogger(__name__)

# Heartbeat rows of holders that hold nothing are dropped once this many session timeouts old.
PRUNE_AFTER_TIMEOUTS = 10

METADATA = MetaData()
HEARTBEATS = Table(
    "icegroup_heartbeats",
    METADATA,
    Column("group_name", String(255), primary_key=True),
    Column("holder", String(255), primary_key=True),
    Column("beat_ms", BigInteger, nullable=False),
    Column("pid", Integer, nullable=False),
    Column("host", String(255), nullable=False),
    Column("process", String(255), nullable=True),
)
PROC = Path("/proc")
# One engine (one connection pool) per heartbeat database a process uses, like the catalogs themselves.
_ENGINES: dict[str, Engine] = {}
_ENGINES_LOCK = threading.Lock()


@dataclass(frozen=True)
class Beat:
    """A holder's latest heartbeat."""

    holder: str
    beat_ms: int
    pid: int
    host: str
    process: str | None = None


def _kernel_scope() -> str | None:
    """This kernel boot and pid namespace: pids mean the same process only within one scope."""
    try:
        boot = (PROC / "sys" / "kernel" / "random" / "boot_id").read_text().strip()
        namespace = os.readlink(PROC / "self" / "ns" / "pid")
    except OSError:
        return None
    return f"{boot}/{namespace}"


def _start_time(pid: int) -> str | None:
    """When ``pid`` started, in clock ticks since boot (``/proc/PID/stat`` field 22); None if it is not running."""
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return fields[19] if len(fields) > 19 and fields[0] not in ("Z", "X") else None


def process_token(pid: int | None = None) -> str | None:
    """The process (this one by default) as ``scope/pid/start time``: a pid reused later gets another token."""
    pid = os.getpid() if pid is None else pid
    scope, started = _kernel_scope(), _start_time(pid)
    return None if scope is None or started is None else f"{scope}/{pid}/{started}"


def process_gone(token: str | None) -> bool:
    """Whether the process a beat names has verifiably ended: same kernel scope as ours, no such process now.

    A token from another machine or pid namespace, or none at all, is never judged here: the
    session timeout decides for those holders.
    """
    parts = token.rsplit("/", 2) if token else []
    if len(parts) != 3 or not parts[1].isdigit() or parts[0] != _kernel_scope():
        return False
    _, pid, started = parts
    return _start_time(int(pid)) != started


def gone_holders(beats: Mapping[str, Beat]) -> frozenset[str]:
    """Holders whose beating process has ended on this machine, though their last beat is recent."""
    return frozenset(holder for holder, b in beats.items() if process_gone(b.process))


def heartbeat_engine(catalog: Catalog) -> Engine:
    """The heartbeat database: the one the lakehouse names (``heartbeats_uri``), else a SQL catalog's own."""
    uri = catalog.properties.get(HEARTBEATS_URI)
    if uri:
        with _ENGINES_LOCK:
            engine = _ENGINES.get(uri)
            if engine is None:
                engine = _ENGINES[uri] = _open_engine(uri)
        return engine
    if not isinstance(catalog, SqlCatalog):
        raise ConfigError(
            f"heartbeats_uri: unset, and a {type(catalog).__name__} has no database of its own to keep heartbeats in"
        )
    sql_engine: Engine = catalog.engine
    return sql_engine


def _open_engine(uri: str) -> Engine:
    """An engine for a heartbeat database named by URL; a SQLite file gets WAL and a busy timeout, as a catalog does."""
    url = make_url(uri)
    if url.get_backend_name() == "sqlite" and url.database:
        Path(url.database).parent.mkdir(parents=True, exist_ok=True)
        with sqlite3.connect(url.database, timeout=30) as connection:
            connection.execute("PRAGMA journal_mode=WAL")
        return create_engine(url, connect_args={"timeout": 30}, pool_pre_ping=True)
    return create_engine(url, pool_pre_ping=True)


def ensure_table(catalog: Catalog) -> None:
    """Create the heartbeat table if it is missing, or add the ``process`` column to one made before it.

    Doing either at the same moment elsewhere is fine: the loser finds the table or column there.
    """
    engine = heartbeat_engine(catalog)
    try:
        METADATA.create_all(engine, tables=[HEARTBEATS], checkfirst=True)
    except SQLAlchemyError:
        METADATA.create_all(engine, tables=[HEARTBEATS], checkfirst=True)
    if not _has_process_column(engine):
        try:
            with engine.begin() as connection:
                connection.execute(text(f"ALTER TABLE {HEARTBEATS.name} ADD COLUMN process VARCHAR(255)"))
        except SQLAlchemyError:
            if not _has_process_column(engine):
                raise


def _has_process_column(engine: Engine) -> bool:
    return any(column["name"] == "process" for column in inspect(engine).get_columns(HEARTBEATS.name))


def beat(catalog: Catalog, group: str, holder: str, now_ms: int | None = None) -> None:
    """Record that ``holder`` is alive now."""
    engine = heartbeat_engine(catalog)
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    row = {"beat_ms": now_ms, "pid": os.getpid(), "host": socket.gethostname(), "process": process_token()}
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
    engine = heartbeat_engine(catalog)
    query = select(HEARTBEATS).where(HEARTBEATS.c.group_name == group)
    try:
        with engine.connect() as connection:
            rows = connection.execute(query).mappings().all()
    except (OperationalError, ProgrammingError):
        if not inspect(engine).has_table(HEARTBEATS.name):
            return {}
        if _has_process_column(engine):
            raise
        ensure_table(catalog)  # a table from before the process column: add it, then read again
        with engine.connect() as connection:
            rows = connection.execute(query).mappings().all()
    return {r["holder"]: Beat(r["holder"], r["beat_ms"], r["pid"], r["host"], r["process"]) for r in rows}


def forget(catalog: Catalog, group: str, holders: list[str]) -> None:
    """Remove holders' rows: a Borrower that ends cleanly, or the Leader pruning long-dead ones."""
    if not holders:
        return
    engine = heartbeat_engine(catalog)
    where = (HEARTBEATS.c.group_name == group) & HEARTBEATS.c.holder.in_(holders)
    with engine.begin() as connection:
        connection.execute(delete(HEARTBEATS).where(where))


@contextmanager
def heartbeat(
    catalog: Catalog, group: str, holder: str, interval_s: float, *, forget_at_end: bool = True
) -> Iterator[None]:
    """Beat for ``holder`` every ``interval_s`` on a daemon thread while the block runs.

    The first beat is written before the block starts, so the Leader sees the holder alive from its
    first lease on. A beat that fails (the database is briefly away, the first one included) is
    logged and tried again at the next interval: a holder that never beat is judged by its run's
    state and deadline, and if beats keep failing, the Leader re-grants the holder's leases after
    the session timeout, and fencing keeps the holder from committing them.

    At the end the row is removed, so a missing row tells a reset's waiter that its holder stopped
    (``judge_holder``). A warm Borrower keeps it instead (``forget_at_end=False``) with one last beat:
    its Dagster run ends a moment after the block, and a run with no row would look like one that
    never beat, which the Leader ends once two session timeouts have passed since its start. The
    Leader prunes the row once it is long silent and its holder holds nothing.
    """
    stop = threading.Event()
    made: list[bool] = []

    def beat_or_say() -> None:
        try:
            if not made:
                ensure_table(catalog)
                made.append(True)
            beat(catalog, group, holder)
        except SQLAlchemyError as exc:
            log.warning("group %s: heartbeat of %s failed (%s); trying again in %.0fs", group, holder, exc, interval_s)

    beat_or_say()

    def run() -> None:
        while not stop.wait(interval_s):
            beat_or_say()

    thread = threading.Thread(target=run, name=f"icegroup-heartbeat-{holder}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=interval_s + 5)
        if forget_at_end:
            try:
                forget(catalog, group, [holder])
            except SQLAlchemyError as exc:
                # The row stays; it falls silent, and the Leader prunes it once it is long dead.
                log.warning("group %s: the heartbeat row of %s was not removed (%s)", group, holder, exc)
        else:
            beat_or_say()


def beats_of_holders(
    catalog: Catalog, group: GroupConfig, state: GroupState, now_ms: int
) -> tuple[dict[str, int], frozenset[str]]:
    """For a tick: each holder's last heartbeat, and the holders whose process ended on this machine (``gone_holders``).

    Rows of holders long silent and holding nothing are pruned.
    """
    beats = read_beats(catalog, group.name)
    holding = {holder_of(lease) for lease in state.leases.values()} | {t.holder for t in state.replays.values()}
    stale = [
        h
        for h, b in beats.items()
        if h not in holding and now_ms - b.beat_ms > PRUNE_AFTER_TIMEOUTS * 1000 * group.session_timeout_s
    ]
    forget(catalog, group.name, stale)
    return {holder: b.beat_ms for holder, b in beats.items()}, gone_holders(beats)
