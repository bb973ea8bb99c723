"""The lakehouse a test uses: the embedded default, or under ``make test-stack`` the scale-out stack.

``make test-stack`` sources ``.stack/env`` (``ICEGROUP_LAKEHOUSE``: the REST catalog and the Spark
master; the REST credential) and sets ``ICEGROUP_TEST_STACK`` to the stack's folder.
The run then gets a heartbeat database of its own (``pytest_configure``), and every test folder that
is an ``ICEGROUP_HOME`` gets a REST warehouse of its own, as each has its own SQLite file on the
embedded default. Off the stack, ``home_env`` is just ``ICEGROUP_HOME``, as before.
"""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import pytest
import yaml

import icegroup.infra.stack
from icegroup.infra.postgres import LocalPostgres
from icegroup.infra.stack_layout import ENV_STACK_CATALOG, Layout, dagster_config

ENV_TEST_STACK = "ICEGROUP_TEST_STACK"
PASSED_ON = ("ICEGROUP_LAKEHOUSE", "ICEGROUP_HEARTBEATS_URI", "ICEGROUP_REST_CREDENTIAL", "ICEGROUP_STACK_CATALOG")


def on_stack() -> bool:
    """Whether this run targets the stack (``make test-stack``)."""
    return bool(os.environ.get(ENV_TEST_STACK))


def stack_layout() -> Layout:
    """The running stack's layout."""
    return Layout(folder=Path(os.environ[ENV_TEST_STACK]), catalog=os.environ.get(ENV_STACK_CATALOG) or "icegroup")


def stack_postgres() -> LocalPostgres:
    """The stack's PostgreSQL, to make and drop the run's scratch databases."""
    return icegroup.infra.stack.stack_postgres(stack_layout())


_SCRATCH: list[str] = []


def scratch_database(prefix: str) -> str:
    """A new, empty database in the stack's PostgreSQL, dropped by ``drop_scratch_databases``; returns its name."""
    name = f"{prefix}_{time.strftime('%Y%m%d%H%M%S')}_{os.getpid()}_{time.monotonic_ns() % 10**6}"
    stack_postgres().create_database(name)
    _SCRATCH.append(name)
    return name


def drop_scratch_databases() -> None:
    """Drop the databases this process made, so runs do not pile them up in the stack's kept data."""
    postgres = stack_postgres()
    while _SCRATCH:
        postgres.drop_database(_SCRATCH.pop())


ENV_ICEBERG_VERSION = "ICEGROUP_ICEBERG_VERSION"


def home_env(home: Path) -> dict[str, str]:
    """The ``ICEGROUP_*`` variables that make ``home`` a lakehouse of its own, on either stack."""
    env = {"ICEGROUP_HOME": str(home)}
    if os.environ.get(ENV_ICEBERG_VERSION):  # the matrix tier's pair (make test-matrix)
        env[ENV_ICEBERG_VERSION] = os.environ[ENV_ICEBERG_VERSION]
    if on_stack():
        env.update({key: os.environ[key] for key in PASSED_ON if os.environ.get(key)})
        if stack_layout().catalog == "icegroup":  # a catalog per warehouse name; the others serve one catalog
            env["ICEGROUP_REST_WAREHOUSE"] = "h" + hashlib.sha256(str(home.resolve()).encode()).hexdigest()[:12]
    return env


def write_instance_config(dagster_home: Path, fallback: Path) -> None:
    """A Dagster instance: on the stack in a new PostgreSQL database, else the repo's ``fallback`` config."""
    dagster_home.mkdir(parents=True, exist_ok=True)
    if not on_stack():
        (dagster_home / "dagster.yaml").write_text(fallback.read_text())
        return
    config = dagster_config(stack_layout())
    config["storage"]["postgres"]["postgres_db"]["db_name"] = scratch_database("dagster_test")  # type: ignore[index]
    (dagster_home / "dagster.yaml").write_text(yaml.safe_dump(config, sort_keys=False))


def use_home(monkeypatch: pytest.MonkeyPatch, home: Path) -> None:
    """Point this test's in-process ``icegroup`` commands at the lakehouse of ``home``."""
    for key, value in home_env(home).items():
        monkeypatch.setenv(key, value)
