"""The REST server restarted under a running ``icegroup consume``: the consume waits it out, exactly once.

Both clients of the consume process, pyiceberg's and Spark's, must reconnect; the tokens they hold
stay good, since the server signs its tokens instead of keeping them (as production servers' JWTs
are). The consume is paused at a fail point while the server is down, then released once it is up
again.
"""

from __future__ import annotations

import signal
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest

from icegroup.dagster_project.cli import Exit
from icegroup.iceberg.failpoints import ENV as ENV_FAILPOINTS
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.verify import verify_group
from tests.conftest import repo_root
from tests.factories import MakeGroup, append_batches, create_source
from tests.integration.helpers import wait_for
from tests.rest.helpers import ICEGROUP, REST, RestLake, RestServerProcess

pytestmark = [*REST, pytest.mark.spark, pytest.mark.dagster]
DOWN_S = 3.0


def consume_across_a_restart(
    server: RestServerProcess, lake: RestLake, group: GroupConfig, point: str, sig: signal.Signals
) -> tuple[int, str]:
    """``icegroup consume GROUP --until-caught-up`` paused at ``point`` while the server restarts; its code, output."""
    points = lake.folder / "failpoints"
    points.mkdir()
    (points / point).touch()
    log = lake.folder / "consume.log"
    command = [ICEGROUP, "--groups", str(lake.groups_file(group)), "consume", group.name, "--until-caught-up"]
    with log.open("wb") as out:
        consume = subprocess.Popen(
            command, cwd=repo_root(), env=lake.env(**{ENV_FAILPOINTS: str(points)}), stdout=out, stderr=out
        )
    try:
        wait_for(lambda: list(points.glob(f"hit.*.{point}")) or consume.poll() is not None, 180, f"{point}")
        assert consume.poll() is None, f"consume ended before {point}:\n{log.read_text()[-5000:]}"
        server.restart(DOWN_S, sig)
        next(points.glob(f"hit.*.{point}")).unlink()
        code = consume.wait(300)
    finally:
        consume.kill()
    return code, log.read_text()


def test_the_rest_server_restarted_in_the_middle_of_a_tick_is_waited_out(
    rest_server: RestServerProcess, rest_lake: RestLake, make_group: MakeGroup
) -> None:
    group = make_group()
    append_batches(create_source(rest_lake.catalog(), group.source), 3, 100)

    code, out = consume_across_a_restart(rest_server, rest_lake, group, "leader.after_liveness", signal.SIGTERM)

    check = verify_group(rest_lake.catalog(), group, key="event_id")
    assert code == Exit.OK, f"exit {code}, {check.line()}:\n{out[-6000:]}"
    assert check.ok, check.line()
    assert check.found == 300


def test_the_rest_server_restarted_in_the_middle_of_a_lease_publish_loses_and_duplicates_nothing(
    rest_server: RestServerProcess, rest_lake: RestLake, make_group: MakeGroup
) -> None:
    group = make_group(max_borrowers=1, shard_caps={"max_files": 1}, commit_batch_rows=0)
    append_batches(create_source(rest_lake.catalog(), group.source), 3, 100)

    code, out = consume_across_a_restart(rest_server, rest_lake, group, "borrower.after_stage", signal.SIGKILL)

    check = verify_group(rest_lake.catalog(), group, key="event_id")
    assert code == Exit.OK, f"exit {code}, {check.line()}:\n{out[-6000:]}"
    assert check.ok, check.line()
    assert check.found == 300


def test_a_server_started_again_on_its_catalog_file_serves_every_table_as_it_is_now(
    rest_server: RestServerProcess, rest_lake: RestLake, make_group: MakeGroup
) -> None:
    """Every pooled connection of the server reads the catalog file as it is, none as it was at the server's start.

    Three writers at once, so that the server's pool hands out each of its connections; each appends
    to a table of its own, so a commit refused as a conflict, or a load without the writer's last
    append, can only be a read of the file as it was.
    """
    sources = [f"{make_group().source}_{writer}" for writer in range(3)]
    for source in sources:
        create_source(rest_lake.catalog(), source)
    rest_server.restart(0.0)
    catalog = rest_lake.catalog()

    def append_and_load(source: str) -> list[tuple[int, int | None]]:
        stale = []
        for _ in range(5):
            table = catalog.load_table(source)
            append_batches(table, 1, 5)
            head = table.current_snapshot()
            assert head is not None
            for _ in range(3):
                loaded = catalog.load_table(source).current_snapshot()
                if loaded is None or loaded.snapshot_id != head.snapshot_id:
                    stale.append((head.snapshot_id, loaded.snapshot_id if loaded else None))
        return stale

    with ThreadPoolExecutor(len(sources)) as pool:
        stale = list(pool.map(append_and_load, sources))

    assert stale == [[]] * len(sources), "loads that lacked the writer's own last append"
