"""The local REST catalog server (infra/rest_catalog) as pyiceberg sees it: data, 409s, credentials.

No Spark here: one server JVM over a SQLite catalog in a temporary folder for the module, and a second,
short-lived one whose tokens expire after a second. ``make jvm`` builds the server's jar.
"""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.catalog import Catalog, load_catalog
from pyiceberg.exceptions import BadRequestError, CommitFailedException, OAuthError, UnauthorizedError
from pyiceberg.table.update import AssertRefSnapshotId, AssertTableUUID, SetPropertiesUpdate

from icegroup.infra.rest_catalog import RestServer, start, stop, wait_ready

CLIENT_ID = "icegroup-test"
CLIENT_SECRET = "rest-secret-5f2c"
SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])


@dataclass(frozen=True)
class Running:
    """A started server: where it listens and where it logs."""

    settings: RestServer
    log: Path

    def catalog(self, warehouse: str | None = None, **auth: str) -> Catalog:
        """A pyiceberg RestCatalog on this server (the default warehouse unless named), signed in with ``auth``.

        By default through the client-credentials flow.
        """
        credentials = auth or {"credential": f"{CLIENT_ID}:{CLIENT_SECRET}"}
        named = {"warehouse": warehouse} if warehouse else {}
        return load_catalog(
            "lake",
            type="rest",
            uri=self.settings.url,
            **{"oauth2-server-uri": self.settings.tokens_url},
            **named,
            **credentials,
        )

    def token(self) -> str:
        """A token from the server's OAuth2 endpoint, as a client fetches it."""
        form = {"grant_type": "client_credentials", "client_id": CLIENT_ID, "client_secret": CLIENT_SECRET}
        data = urllib.parse.urlencode({**form, "scope": "catalog"}).encode()
        with urllib.request.urlopen(self.settings.tokens_url, data=data, timeout=10) as response:
            return str(json.load(response)["access_token"])


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def running(folder: Path, token_ttl_s: int = 3600, port: int | None = None) -> Iterator[Running]:
    """A server over the SQLite catalog in ``folder`` (made on first use), stopped on exit."""
    folder.mkdir(parents=True, exist_ok=True)
    settings = RestServer(
        jdbc_url=f"jdbc:sqlite:{folder / 'catalog.db'}",
        warehouse=str(folder / "warehouse"),
        port=port or free_port(),
        token_ttl_s=token_ttl_s,
    )
    log = folder / "server.log"
    process = start(settings, log, {"client_id": CLIENT_ID, "client_secret": CLIENT_SECRET})
    try:
        wait_ready(settings.url, 60, process, log)
        yield Running(settings, log)
    finally:
        stop(process)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    """The module's server: tokens live an hour."""
    with running(tmp_path_factory.mktemp("rest")) as started:
        yield started


@pytest.fixture(scope="module")
def catalog(server: Running) -> Catalog:
    """A pyiceberg catalog on the module's server, signed in with the client credentials."""
    return server.catalog()


def rows(*ids: int) -> pa.Table:
    return pa.Table.from_pylist([{"id": i, "name": f"n{i}"} for i in ids], schema=SCHEMA)


def test_a_table_written_through_the_server_reads_back(catalog: Catalog) -> None:
    catalog.create_namespace("trip")
    table = catalog.create_table("trip.events", schema=SCHEMA)
    table.append(rows(1, 2))
    table.append(rows(3))

    again = catalog.load_table("trip.events")
    assert sorted(again.scan().to_arrow().column("id").to_pylist()) == [1, 2, 3]
    assert catalog.list_tables("trip") == [("trip", "events")]
    assert len(again.snapshots()) == 2


def test_a_stale_ref_requirement_is_a_409_that_names_the_requirement(catalog: Catalog) -> None:
    catalog.create_namespace("stale")
    table = catalog.create_table("stale.events", schema=SCHEMA)
    table.append(rows(1))
    stale = table.current_snapshot()
    table.append(rows(2))
    head = catalog.load_table("stale.events").current_snapshot()
    assert stale is not None
    assert head is not None

    with pytest.raises(CommitFailedException) as failed:
        catalog.commit_table(
            table,
            requirements=(
                AssertTableUUID(uuid=table.metadata.table_uuid),
                AssertRefSnapshotId(ref="main", snapshot_id=stale.snapshot_id),
            ),
            updates=(SetPropertiesUpdate(updates={"fenced": "no"}),),
        )

    expected = f"Requirement failed: branch main has changed: expected id {stale.snapshot_id} != {head.snapshot_id}"
    assert expected in str(failed.value)
    after = catalog.load_table("stale.events")
    assert "fenced" not in after.properties
    assert after.current_snapshot() == head


