"""A consumer stopped with ``kill -TERM`` mid-lease: it ends after its current shard and hands the rest back.

A real ``icegroup consume`` holds one lease of six one-snapshot shards and is held at a fail point
with its first shard staged. It gets SIGTERM, and the fail point lets it go on: it commits that
shard, stops instead of working through the other five, hands them back in one last tick, and
exits 3 ("stopped"), its Dagster run CANCELED. The next consume takes the lease at its first tick
(no session timeout, no process check: the registry already says nobody holds it) and catches up,
exactly once.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import dagster as dg
import pytest
from pyiceberg.catalog import Catalog

from icegroup.dagster_project.cli import Exit
from icegroup.dagster_project.runs.tags import TAG_GROUP
from icegroup.iceberg.protocol.group import ShardCaps
from icegroup.iceberg.store.registry import load_state
from icegroup.iceberg.verify import verify_group
from tests.conftest import repo_root
from tests.factories import MakeGroup, create_source, events, next_event_id, write_groups
from tests.integration.helpers import held_at, wait_for
from tests.stack_env import home_env

pytestmark = [pytest.mark.spark, pytest.mark.dagster, pytest.mark.chaos]

ICEGROUP = str(Path(sys.executable).with_name("icegroup"))
SHARDS = 6
ROWS = 20


class StderrLines:
    """A process's stderr, read line by line as it comes, so a test can wait for a line and still read it all."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        """Start reading ``process``'s stderr on a thread of its own."""
        self.process = process
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.append(line)

    def said(self, text: str) -> bool:
        """Whether a line read so far holds ``text``."""
        return any(text in line for line in list(self.lines))

    def all(self, timeout_s: float) -> str:
        """Everything the process wrote to stderr, once it has exited (its stdout read and dropped meanwhile)."""
        if self.process.stdout is not None:
            self.process.stdout.read()  # a full stdout pipe would hold the process up
        self.process.wait(timeout=timeout_s)
        self.reader.join(timeout=timeout_s)
        return "".join(self.lines)


def test_a_consumer_stopped_with_sigterm_hands_its_lease_back_for_the_next_tick(
    tmp_path: Path, lake_home: Path, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group(shard_caps=ShardCaps(max_rows=ROWS), commit_batch_rows=0, max_borrowers=1)
    source = create_source(catalog, group.source)
    for batch in range(SHARDS):  # one stream, one snapshot per shard: one lease of six shards
        source.append(events(next_event_id(source), ROWS, seed=batch, regions=("eu",)))
    groups = write_groups(tmp_path / "groups.yaml", group)
    points = tmp_path / "points"
    points.mkdir()
    env = {**os.environ, **home_env(lake_home), "DAGSTER_HOME": str(tmp_path / "dagster")}
    consume = ["--verbose", "--groups", str(groups), "consume", group.name, "--until-caught-up"]

    with held_at("borrower.after_stage", [ICEGROUP, *consume], env, points, "the consumer to stage") as held:
        lines = StderrLines(held.process)
        held.process.send_signal(signal.SIGTERM)
        # The lease leaves its publish in flight and goes on to its next shard at once: it must see
        # the stop before it is let go, or it stages that shard too (and commits it, handing back one fewer).
        wait_for(lambda: lines.said(f"{group.name}: stopping:"), 60, "the consumer to stop its lease")
        held.release()  # the shard in flight goes on to its commit
        said = lines.all(timeout_s=120)

    assert held.process.returncode == Exit.INCOMPLETE, said[-3000:]
    assert f"icegroup: stopped: job {group.name}_consume was interrupted" in said
    assert f"stopped after 1 shards committed; {SHARDS - 1} handed back" in said
    assert "this run ended; its lease is handed back" in said
    sink = catalog.load_table(group.sink)
    assert len(sink.scan().to_arrow()) == ROWS, "it stopped after the shard in flight, not after the whole lease"
    state = load_state(catalog, group.name).state
    assert state is not None
    (lease,) = state.leases.values()
    assert lease.owner_run_id is None, "nobody holds the lease: the next tick grants it"
    assert len(state.shards) == SHARDS - 1, "the committed shard is not granted again"
    with dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        (run,) = instance.get_runs(filters=dg.RunsFilter(tags={TAG_GROUP: group.name}))
        assert run.status == dg.DagsterRunStatus.CANCELED, "a run stopped on purpose is canceled, not failed"

    again = subprocess.run([ICEGROUP, *consume], cwd=repo_root(), env=env, capture_output=True, text=True, timeout=300)

    assert again.returncode == Exit.OK, again.stderr[-3000:]
    assert re.search(r"tick 1 in \d+ ms: .*1 leases in flight \(1 running here\)", again.stderr), again.stderr[-3000:]
    check = verify_group(catalog, group, key="event_id")
    assert check.ok, check
    assert len(sink.refresh().scan().to_arrow()) == SHARDS * ROWS


def test_a_consumer_stopped_with_sigterm_after_its_last_commit_says_nothing_was_handed_back_and_exits_0(
    tmp_path: Path, lake_home: Path, catalog: Catalog, make_group: MakeGroup
) -> None:
    group = make_group(max_borrowers=1)
    source = create_source(catalog, group.source)
    source.append(events(next_event_id(source), ROWS, seed=1, regions=("eu",)))
    groups = write_groups(tmp_path / "groups.yaml", group)
    points = tmp_path / "points"
    points.mkdir()
    env = {**os.environ, **home_env(lake_home), "DAGSTER_HOME": str(tmp_path / "dagster")}

    consume = [ICEGROUP, "--groups", str(groups), "consume", group.name, "--until-caught-up"]
    with held_at("borrower.after_commit", consume, env, points, "the consumer to commit") as held:
        held.process.send_signal(signal.SIGTERM)
        held.release()
        out, said = held.process.communicate(timeout=120)

    assert held.process.returncode == Exit.OK, out + said[-3000:]
    assert f"group {group.name}: stopped by a signal once caught up; nothing was handed back" in out
    assert "caught up" in out
    assert "handed back for" not in out + said
    assert len(catalog.load_table(group.sink).scan().to_arrow()) == ROWS
