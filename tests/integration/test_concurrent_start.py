"""Consumers started at the same moment on a fresh home all work: real processes, a new lakehouse, a new instance."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

from icegroup.dagster_project.cli import Exit
from icegroup.iceberg.config.lakehouse import load_lakehouse
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.verify import verify_group
from tests.conftest import repo_root
from tests.factories import append_batches, create_source, write_groups
from tests.stack_env import home_env

pytestmark = [pytest.mark.spark, pytest.mark.dagster]

ICEGROUP = str(Path(sys.executable).with_name("icegroup"))
CONSUMERS = 3


def test_consumers_started_together_on_a_fresh_home_all_catch_up_exactly_once(tmp_path: Path) -> None:
    home, dagster_home = tmp_path / "home", tmp_path / "dagster"
    home.mkdir()
    dagster_home.mkdir()
    catalog = load_lakehouse(env=home_env(home)).catalog()
    group = GroupConfig.model_validate({"name": "fresh", "source": "fresh.events", "sink": "fresh.out"})
    append_batches(create_source(catalog, group.source), 3, 30)
    groups = write_groups(tmp_path / "groups.yaml", group)
    env = {**os.environ, **home_env(home), "DAGSTER_HOME": str(dagster_home)}
    command = [ICEGROUP, "--groups", str(groups), "consume", group.name, "--until-caught-up"]

    processes = [
        subprocess.Popen(command, cwd=repo_root(), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        for _ in range(CONSUMERS)
    ]
    outputs = [p.communicate(timeout=300)[0].decode() for p in processes]

    assert [p.returncode for p in processes] == [Exit.OK] * CONSUMERS, "\n\n".join(o[-3000:] for o in outputs)
    check = verify_group(catalog, group, key="event_id")
    assert check.ok, check
    with dg.DagsterInstance.from_config(str(dagster_home)) as instance:
        assert len(instance.get_runs()) == CONSUMERS
