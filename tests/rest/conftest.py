"""The REST tier's fixtures: one REST catalog server for the session, and a warehouse of its own per test."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.rest.helpers import RestLake, RestServerProcess, server_kind


@pytest.fixture(scope="session")
def rest_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RestServerProcess]:
    """The session's REST catalog server, stopped at the end (also when a test left it down)."""
    server = RestServerProcess(tmp_path_factory.mktemp("rest-server"), server_kind())
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def rest_lake(
    rest_server: RestServerProcess, tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> RestLake:
    """A warehouse of this test's own on the session's server; in-process icegroup code signs in with the credential."""
    # A warehouse of the test's own where the server makes a catalog per name; else the namespaces keep tests apart.
    warehouse = "w" + hashlib.sha256(request.node.nodeid.encode()).hexdigest()[:12] if rest_server.signs_in else None
    lake = RestLake(rest_server.url, tmp_path, warehouse, rest_server.signs_in)
    (tmp_path / "home").mkdir()
    (tmp_path / "dagster").mkdir()
    lake.write_config()
    for key in [key for key in os.environ if key.startswith(("ICEGROUP_", "PYICEBERG_"))]:
        monkeypatch.delenv(key)
    for key, value in lake.env().items():
        if key.startswith("ICEGROUP_") or key == "DAGSTER_HOME":
            monkeypatch.setenv(key, value)
    return lake
