"""Shared fixtures: a throw-away lakehouse per test session."""

from __future__ import annotations

import itertools
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.catalog import Catalog

from icegroup.dagster_project.group_files import DEFAULT_GROUPS
from icegroup.iceberg.config.lakehouse import LakehouseConfig, load_lakehouse
from icegroup.iceberg.config.search import ENV_GROUPS
from icegroup.iceberg.protocol.group import GroupConfig
from tests import factories
from tests.factories import MakeDeadLetter, MakeGroup, MakeLease, MakeShard
from tests.stack_env import drop_scratch_databases, home_env, on_stack, scratch_database, stack_layout

_names = itertools.count()


def pytest_configure(config: pytest.Config) -> None:
    """The checkout's groups, as the Makefile and the venv's activate script set them; a stack run's heartbeats DB.

    Under ``make test-stack``, the run gets a heartbeat database of its own in the stack's PostgreSQL.
    """
    os.environ.setdefault(ENV_GROUPS, str(DEFAULT_GROUPS))
    if on_stack():
        layout = stack_layout()
        os.environ["ICEGROUP_HEARTBEATS_URI"] = layout.catalog_uri(scratch_database("heartbeats_test"))


@pytest.fixture(autouse=True)
def _empty_shared_catalog() -> None:
    """On a stack whose server serves one catalog (the fixture, Nessie), each test starts with it empty.

    Elsewhere each test's home has a catalog of its own (a SQLite file, or a REST warehouse name on
    icegroup's server); tests that name their tables alike (``chaos.events``) need that.
    """
    if on_stack() and stack_layout().catalog != "icegroup":
        empty_catalog(load_lakehouse().catalog())


def empty_catalog(catalog: Catalog) -> None:
    """Drop every table and namespace of ``catalog`` (their files stay: the warehouse is a test's)."""
    for namespace in catalog.list_namespaces():
        for table in catalog.list_tables(namespace):
            catalog.drop_table(table)
        catalog.drop_namespace(namespace)


def pytest_unconfigure(config: pytest.Config) -> None:
    """Under ``make test-stack``, drop the run's scratch databases (heartbeats and the Dagster instances)."""
    if on_stack():
        drop_scratch_databases()


@pytest.fixture(autouse=True)
def _no_jvm_outside_the_spark_tier(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test not marked ``spark`` that found no JVM in its process leaves none: else it fails, naming itself.

    The first JVM of a process keeps the packages it started with (``_spark_starts_through_its_fixture``
    in tests/integration). A test that starts one through the product (a Borrower op, an in-process
    ``consume`` with work) without the marker would leave a later Spark test on its worker without the
    jars its fixture adds: a failure elsewhere, in some runs only. Failing here points at the cause.
    """
    before = jvm_running()
    yield
    if before or request.node.get_closest_marker("spark"):
        return
    for thread in threading.enumerate():
        if thread.name == "spark-start":  # spark_jobs.session.start_in_background's thread
            thread.join(timeout=300)
    if jvm_running():
        pytest.fail(
            f"{request.node.nodeid} started Spark in the test process: in tests/integration mark it spark "
            "(pytest.mark.spark), so that it gets the session's fixture first; elsewhere keep Spark out of the "
            "process (stub the consume's early boots, as tests/unit/cli/test_cli_exit_codes.py does)"
        )


def jvm_running() -> bool:
    """Whether this process has started pyspark's JVM (pyspark keeps it for the process's life)."""
    context = sys.modules.get("pyspark.context")
    return context is not None and context.SparkContext._gateway is not None


@pytest.fixture(scope="session")
def lake_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder whose .lake/ holds the session's catalog and warehouse."""
    return tmp_path_factory.mktemp("lakehome")


@pytest.fixture(scope="session")
def lakehouse(lake_home: Path) -> LakehouseConfig:
    """An embedded lakehouse (SQLite catalog, local warehouse) in a temporary folder; under test-stack, the stack's."""
    return load_lakehouse(env=home_env(lake_home))


@pytest.fixture
def catalog(lakehouse: LakehouseConfig) -> Catalog:
    """The pyiceberg catalog of the session's lakehouse (one per process, as in the product)."""
    return lakehouse.catalog()


@pytest.fixture
def ns() -> str:
    """A namespace of its own for each test, so tests never see each other's tables."""
    return f"t{next(_names)}"


@pytest.fixture
def make_group(ns: str) -> MakeGroup:
    """Build a GroupConfig for this test's namespace with overrides.

    Its Leader keeps no warm Borrower up (``warm_borrowers: 0``) unless a test asks for one: the
    tests evaluate the sensor with no daemon to run what it requests, and judge the runs it starts
    for work.
    """

    def build(**overrides: Any) -> GroupConfig:
        fields: dict[str, object] = {
            "name": f"g_{ns}",
            "source": f"{ns}.events",
            "sink": f"{ns}.events_out",
            "transform": "icegroup.spark_jobs.transforms:identity",
            "warm_borrowers": 0,
        }
        fields.update(overrides)
        return GroupConfig.model_validate(fields)

    return build


@pytest.fixture
def make_shard() -> MakeShard:
    """Build a Shard from defaults with overrides: ``make_shard(2, stream="a", rows=0)``."""
    return factories.shard


@pytest.fixture
def make_lease() -> MakeLease:
    """Build a Lease of the given shards from defaults with overrides: ``make_lease(["a1"], streams=["a"])``."""
    return factories.lease


@pytest.fixture
def make_dead_letter() -> MakeDeadLetter:
    """Build a DeadLetter from defaults with overrides: ``make_dead_letter("s1", PARKED, at_ms=2_000)``."""
    return factories.dead_letter


def repo_root() -> Path:
    """The checkout the tests run from."""
    return Path(__file__).resolve().parents[1]