def test_a_snapshot_added_on_a_stale_base_is_a_409_not_a_400(catalog: Catalog) -> None:
    # Two appends from the same base, sent without a ref requirement (as a staged snapshot is): the
    # server's TableMetadata refuses the second one's sequence number. That is a lost race.
    catalog.create_namespace("race")
    catalog.create_table("race.events", schema=SCHEMA).append(rows(1))
    first, second = catalog.load_table("race.events"), catalog.load_table("race.events")
    one, two = first.transaction(), second.transaction()
    one.append(rows(2))
    two.append(rows(3))
    uuid_only = (AssertTableUUID(uuid=first.metadata.table_uuid),)
    catalog.commit_table(first, requirements=uuid_only, updates=one._updates)

    with pytest.raises(CommitFailedException, match="Cannot add snapshot with sequence number 2 older than last"):
        catalog.commit_table(second, requirements=uuid_only, updates=two._updates)

    assert sorted(catalog.load_table("race.events").scan().to_arrow().column("id").to_pylist()) == [1, 2]


def test_each_named_warehouse_is_a_catalog_of_its_own(server: Running) -> None:
    """A client naming a warehouse is told its prefix, and sees only that warehouse's tables."""
    one, other = server.catalog(warehouse="one"), server.catalog(warehouse="other")
    one.create_namespace("shared")
    one.create_table("shared.events", schema=SCHEMA).append(rows(1))
    other.create_namespace("shared")
    other.create_table("shared.events", schema=SCHEMA)

    assert one.load_table("shared.events").scan().to_arrow().num_rows == 1
    assert other.load_table("shared.events").scan().to_arrow().num_rows == 0
    assert "/warehouse/one/" in one.load_table("shared.events").location() + "/"


def test_a_warehouse_name_that_is_not_a_plain_name_is_refused(server: Running) -> None:
    with pytest.raises(BadRequestError, match="Invalid warehouse /etc: use 1 to 64 letters"):
        server.catalog(warehouse="/etc")


def test_a_wrong_client_secret_is_refused_without_echoing_it(server: Running) -> None:
    wrong = "not-the-secret-81d3"

    with pytest.raises(OAuthError) as refused:
        server.catalog(credential=f"{CLIENT_ID}:{wrong}")

    assert str(refused.value).startswith("invalid_client: ")
    assert wrong not in str(refused.value)
    assert wrong not in server.log.read_text()


def test_an_expired_token_is_refused(tmp_path: Path) -> None:
    with running(tmp_path, token_ttl_s=1) as short_lived:
        token = short_lived.token()
        short_lived.catalog(token=token).list_namespaces()
        time.sleep(2.5)

        with pytest.raises(UnauthorizedError, match=r"^NotAuthorizedException: Bearer token expired \d+ s ago"):
            short_lived.catalog(token=token).list_namespaces()

        assert token not in short_lived.log.read_text()


def test_a_request_without_a_token_gets_401(server: Running) -> None:
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(server.settings.url + "/v1/namespaces", timeout=10)

    assert refused.value.code == 401
    error = json.loads(refused.value.read())["error"]
    assert error["type"] == "NotAuthorizedException"
    assert error["code"] == 401
    assert error["message"].startswith("Missing bearer token")


def test_config_advertises_the_served_routes_and_no_transactions(server: Running) -> None:
    request = urllib.request.Request(
        server.settings.url + "/v1/config", headers={"Authorization": f"Bearer {server.token()}"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        endpoints = json.load(response)["endpoints"]

    assert "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}" in endpoints
    assert "POST /v1/{prefix}/tables/rename" in endpoints
    assert "POST /v1/{prefix}/namespaces/{namespace}/views" in endpoints
    assert not [endpoint for endpoint in endpoints if "transactions" in endpoint]


def test_a_token_issued_before_a_restart_is_still_good_after_it(tmp_path: Path) -> None:
    """Tokens are signed, not kept in memory: a catalog that restarts does not log its clients out."""
    with running(tmp_path) as first:
        token = first.token()
        first.catalog(token=token).create_namespace("kept")
    with running(tmp_path, port=first.settings.port) as again:
        assert ("kept",) in again.catalog(token=token).list_namespaces()
        forged = token[:-4] + ("AAAA" if not token.endswith("AAAA") else "BBBB")
        with pytest.raises(UnauthorizedError, match="Bearer token unknown"):
            again.catalog(token=forged).list_namespaces()
