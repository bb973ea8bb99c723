"""``icegroup consume`` launches its JVM after importing only what its first look at the group needs.

A consume with data to move starts Spark as soon as ``pending_work`` has answered, and its start
is measured against a plain Spark job's (``bench_breakdown``). Every module the command imports
before that launch delays it on this 2-core machine, so what only other commands, or the consume's
later steps, need (Dagster, ``describe``, the rebuild, lineage, rich's tables) loads after it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from icegroup.iceberg.protocol.group import GroupConfig

LATER = (
    "dagster",
    "rich",
    "icegroup.iceberg.describe",
    "icegroup.iceberg.rebuild",
    "icegroup.iceberg.lineage",
    "icegroup.iceberg.checkpoints",
    "icegroup.iceberg.pause",
    "icegroup.iceberg.store.dead_letters",
    "icegroup.iceberg.store.group_delete",
)

# Replaces the JVM's start with a note of the modules loaded by then, and ends there.
AT_LAUNCH = """
    import json, os, sys
    from icegroup.spark_jobs import session

    def launch(lakehouse):
        with open(os.environ["AT_LAUNCH"], "w") as out:
            json.dump(sorted(sys.modules), out)
        os._exit(0)

    session.start_in_background = launch
    from icegroup.dagster_project.cli.entry import main
    sys.exit(main(sys.argv[1:]))
"""


def test_a_consume_with_data_launches_its_jvm_before_loading_what_only_later_steps_need(
    cli: list[str], group: GroupConfig, tmp_path: Path
) -> None:
    noted = tmp_path / "at_launch.json"
    env = {**os.environ, "AT_LAUNCH": str(noted), "DAGSTER_HOME": str(tmp_path / "dagster")}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(AT_LAUNCH), *cli, "consume", group.name],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip

    assert noted.exists(), f"the consume ended without starting its JVM (exit {done.returncode}): {done.stderr}"
    loaded = json.loads(noted.read_text())
    assert sorted(m for m in loaded if any(m == name or m.startswith(name + ".") for name in LATER)) == []
