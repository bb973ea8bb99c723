"""A consumer killed with kill -9, under the default settings: noticed at once, and every exit tells the truth.

Real ``icegroup consume`` processes on one Dagster instance and one lakehouse. The first is held at
a fail point with shard output staged (alive, beating, holding leases). A second one, told to wait
5 s, exits 3 and names the held leases and their holder. The first is then killed with
``kill -9``; its Dagster run still says STARTED. A third consumer on the same machine sees the
killed one's process gone (its heartbeat names it), re-grants its leases at its first tick, well
within the session timeout, and catches up exactly once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pytest
from pyiceberg.catalog import Catalog

from icegroup.dagster_project.cli import Exit
from icegroup.dagster_project.runs.tags import TAG_GROUP
from icegroup.iceberg.verify import verify_group
from tests.conftest import repo_root
from tests.factories import MakeGroup, append_batches, create_source, write_groups
from tests.integration.helpers import wait_for
from tests.stack_env import home_env

pytestmark = [pytest.mark.spark, pytest.mark.dagster, pytest.mark.chaos]

ICEGROUP = str(Path(sys.executable).with_name("icegroup"))
WORK_S = 60.0  # generous: a cold Spark start plus 3 leases on 2 cores


def start(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """An ``icegroup`` process, its output in ``log``."""
    return subprocess.Popen(
        [ICEGROUP, *args], cwd=repo_root(), env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT
    )


def test_a_consumer_killed_with_kill_9_is_noticed_at_once_on_its_machine(
    tmp_path: Path, lake_home: Path, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group()  # the default settings: session_timeout_s 30, lease_timeout_s 1800
    assert group.session_timeout_s == 30
    assert group.lease_timeout_s == 1800
    append_batches(create_source(catalog, group.source), 4, 30)
    groups = write_groups(tmp_path / "groups.yaml", group)
    points = tmp_path / "points"
    points.mkdir()
    env = {**os.environ, **home_env(lake_home), "DAGSTER_HOME": str(tmp_path / "dagster")}
    consume = ["--groups", str(groups), "consume", group.name, "--until-caught-up"]

    (points / "borrower.after_stage").touch()
    held = start(consume, {**env, "ICEGROUP_FAILPOINTS": str(points)}, tmp_path / "held.log")
    try:
        wait_for(lambda: any(p.name.startswith("hit.") for p in points.iterdir()), 120, "the first consumer to stage")

        waiting = subprocess.run(
            [ICEGROUP, *consume, "--max-wait", "5"],
            cwd=repo_root(),
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert waiting.returncode == Exit.INCOMPLETE, waiting.stderr[-2000:]
        with dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
            started = instance.get_runs(
                filters=dg.RunsFilter(tags={TAG_GROUP: group.name}, statuses=[dg.DagsterRunStatus.STARTED])
            )
            assert len(started) == 1
            held_run = started[0].run_id
        assert f"icegroup: not caught up: group '{group.name}' is not caught up: no progress for 5s" in waiting.stderr
        assert f"held by {held_run}: last heartbeat" in waiting.stderr
        assert "re-granted in" in waiting.stderr

        os.kill(held.pid, signal.SIGKILL)
        killed_at = time.monotonic()
        held.wait(timeout=30)
    finally:
        if held.poll() is None:
            held.kill()

    # --verbose: the Leader's log lines (the re-grant among them) go to stderr instead of the run's log file.
    again = subprocess.run(
        [ICEGROUP, "--verbose", *consume], cwd=repo_root(), env=env, capture_output=True, text=True, timeout=300
    )
    took = time.monotonic() - killed_at

    assert again.returncode == Exit.OK, again.stderr[-3000:]
    assert "(its Borrower's process ended); re-granting as attempt 1" in again.stderr
    assert took < WORK_S, f"caught up {took:.0f}s after the kill"
    check = verify_group(catalog, group, key="event_id")
    assert check.ok, check
    with dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        run = instance.get_run_by_id(held_run)
        assert run is not None
        assert run.status == dg.DagsterRunStatus.CANCELED, "the killed consumer's run is no longer shown as running"
