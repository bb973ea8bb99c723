"""The three REST servers the tier probes side by side: icegroup's own, Iceberg's REST fixture and Project Nessie.

Each is started here on free ports over files of a temporary folder: icegroup's and the fixture over a
SQLite catalog and a local warehouse, Nessie over a RocksDB store with its warehouse in an S3 server
(moto) started beside it, since Nessie takes no local warehouse. ``Probed`` is a table on one of
them, reached by pyiceberg and by raw requests with the same sign-in.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import requests
from pyiceberg.catalog import Catalog, load_catalog
from pyiceberg.io import load_file_io
from pyiceberg.table import Table

from icegroup.infra import nessie, rest_fixture
from icegroup.infra.processes import http_ok, wait_for
from icegroup.infra.rest_catalog import RestServer, stop, wait_ready
from icegroup.infra.rest_catalog import start as start_icegroup_server
from tests.integration.test_rest_server import free_port

CLIENT_ID = "probe"
CLIENT_SECRET = "probe-secret-91c4"
S3_KEYS = {"AWS_ACCESS_KEY_ID": "probe", "AWS_SECRET_ACCESS_KEY": "probe", "AWS_REGION": "us-east-1"}
BUCKET = "probe"
SCHEMA = pa.schema([("id", pa.int64())])


@dataclass
class Server:
    """A started server: how clients reach it, and how to stop it."""

    kind: str
    url: str
    properties: dict[str, str]
    log: Path
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    s3: dict[str, str] = field(default_factory=dict)

    def catalog(self) -> Catalog:
        """A pyiceberg RestCatalog on it."""
        return load_catalog(self.kind, **self.properties, **self.s3)

    def table(self, catalog: Catalog, identifier: str) -> Table:
        """``identifier``, writing its files with pyarrow's FileIO even where the server names another.

        Nessie hands clients ``py-io-impl=FsspecFileIO``, which needs s3fs; icegroup does not install it.
        """
        table = catalog.load_table(identifier)
        if self.s3:
            table.io = load_file_io({**self.s3, "py-io-impl": "pyiceberg.io.pyarrow.PyArrowFileIO"})
        return table


def popen(command: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """A server process in its own session, its output in ``log``."""
    with log.open("ab") as out:
        return subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


@contextmanager
def icegroup_server(folder: Path) -> Iterator[Server]:
    """The stack's own server (infra/rest_catalog) over SQLite, signed in to with a client credential."""
    settings = RestServer(jdbc_url=f"jdbc:sqlite:{folder / 'catalog.db'}", warehouse=str(folder), port=free_port())
    log = folder / "server.log"
    process = start_icegroup_server(settings, log, {"client_id": CLIENT_ID, "client_secret": CLIENT_SECRET})
    try:
        wait_ready(settings.url, 60, process, log)
        credential = {"credential": f"{CLIENT_ID}:{CLIENT_SECRET}", "oauth2-server-uri": settings.tokens_url}
        yield Server("icegroup", settings.url, {"type": "rest", "uri": settings.url, **credential}, log, [process])
    finally:
        stop(process)


@contextmanager
def fixture_server(folder: Path) -> Iterator[Server]:
    """Iceberg's REST test fixture over SQLite and a local warehouse."""
    settings = rest_fixture.FixtureServer(
        jdbc_url=f"jdbc:sqlite:{folder / 'catalog.db'}", warehouse=str(folder / "warehouse"), port=free_port()
    )
    log = folder / "server.log"
    process = popen(rest_fixture.command(), rest_fixture.server_env(settings), log)
    try:
        wait_ready(settings.url, 60, process, log)
        yield Server("fixture", settings.url, {"type": "rest", "uri": settings.url}, log, [process])
    finally:
        stop(process)


@contextmanager
def nessie_server(folder: Path) -> Iterator[Server]:
    """Project Nessie over RocksDB, its warehouse in a moto S3 server of its own."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("AWS_")} | S3_KEYS
    s3_port = free_port()
    endpoint = f"http://127.0.0.1:{s3_port}"
    log = folder / "server.log"
    with ExitStack() as stack:
        moto_server = str(Path(sys.executable).with_name("moto_server"))
        moto = popen([moto_server, "-H", "127.0.0.1", "-p", str(s3_port)], env, log)
        stack.callback(stop, moto)
        wait_for("the S3 server", lambda: http_ok(f"{endpoint}/moto-api/"), 60, str(log))
        requests.put(f"{endpoint}/{BUCKET}", timeout=10).raise_for_status()
        settings = nessie.NessieServer(
            store=folder / "rocks",
            s3_endpoint=endpoint,
            warehouse=f"s3://{BUCKET}/",
            port=free_port(),
            management_port=free_port(),
        )
        process = popen(settings.command(nessie.find_java(), nessie.fetch_jar()), env, log)
        stack.callback(stop, process)
        wait_ready(settings.url, 120, process, log)
        s3 = {
            "s3.endpoint": endpoint,
            "s3.access-key-id": S3_KEYS["AWS_ACCESS_KEY_ID"],
            "s3.secret-access-key": S3_KEYS["AWS_SECRET_ACCESS_KEY"],
            "s3.region": S3_KEYS["AWS_REGION"],
            "s3.force-virtual-addressing": "false",
        }
        properties = {"type": "rest", "uri": settings.url, "warehouse": "warehouse"}
        yield Server("nessie", settings.url, properties, log, [moto, process], s3)


STARTERS = {"icegroup": icegroup_server, "fixture": fixture_server, "nessie": nessie_server}


@dataclass(frozen=True)
class Probed:
    """A table of two appends on one server, and a raw HTTP session signed in as the catalog is."""

    server: Server
    catalog: Catalog
    identifier: str
    first: int
    second: int

    @property
    def session(self) -> requests.Session:
        """The catalog's own HTTP session: its sign-in headers included."""
        return self.catalog._session  # type: ignore[attr-defined]

    def table_url(self) -> str:
        """``POST`` here commits to the table."""
        namespace, name = self.identifier.split(".")
        return f"{self.base()}/namespaces/{namespace}/tables/{name}"

    def base(self) -> str:
        """The server's ``/v1`` URL with the prefix its ``/v1/config`` named."""
        prefix = self.catalog.properties.get("prefix")
        return f"{self.server.url}/v1" + (f"/{prefix}" if prefix else "")

    def commit(self, requirements: list[dict[str, Any]], updates: list[dict[str, Any]]) -> requests.Response:
        """A raw table commit, as a client sends one."""
        body = {"requirements": requirements, "updates": updates}
        return self.session.post(self.table_url(), json=body, timeout=30)


def probed_table(server: Server, namespace: str) -> Probed:
    """A new table on ``server`` with two appends of one row each."""
    catalog = server.catalog()
    catalog.create_namespace(namespace)
    identifier = f"{namespace}.t"
    catalog.create_table(identifier, schema=SCHEMA)
    snapshots = []
    for value in (1, 2):
        table = server.table(catalog, identifier)
        table.append(pa.Table.from_pylist([{"id": value}], schema=SCHEMA))
        snapshots.append(table.metadata.current_snapshot_id)
    first, second = snapshots
    assert first is not None
    assert second is not None
    return Probed(server, catalog, identifier, first, second)
