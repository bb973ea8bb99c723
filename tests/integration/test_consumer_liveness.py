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
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import pytest
from pyiceberg.catalog import Catalog

from icegroup.dagster_project.cli import Exit
from icegroup.dagster_project.runs.tags import TAG_GROUP
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.verify import verify_group
from tests.conftest import repo_root
from tests.factories import MakeGroup, append_batches, create_source, write_groups
from tests.integration.helpers import wait_for
from tests.stack_env import home_env

pytestmark = [pytest.mark.spark, pytest.mark.dagster, pytest.mark.chaos]

ICEGROUP = str(Path(sys.executable).with_name("icegroup"))


def start(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """An ``icegroup`` process, its output in ``log``."""
    return subprocess.Popen(
        [ICEGROUP, *args], cwd=repo_root(), env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT
    )


@dataclass
class Held:
    """A consumer held at a fail point with shard output staged: alive, beating and holding its leases."""

    process: subprocess.Popen[bytes]
    env: dict[str, str]
    consume: list[str]
    points: Path


def held_after_staging(tmp_path: Path, lake_home: Path, group: GroupConfig, log: Path) -> Held:
    """Start ``icegroup consume`` on ``group`` with ``borrower.after_stage`` set, and wait until it stops there."""
    groups = write_groups(tmp_path / "groups.yaml", group)
    points = tmp_path / "points"
    points.mkdir()
    env = {**os.environ, **home_env(lake_home), "DAGSTER_HOME": str(tmp_path / "dagster")}
    consume = ["--groups", str(groups), "consume", group.name, "--until-caught-up"]
    (points / "borrower.after_stage").touch()
    process = start(consume, {**env, "ICEGROUP_FAILPOINTS": str(points)}, log)
    try:
        wait_for(lambda: any(p.name.startswith("hit.") for p in points.iterdir()), 120, "the consumer to stage")
    except BaseException:
        process.kill()
        process.wait()
        raise
    return Held(process, env, consume, points)


def test_a_consumer_killed_with_kill_9_is_noticed_at_once_on_its_machine(
    tmp_path: Path, lake_home: Path, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group()  # the default settings: session_timeout_s 30, lease_timeout_s 1800
    assert group.session_timeout_s == 30
    assert group.lease_timeout_s == 1800
    append_batches(create_source(catalog, group.source), 4, 30)
    first = held_after_staging(tmp_path, lake_home, group, tmp_path / "held.log")
    held, env, consume = first.process, first.env, first.consume
    try:
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
        held.wait(timeout=30)
    finally:
        if held.poll() is None:
            held.kill()

    # --verbose: the Leader's log lines (the re-grant among them) go to stderr instead of the run's log file.
    again = subprocess.run(
        [ICEGROUP, "--verbose", *consume], cwd=repo_root(), env=env, capture_output=True, text=True, timeout=300
    )

    assert again.returncode == Exit.OK, again.stderr[-3000:]
    regrant = again.stderr.find("(its Borrower's process ended); re-granting as attempt 1")
    first_tick = again.stderr.find(f"{group.name}: tick 1 in ")
    assert 0 <= regrant < first_tick, "re-granted at the consumer's first tick, not after the session timeout"
    check = verify_group(catalog, group, key="event_id")
    assert check.ok, check
    with dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        run = instance.get_run_by_id(held_run)
        assert run is not None
        assert run.status == dg.DagsterRunStatus.CANCELED, "the killed consumer's run is no longer shown as running"


def descendants(pid: int) -> list[int]:
    """Every process below ``pid``, read from ``ps``: the Spark driver JVM that pyspark launched among them."""
    rows = subprocess.run(["ps", "-eo", "pid=,ppid="], capture_output=True, text=True, check=True).stdout.split("\n")
    children: dict[int, list[int]] = {}
    for row in filter(None, (line.split() for line in rows)):
        children.setdefault(int(row[1]), []).append(int(row[0]))
    found, pending = [], [pid]
    while pending:
        below = children.get(pending.pop(), [])
        found += below
        pending += below
    return found


def command_name(pid: int) -> str | None:
    """A process's command name, or None once it has ended."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None


def test_a_consumer_whose_spark_jvm_dies_fails_at_once_naming_the_remedy(
    tmp_path: Path, lake_home: Path, catalog: Catalog, make_group: MakeGroup
) -> None:
    """A driver JVM gone (out of memory, killed) looked like a lost network: the lease tried for 15 minutes."""
    group = make_group()
    append_batches(create_source(catalog, group.source), 2, 30)
    log = tmp_path / "held.log"
    first = held_after_staging(tmp_path, lake_home, group, log)
    held = first.process
    try:
        jvms = [pid for pid in descendants(held.pid) if command_name(pid) == "java"]
        assert jvms, "pyspark launched its driver JVM below the consumer"
        for pid in jvms:
            os.kill(pid, signal.SIGKILL)
        released_at = time.monotonic()
        for hit in first.points.glob("hit.*"):
            hit.unlink()  # the lease goes on to its publish, on a JVM that is gone
        held.wait(timeout=120)
    finally:
        if held.poll() is None:
            held.kill()
    took = time.monotonic() - released_at
    said = log.read_text(errors="replace")

    assert held.returncode == Exit.ERROR, said[-3000:]
    assert "Spark's driver JVM in this process exited" in said, said[-3000:]
    assert "give it more (spark.driver_memory in the lakehouse config" in said
    assert took < 60, f"failed {took:.0f}s after the JVM died, not at once"
    again = subprocess.run(
        [ICEGROUP, *first.consume], cwd=repo_root(), env=first.env, capture_output=True, text=True, timeout=300
    )
    assert again.returncode == Exit.OK, again.stderr[-3000:]
    check = verify_group(catalog, group, key="event_id")
    assert check.ok, check
