"""A REST catalog that refuses the credential stops ``icegroup`` at once: exit 2, the catalog and the setting named.

No Spark: the refusal comes when the catalog is opened, before any run, JVM or commit.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from icegroup.dagster_project.cli import Exit
from icegroup.iceberg.config.rest import ENV_CREDENTIAL, ENV_TOKEN
from icegroup.iceberg.store.registry import registry_identifier
from tests.conftest import repo_root
from tests.factories import MakeGroup, append_batches, create_source
from tests.integration.test_rest_server import running
from tests.rest.helpers import CATALOG_NAME, CLIENT_ID, ICEGROUP, REST, RestLake, RestServerProcess, server_kind

# Only icegroup's own server checks a credential; Iceberg's REST fixture takes any request.
pytestmark = [
    *REST,
    pytest.mark.skipif(server_kind() != "icegroup", reason="the server under test checks no credential"),
]


def refused_line(url: str) -> str:
    """How ``icegroup`` starts its message when the catalog refuses the credential."""
    return f"icegroup: error: rest: catalog {CATALOG_NAME!r} at {url} refused the credential ("


def test_a_wrong_credential_exits_2_naming_the_catalog_and_the_setting_and_commits_nothing(
    rest_server: RestServerProcess, rest_lake: RestLake, make_group: MakeGroup
) -> None:
    catalog = rest_lake.catalog()
    group = make_group()
    append_batches(create_source(catalog, group.source), 2, 50)
    source_snapshots = len(catalog.load_table(group.source).snapshots())
    wrong = "not-the-secret-6e1a"

    done = subprocess.run(
        [ICEGROUP, "--groups", str(rest_lake.groups_file(group)), "consume", group.name],
        cwd=repo_root(), env=rest_lake.env(**{ENV_CREDENTIAL: f"{CLIENT_ID}:{wrong}"}),
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip

    assert done.returncode == Exit.ERROR, done.stdout + done.stderr
    assert done.stderr.startswith(refused_line(rest_lake.url)), done.stderr
    assert ENV_CREDENTIAL in done.stderr
    assert wrong not in done.stdout + done.stderr
    assert wrong not in rest_server.log.read_text()
    after = rest_lake.catalog()
    assert not after.table_exists(registry_identifier(group.name)), "no registry was created"
    assert not after.table_exists(group.sink), "no sink was created"
    assert len(after.load_table(group.source).snapshots()) == source_snapshots
    assert not (rest_lake.folder / "heartbeats.db").exists(), "no heartbeat was written"


def test_an_expired_token_exits_2_naming_the_catalog_and_the_setting_and_commits_nothing(
    rest_lake: RestLake, make_group: MakeGroup, tmp_path: Path
) -> None:
    with running(tmp_path / "short-lived", token_ttl_s=1) as short:
        lake = RestLake(short.settings.url, rest_lake.folder, rest_lake.warehouse)
        lake.write_config()
        catalog = short.catalog(warehouse=lake.warehouse)
        group = make_group()
        append_batches(create_source(catalog, group.source), 1, 50)
        token = short.token()
        short.catalog(warehouse=lake.warehouse, token=token).list_namespaces()
        time.sleep(2.5)

        done = subprocess.run(
            [ICEGROUP, "--groups", str(lake.groups_file(group)), "consume", group.name],
            cwd=repo_root(), env=lake.env(**{ENV_CREDENTIAL: None, ENV_TOKEN: token}),
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip

        assert done.returncode == Exit.ERROR, done.stdout + done.stderr
        assert done.stderr.startswith(refused_line(short.settings.url)), done.stderr
        assert "Bearer token expired" in done.stderr
        assert ENV_TOKEN in done.stderr
        assert token not in done.stdout + done.stderr
        assert token not in short.log.read_text()
        after = short.catalog(warehouse=lake.warehouse)
        assert not after.table_exists(registry_identifier(group.name)), "no registry was created"
        assert not after.table_exists(group.sink), "no sink was created"


def test_no_credential_at_all_exits_2_saying_none_was_given(rest_lake: RestLake, make_group: MakeGroup) -> None:
    group = make_group()

    done = subprocess.run(
        [ICEGROUP, "--groups", str(rest_lake.groups_file(group)), "list"],
        cwd=repo_root(), env=rest_lake.env(**{ENV_CREDENTIAL: None, ENV_TOKEN: None}),
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip

    assert done.returncode == Exit.ERROR, done.stdout + done.stderr
    assert "wants a credential, and none was given" in done.stderr, done.stderr
    assert ENV_CREDENTIAL in done.stderr
    assert ENV_TOKEN in done.stderr
    assert "refused the credential" not in done.stderr, "nothing was refused: nothing was sent"
