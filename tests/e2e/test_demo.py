"""`make demo`'s script from a clean lakehouse, in its own process, as a user runs it.

Every OpenLineage event the demo wrote is validated against the published schemas.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from icegroup.iceberg.config.groups import load_groups
from icegroup.iceberg.config.lakehouse import load_lakehouse
from icegroup.iceberg.verify import verify_group
from tests.conftest import repo_root
from tests.openlineage_events import read_events
from tests.stack_env import home_env

pytestmark = pytest.mark.demo


def test_demo_consumes_exactly_once_and_says_so(tmp_path: Path) -> None:
    env = {**os.environ, **home_env(tmp_path), "DAGSTER_HOME": str(tmp_path / ".dagster")}
    env.pop("ICEGROUP_GROUPS", None)
    (tmp_path / ".dagster").mkdir()

    done = subprocess.run(
        [sys.executable, "-m", "icegroup.infra.demo"],
        cwd=repo_root(),
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )

    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "verify: expected=27000 found=27000 duplicates=0 missing=0 unexpected=0 -> OK" in done.stdout
    assert re.search(
        r"main (\d+) rows, canary \1 rows: 0 added, 0 removed, [1-9]\d* changed \(by event_id\)", done.stdout
    )
    lakehouse = load_lakehouse(env=home_env(tmp_path))
    group = load_groups(repo_root() / "dagster_project" / "groups.yaml")["demo"]
    assert verify_group(lakehouse.catalog(), group, key="event_id").ok
    assert (tmp_path / ".dagster" / "storage").is_dir(), "the demo's runs are in its Dagster instance"

    events = read_events(tmp_path / ".lake" / "openlineage.jsonl")
    runs: dict[str, list[str]] = {}
    for event in events:
        runs.setdefault(event["run"]["runId"], []).append(event["eventType"])
    assert set(map(tuple, runs.values())) == {("START", "COMPLETE")}, "every run started and completed"
    jobs = {event["job"]["name"] for event in events}
    assert {"demo.lease", "large.lease", "demo.replay", "large.replay"} <= jobs
    assert f"{len(events)} events" in done.stdout
