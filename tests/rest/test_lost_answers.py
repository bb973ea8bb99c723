"""A commit that lands on the REST server but whose answer never reaches icegroup loses and duplicates nothing.

``tests/rest/proxy.py`` stands between ``icegroup consume`` (pyiceberg's client and Spark's) and the
server. For each kind of commit icegroup makes, it lets the server commit, then drops the connection
or answers 503 in place of the server's answer. The consume runs until the group is caught up
(again, if the lost answer stopped it), and then the sink holds every source row exactly once, and
every file a sink snapshot references is still there: nothing the server committed was cleaned up
as if it had failed.

The proxy is the same in front of either server, so each fault runs on one: the 503s on icegroup's
server (``make test``), the dropped connections on Iceberg's REST fixture (``make test-catalogs``).
"""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pyiceberg.catalog import Catalog

from icegroup.dagster_project.cli import Exit
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.store.registry import registry_identifier
from icegroup.iceberg.verify import verify_group
from tests.conftest import repo_root
from tests.factories import MakeGroup, append_batches, create_source
from tests.rest.helpers import ICEGROUP, REST, RestLake, RestServerProcess, server_kind
from tests.rest.proxy import Fault, fault_proxy

pytestmark = [*REST, pytest.mark.spark, pytest.mark.dagster]
ROWS = 300
# The verbs whose commits are lost after a first consume: a reset fences the group's leases (its
# fence commit carries the reset's marker, whether or not a lease is in flight), a replay swaps windows.
VERBS = ("fence", "replay")


def verb(commit: str) -> list[str]:
    """The command whose commit is lost; a replay's window is today's as the test runs (not as it was collected)."""
    if commit == "fence":
        return ["reset", "--to-earliest", "--execute"]
    today = datetime.now(UTC).date()
    return ["replay", "--from", today.isoformat(), "--to", (today + timedelta(days=1)).isoformat(), "--execute"]


def table_path(identifier: str) -> str:
    """The pattern of a table's commit path, whatever the prefix."""
    namespace, name = identifier.split(".")
    return rf"/namespaces/{namespace}/tables/{name}$"


def fault_for(commit: str, group: GroupConfig, after: str) -> Fault:
    """The commit whose answer is lost: a lease's publish, a registry update, a reset's fence, or a replay's swap."""
    if commit == "registry update":
        return Fault(commit, table_path(registry_identifier(group.name)), after=after)
    if commit == "fence":
        return Fault(commit, table_path(group.sink), r'"icegroup\.fence"', after=after)
    if commit == "replay":
        return Fault(commit, table_path(group.sink), r'"icegroup\.replay"', after=after)
    return Fault(commit, table_path(group.sink), r'"icegroup\.lease"', after=after)


def consume(lake: RestLake, group: GroupConfig, *args: str) -> tuple[int, str]:
    """``icegroup consume GROUP --until-caught-up`` (or another verb) on ``lake``; its exit code and output."""
    verb = list(args) or ["consume", group.name, "--until-caught-up"]
    done = subprocess.run(
        [ICEGROUP, "--groups", str(lake.groups_file(group)), *verb],
        cwd=repo_root(),
        env=lake.env(),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    return done.returncode, done.stdout + done.stderr


def missing_files(catalog: Catalog, identifier: str) -> list[str]:
    """Every data or manifest file a snapshot of the table references that is not on disk."""
    table = catalog.load_table(identifier)
    missing = []
    for snapshot in table.snapshots():
        for manifest in snapshot.manifests(table.io):
            if not table.io.new_input(manifest.manifest_path).exists():
                missing.append(manifest.manifest_path)
                continue
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
                if not table.io.new_input(entry.data_file.file_path).exists():
                    missing.append(entry.data_file.file_path)
    return missing


@pytest.mark.parametrize("after", ["drop"] if server_kind() == "fixture" else ["503"])
@pytest.mark.parametrize("commit", ["lease publish", "registry update", "fence", "replay"])
def test_a_commit_whose_answer_is_lost_loses_and_duplicates_nothing(
    rest_server: RestServerProcess,
    rest_lake: RestLake,
    make_group: MakeGroup,
    tmp_path: Path,
    commit: str,
    after: str,
) -> None:
    group = make_group(max_borrowers=1, shard_caps={"max_files": 1}, commit_batch_rows=0)
    append_batches(create_source(rest_lake.catalog(), group.source), 3, ROWS // 3)
    with fault_proxy(rest_server.url) as proxy:
        lake = RestLake(proxy.url, tmp_path / "through-proxy", rest_lake.warehouse, rest_lake.signs_in)
        for folder in ("home", "dagster"):
            (lake.folder / folder).mkdir(parents=True)
        lake.write_config()
        if commit in VERBS:
            assert consume(lake, group)[0] == Exit.OK
        fault = proxy.arm(fault_for(commit, group, after))
        outputs = []
        if commit in VERBS:
            for _ in range(2):  # a verb stopped by the lost answer is run again, as an operator would
                outputs.append(consume(lake, group, *verb(commit), group.name))
                if outputs[-1][0] == Exit.OK:
                    break
        for _ in range(3):
            code, out = consume(lake, group)
            outputs.append((code, out))
            if code == Exit.OK:
                break
        log = "\n".join(f"exit {code}:\n{out[-4000:]}" for code, out in outputs)

        posts = [seen for seen in proxy.seen if seen[0] == "POST"]
        assert fault.fired, f"no {commit} went through the proxy: {posts[-12:]}\n{log}"
        if commit == "fence":  # the reset stopped on the lost answer, saying so, and a second reset finished it
            assert outputs[0][0] == Exit.INCOMPLETE, log
            assert "the catalog did not answer" in outputs[0][1], log
        assert outputs[-1][0] == Exit.OK, log
    catalog = rest_lake.catalog()
    check = verify_group(catalog, group, key="event_id")
    assert check.ok, f"{check.line()}\n{log}"
    assert check.found == ROWS
    assert missing_files(catalog, group.sink) == [], "a file a committed snapshot references was deleted"
