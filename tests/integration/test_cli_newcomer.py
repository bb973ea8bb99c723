"""The command line as a newcomer meets it, with real Spark and Dagster runs: delete, and a failing run's output.

``icegroup delete`` removes a group's state and never its sink; a consume afterwards starts the group
anew. A run that fails prints one line naming the error and the log file that holds the traceback.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from pyiceberg.catalog import Catalog
from pyspark.sql import SparkSession

from icegroup.dagster_project.cli import main
from icegroup.iceberg.protocol.fences import epoch_key
from icegroup.iceberg.protocol.sink_commit import KEY_FENCE
from icegroup.iceberg.store.dead_letters import dead_letter_identifier
from icegroup.iceberg.store.lineage import lineage_identifier
from icegroup.iceberg.store.registry import load_state, registry_identifier
from icegroup.iceberg.store.tables import load_optional
from icegroup.iceberg.verify import verify_group
from tests.conftest import repo_root
from tests.factories import MakeGroup, append_batches, create_source, today, write_groups

pytestmark = [pytest.mark.spark, pytest.mark.dagster]

RAISING = """
from pyspark.sql import DataFrame
from pyspark.sql import functions as F


def _check(amount: float) -> float:
    raise ValueError(f"amount {amount} is over the limit")


def raising(df: DataFrame) -> DataFrame:
    return df.withColumn("amount", F.udf(_check, "double")("amount"))
"""


def rows(catalog: Catalog, table: str) -> int:
    return len(catalog.load_table(table).scan().to_arrow())


def test_delete_previews_then_removes_the_state_but_never_the_sink_and_a_consume_starts_afresh(
    spark: SparkSession,
    env: Path,
    tmp_path: Path,
    catalog: Catalog,
    make_group: MakeGroup,
    capsys: pytest.CaptureFixture[str],
) -> None:
    group = make_group(start="latest")
    source = create_source(catalog, group.source)
    append_batches(source, 2, 12)
    groups = str(write_groups(tmp_path / "groups.yaml", group.model_copy(update={"start": "earliest"})))
    assert main(["--groups", groups, "consume", group.name, "--until-caught-up"]) == 0
    assert verify_group(catalog, group, key="event_id").ok
    assert main(["--groups", groups, "consume", group.name, "--until-caught-up"]) == 0  # the Leader records lineage
    sink_rows = rows(catalog, group.sink)
    sink_snapshots = len(catalog.load_table(group.sink).snapshots())
    capsys.readouterr()

    assert main(["--groups", groups, "delete", group.name, "--json"]) == 0
    preview = json.loads(capsys.readouterr().out)
    assert preview["executed"] is False
    assert registry_identifier(group.name) in preview["tables"]
    assert load_state(catalog, group.name).state is not None, "a preview deletes nothing"

    assert main(["--groups", groups, "delete", group.name, "--execute"]) == 0
    assert "the sink" in capsys.readouterr().out
    assert rows(catalog, group.sink) == sink_rows, "the sink's rows stay"
    after = catalog.load_table(group.sink)
    added = after.snapshots()[sink_snapshots:]
    assert len(after.snapshots()) == sink_snapshots + 1, "one snapshot more: the epoch fence's, and none removed"
    assert KEY_FENCE in added[0].summary.additional_properties, "the added snapshot is a fence: it adds no file"
    assert after.properties[epoch_key(group.name)] == "1", "a zombie of the deleted group's epoch 0 is refused"
    for identifier in (registry_identifier(group.name), lineage_identifier(group.name)):
        assert load_optional(catalog, identifier) is None, identifier
    assert load_optional(catalog, dead_letter_identifier(group.name)) is None
    assert not any(key.endswith(f".{group.name}") for key in catalog.load_table(group.source).properties)
    assert main(["--groups", groups, "describe", group.name, "--json"]) == 0
    described = json.loads(capsys.readouterr().out)
    assert (described["leases_done"], described["epoch"]) == (0, 1), "not started, in the fenced epoch"
    assert main(["--groups", groups, "delete", group.name]) == 0
    assert "keeps no state; nothing to delete" in capsys.readouterr().out

    # Started again with start: latest, the group is new: it skips what its deleted self consumed.
    restarted = str(write_groups(tmp_path / "latest.yaml", group))
    assert main(["--groups", restarted, "consume", group.name, "--until-caught-up"]) == 0
    state = load_state(catalog, group.name).state
    assert state is not None
    assert state.epoch == 1, "the new group commits in the epoch the delete raised the fence to"
    assert rows(catalog, group.sink) == sink_rows, "nothing was consumed twice"
    append_batches(catalog.load_table(group.source), 1, 12)
    assert main(["--groups", restarted, "consume", group.name, "--until-caught-up"]) == 0
    assert rows(catalog, group.sink) == sink_rows + 12, "the new group consumes what comes after it started"
    assert main(["--groups", restarted, "consume", group.name]) == 0  # its Leader records the last commit's lineage
    capsys.readouterr()
    assert main(["--groups", restarted, "lineage", group.name, "--window", today(group), "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert sum(shard["source_rows"] for shard in answer["shards"]) == 12, "lineage is the new group's only"


def icegroup(home: Path, dagster_home: Path, groups: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The ``icegroup`` command in a process of its own, as a user runs it."""
    env = {
        **os.environ,
        "ICEGROUP_HOME": str(home),
        "DAGSTER_HOME": str(dagster_home),
        "PYTHONPATH": os.pathsep.join([str(groups.parent), str(repo_root())]),
    }
    command = [str(Path(sys.executable).parent / "icegroup"), "--groups", str(groups), *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, check=False)


def logged(stderr: str) -> Path:
    """The log file a named error points at."""
    return Path(stderr.split("full traceback: ", 1)[1].split(";", 1)[0])


@pytest.mark.parametrize("case", ["unknown filter column", "transform raises"])
def test_a_failing_consume_prints_one_named_error_and_logs_the_traceback(
    lake_home: Path,
    env: Path,
    tmp_path: Path,
    catalog: Catalog,
    make_group: MakeGroup,
    case: str,
) -> None:
    (tmp_path / "raising_transform.py").write_text(RAISING)
    if case == "unknown filter column":
        group = make_group(filter="no_such_column = 'eu'")
    else:
        group = make_group(transform="raising_transform:raising", max_deliver=1, on_poison="stop")
    append_batches(create_source(catalog, group.source), 1, 6)
    groups = tmp_path / "groups.yaml"
    groups.write_text(yaml.safe_dump({"groups": [group.model_dump(mode="json", exclude_defaults=True)]}))

    done = icegroup(lake_home, env, groups, "consume", group.name, "--until-caught-up")

    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr
    assert len(lines) < 15, done.stderr
    assert lines[0].startswith("icegroup: error: ")
    assert lines[-1].endswith("rerun with --verbose to print it)")
    if case == "unknown filter column":
        assert "no_such_column" in lines[0]
    else:
        assert f"group {group.name}, lease " in lines[0], "the line names the group and the lease"
        assert "ValueError: amount" in lines[-1]
        assert "is over the limit" in lines[-1]
    log = logged(done.stderr)
    assert log.is_file()
    assert log.parent == env / "logs"
    logged_text = log.read_text()
    assert 'File "' in logged_text, "the traceback is in the log file"
    assert len(logged_text.splitlines()) > len(lines)
    assert "BetaWarning" not in done.stderr

    verbose = icegroup(lake_home, env, groups, "--verbose", "consume", group.name, "--until-caught-up")
    assert verbose.returncode == 2
    assert len(verbose.stderr.splitlines()) > len(lines), "--verbose prints what the log file holds"
