"""The REST tier's server and lakehouses: a local Iceberg REST catalog and a warehouse per test.

``ICEGROUP_TEST_REST_SERVER`` picks the server: ``icegroup`` (the default: ``infra/rest_catalog``,
signed in to with a client id and secret, a catalog per named warehouse, so each test gets a
warehouse of its own) or ``fixture`` (Iceberg's REST test fixture: no credential, one catalog, so
tests keep apart by their namespaces). Either runs over a SQLite catalog file in a temporary folder.
Each test gets a lakehouse YAML (``rest: {uri, warehouse}``, heartbeats in a SQLite file of the
test's) and the environment an ``icegroup`` process needs, the credential only in
``ICEGROUP_REST_CREDENTIAL``. ``RestServerProcess.restart`` stops the server and starts it again on
the same files and port.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from pyiceberg.catalog import Catalog, load_catalog

from icegroup.iceberg.config.lakehouse import ENV_CONFIG, ENV_HOME, LakehouseConfig, load_lakehouse
from icegroup.iceberg.config.rest import ENV_CREDENTIAL
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.infra import rest_fixture
from icegroup.infra.rest_catalog import SERVER_JAR, RestServer, start, stop, wait_ready
from tests.factories import write_groups
from tests.integration.test_rest_server import free_port

CLIENT_ID = "icegroup-rest-tier"
CLIENT_SECRET = "rest-tier-secret-3b9e"
CREDENTIAL = f"{CLIENT_ID}:{CLIENT_SECRET}"
CATALOG_NAME = "rest"
ICEGROUP = str(Path(sys.executable).with_name("icegroup"))
ENV_SERVER = "ICEGROUP_TEST_REST_SERVER"
SERVERS = ("icegroup", "fixture")


def server_kind() -> str:
    """The server the tier runs on (``ICEGROUP_TEST_REST_SERVER``), checked."""
    kind = os.environ.get(ENV_SERVER) or "icegroup"
    if kind not in SERVERS:
        raise pytest.UsageError(f"{ENV_SERVER}={kind!r}: the REST tier runs on {' or '.join(SERVERS)}")
    return kind


# Every module of the tier: it talks to the REST server, whose jar `make jvm` builds.
REST = [
    pytest.mark.rest,
    pytest.mark.skipif(not SERVER_JAR.is_file(), reason=f"{SERVER_JAR.name} is not built; run `make jvm`"),
]


class RestServerProcess:
    """The session's server: started, stopped and started again on the same catalog file and port."""

    def __init__(self, folder: Path, kind: str = "icegroup") -> None:
        """A server (not started yet) over ``folder``'s ``catalog.db`` and ``warehouse/``, on a free port."""
        self.kind = kind
        self.settings = RestServer(
            jdbc_url=f"jdbc:sqlite:{folder / 'catalog.db'}",
            warehouse=str(folder / "warehouse"),
            port=free_port(),
            catalog_name=CATALOG_NAME,
        )
        self.fixture = rest_fixture.FixtureServer(
            jdbc_url=self.settings.jdbc_url, warehouse=self.settings.warehouse, port=self.settings.port
        )
        self.log = folder / "server.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The catalog's base URI."""
        return self.settings.url

    @property
    def signs_in(self) -> bool:
        """Whether the server checks a client credential (icegroup's does; the fixture takes any request)."""
        return self.kind == "icegroup"

    def start(self) -> None:
        """Start it (its log appended to) and wait until it answers."""
        if self.kind == "fixture":
            with self.log.open("ab") as out:
                self.process = subprocess.Popen(
                    rest_fixture.command(),
                    env=rest_fixture.server_env(self.fixture),
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
        else:
            self.process = start(self.settings, self.log, {"client_id": CLIENT_ID, "client_secret": CLIENT_SECRET})
        wait_ready(self.url, 60, self.process, self.log)

    def stop(self, sig: signal.Signals = signal.SIGTERM) -> int | None:
        """Stop it with ``sig`` (SIGTERM: it closes its catalog; SIGKILL: it just dies); its exit code."""
        if self.process is None:
            return None
        process, self.process = self.process, None
        if sig == signal.SIGTERM:
            return stop(process)
        process.send_signal(sig)
        return process.wait(30)

    def restart(self, down_s: float, sig: signal.Signals = signal.SIGTERM) -> int | None:
        """Stop it, leave it down ``down_s`` seconds, start it again; the stopped server's exit code."""
        code = self.stop(sig)
        time.sleep(down_s)
        self.start()
        return code

    def requests_since(self, offset: int) -> list[str]:
        """The server's log lines after byte ``offset`` (one per request: method, path, status, ms)."""
        return self.log.read_bytes()[offset:].decode(errors="replace").splitlines()


@dataclass(frozen=True)
class RestLake:
    """A test's lakehouse on a REST server at ``url``: its warehouse there, its files, and how to reach it."""

    url: str
    folder: Path
    warehouse: str | None
    signs_in: bool = True

    @property
    def config_file(self) -> Path:
        """The lakehouse YAML: the REST catalog, its warehouse, heartbeats in a SQLite file; no secret."""
        return self.folder / "lakehouse.yaml"

    def write_config(self) -> None:
        """Write the lakehouse YAML."""
        config = {
            "catalog_name": CATALOG_NAME,
            "rest": {"uri": self.url, **({"warehouse": self.warehouse} if self.warehouse else {})},
            "heartbeats_uri": f"sqlite:///{self.folder / 'heartbeats.db'}",
            "spark_master": "local[2]",
        }
        self.config_file.write_text(yaml.safe_dump(config, sort_keys=False))

    def env(self, **overrides: str | None) -> dict[str, str]:
        """The environment of an ``icegroup`` process on this lakehouse, the right credential included.

        It is this process's environment without icegroup's and pyiceberg's variables, plus the
        lakehouse file, a home and a Dagster instance of the test's own, and ``ICEGROUP_REST_CREDENTIAL``.
        ``overrides`` set (or, given None, remove) further variables: a wrong credential, fail points.
        """
        env = {key: value for key, value in os.environ.items() if not key.startswith(("ICEGROUP_", "PYICEBERG_"))}
        env.update(
            {
                ENV_HOME: str(self.folder / "home"),
                ENV_CONFIG: str(self.config_file),
                "DAGSTER_HOME": str(self.folder / "dagster"),
            }
        )
        if self.signs_in:
            env[ENV_CREDENTIAL] = CREDENTIAL
        for key, value in overrides.items():
            if value is None:
                env.pop(key, None)
            else:
                env[key] = value
        return env

    def lakehouse(self) -> LakehouseConfig:
        """The lakehouse as an ``icegroup`` process loads it."""
        return load_lakehouse(env=self.env())

    def catalog(self) -> Catalog:
        """A new pyiceberg RestCatalog on this warehouse, signed in now with the right credential.

        Not the process's cached one (``LakehouseConfig.catalog``), so a check shares no session with
        the code it checks, and signs in afresh after a server restart.
        """
        lakehouse = self.lakehouse()
        return load_catalog(lakehouse.catalog_name, **lakehouse.rest_properties(self.env()))

    def groups_file(self, *groups: GroupConfig) -> Path:
        """The groups as a YAML file for ``icegroup --groups``."""
        return write_groups(self.folder / "groups.yaml", *groups)
