"""How REST catalog servers differ where icegroup depends on them, found by running against each one.

``EXPECTED`` is the verified half of the table in ``docs/how-to/rest-catalog.md``; the last test
checks that the page says what these probes found. On Nessie, ``icegroup consume`` must stop before
it reads or writes anything, naming why (``iceberg/protocol/table_history.py``).
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from icegroup.dagster_project.cli import Exit
from icegroup.iceberg.config.lakehouse import ENV_CONFIG, ENV_HOME
from icegroup.infra.rest_catalog import SERVER_JAR
from tests.conftest import repo_root
from tests.factories import MakeGroup, write_groups
from tests.rest.catalog_servers import S3_KEYS, STARTERS, Probed, Server, probed_table
from tests.rest.helpers import ICEGROUP

pytestmark = [
    pytest.mark.rest,
    pytest.mark.skipif(not SERVER_JAR.is_file(), reason=f"{SERVER_JAR.name} is not built; run `make jvm`"),
]

# What each server did, as the docs' table shows it (a status code, or yes/no).
EXPECTED: dict[str, dict[str, str]] = {
    "snapshot history kept in the table's metadata": {"icegroup": "yes", "fixture": "yes", "nessie": "no"},
    "stale `assert-ref-snapshot-id` (a failed requirement)": {"icegroup": "409", "fixture": "409", "nessie": "409"},
    "null `assert-ref-snapshot-id` while main exists": {"icegroup": "409", "fixture": "409", "nessie": "409"},
    "`add-snapshot` with a used sequence number (a lost race)": {"icegroup": "409", "fixture": "400", "nessie": "200"},
    "a table branch with retention (`set-snapshot-ref`)": {"icegroup": "yes", "fixture": "yes", "nessie": "no"},
    "`POST /v1/{prefix}/transactions/commit`": {"icegroup": "404", "fixture": "200", "nessie": "204"},
    "advertises `Idempotency-Key` (`idempotency-key-lifetime`)": {"icegroup": "no", "fixture": "no", "nessie": "no"},
}
DOCS = repo_root() / "docs" / "how-to" / "rest-catalog.md"


@pytest.fixture(scope="module", params=sorted(STARTERS))
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """Each server in turn, for the module."""
    with STARTERS[request.param](tmp_path_factory.mktemp(request.param)) as started:
        yield started


def yes(value: bool) -> str:
    return "yes" if value else "no"


def probe(probed: Probed) -> dict[str, str]:
    """Every difference, in an order where no probe disturbs a later one (the lost race comes last: Nessie takes it)."""
    found = {}
    table = probed.catalog.load_table(probed.identifier)
    found["snapshot history kept in the table's metadata"] = yes(len(table.snapshots()) == 2)
    stale = probed.commit(
        [{"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": probed.first}],
        [{"action": "set-properties", "updates": {"probe": "stale"}}],
    )
    found["stale `assert-ref-snapshot-id` (a failed requirement)"] = str(stale.status_code)
    null = probed.commit(
        [{"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": None}],
        [{"action": "set-properties", "updates": {"probe": "null"}}],
    )
    found["null `assert-ref-snapshot-id` while main exists"] = str(null.status_code)
    config = probed.session.get(f"{probed.server.url}/v1/config", timeout=30).json()
    found["advertises `Idempotency-Key` (`idempotency-key-lifetime`)"] = yes("idempotency-key-lifetime" in config)
    namespace, name = probed.identifier.split(".")
    change: dict[str, Any] = {
        "identifier": {"namespace": [namespace], "name": name},
        "requirements": [],
        "updates": [{"action": "set-properties", "updates": {"probe": "transaction"}}],
    }
    transaction = probed.session.post(
        f"{probed.base()}/transactions/commit", json={"table-changes": [change]}, timeout=30
    )
    found["`POST /v1/{prefix}/transactions/commit`"] = str(transaction.status_code)
    with contextlib.suppress(Exception):  # whatever the server refuses with, the branch is not there
        probed.catalog.load_table(probed.identifier).manage_snapshots().create_branch(
            snapshot_id=probed.second, branch_name="probe-branch", min_snapshots_to_keep=3
        ).commit()
    refs = probed.catalog.load_table(probed.identifier).metadata.refs
    branch = refs.get("probe-branch")
    found["a table branch with retention (`set-snapshot-ref`)"] = yes(
        branch is not None and branch.min_snapshots_to_keep == 3
    )
    head = probed.catalog.load_table(probed.identifier)
    current = head.current_snapshot()
    assert current is not None
    snapshot = {
        "snapshot-id": random.randrange(1, 2**62),
        "parent-snapshot-id": current.snapshot_id,
        "sequence-number": current.sequence_number,
        "timestamp-ms": int(time.time() * 1000),
        "manifest-list": current.manifest_list,
        "summary": {"operation": "append"},
        "schema-id": head.metadata.current_schema_id,
    }
    race = probed.commit([], [{"action": "add-snapshot", "snapshot": snapshot}])
    found["`add-snapshot` with a used sequence number (a lost race)"] = str(race.status_code)
    return found


def test_each_server_differs_where_the_docs_say(server: Server) -> None:
    found = probe(probed_table(server, "probe"))

    assert found == {row: values[server.kind] for row, values in EXPECTED.items()}


def test_icegroup_refuses_a_nessie_table_before_reading_or_writing_anything(
    server: Server, tmp_path: Path, make_group: MakeGroup
) -> None:
    if server.kind != "nessie":
        pytest.skip("the refusal is Nessie's; the other servers keep history and run the REST tier")
    catalog = server.catalog()
    group = make_group()
    probed_table(server, group.source.split(".")[0])
    catalog.rename_table(f"{group.source.split('.')[0]}.t", group.source)
    config = {
        "catalog_name": "nessie",
        "rest": {"uri": server.url, "warehouse": "warehouse"},
        "s3": {"endpoint": server.s3["s3.endpoint"], "region": "us-east-1", "path_style_access": True},
        "heartbeats_uri": f"sqlite:///{tmp_path / 'heartbeats.db'}",
    }
    (tmp_path / "lakehouse.yaml").write_text(yaml.safe_dump(config))
    (tmp_path / "home").mkdir()
    env = {key: value for key, value in os.environ.items() if not key.startswith("ICEGROUP_")}
    env.update({ENV_CONFIG: str(tmp_path / "lakehouse.yaml"), ENV_HOME: str(tmp_path / "home"), **S3_KEYS})
    namespaces_before = sorted(catalog.list_namespaces())

    done = subprocess.run(
        [ICEGROUP, "--groups", str(write_groups(tmp_path / "groups.yaml", group)), "consume", group.name],
        cwd=repo_root(),
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )

    assert done.returncode == Exit.ERROR, done.stdout + done.stderr
    assert f"source: table {group.source!r} in catalog 'nessie' cannot be consumed" in done.stderr
    assert "Project Nessie" in done.stderr
    assert sorted(catalog.list_namespaces()) == namespaces_before, "no registry, sink or lineage table was made"


def test_the_docs_table_says_what_the_servers_did() -> None:
    rows = {}
    for line in DOCS.read_text().splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) >= 4 and cells[0] in EXPECTED:
            rows[cells[0]] = {"icegroup": cells[1], "fixture": cells[2], "nessie": cells[3]}
    shown = {row: {kind: re.sub(r"[*:]|\s.*", "", cell) for kind, cell in cells.items()} for row, cells in rows.items()}

    assert shown == EXPECTED, f"{DOCS} disagrees with what the servers did"
