"""A user's own Dagster project with two icegroup components: dg scaffolds and loads it, and its sink materializes.

The project is built the way ``create-dagster project`` lays one out: ``pyproject.toml`` with
``[tool.dg]``, a ``definitions.py`` that loads the ``defs`` folder, the user's own asset (the source
of one group), and two ``defs.yaml`` files, one per lake.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import yaml
from pyiceberg.catalog import Catalog
from pyspark.sql import SparkSession

from icegroup.iceberg.config.lakehouse import LakehouseConfig
from icegroup.iceberg.protocol.shards import window_label
from tests.factories import append_batches, create_source

pytestmark = [pytest.mark.spark, pytest.mark.dagster]

BIN = Path(sys.executable).parent
REPO = Path(__file__).parents[2]
COMPONENT = "icegroup.dagster_project.components.ConsumerGroupsComponent"

PYPROJECT = """\
[project]
name = "user-project"
version = "0.1.0"

[tool.dg]
directory_type = "project"

[tool.dg.project]
root_module = "user_project"
code_location_name = "user-project"

[tool.dagster]
module_name = "user_project.definitions"
code_location_name = "user-project"
"""

DEFINITIONS = """\
from pathlib import Path

import dagster as dg


@dg.definitions
def defs() -> dg.Definitions:
    return dg.load_from_defs_folder(path_within_project=Path(__file__).parent)
"""

USER_ASSETS = """\
import dagster as dg

raw_orders = dg.AssetSpec(["raw", "orders"], description="Orders, written by the shop.")
"""


def write_project(root: Path, ns: str, orders_lake: dict[str, Any]) -> Path:
    """The project: the user's raw/orders asset; group orders_<ns> over it on ``orders_lake``; a second lake."""
    package = root / "src" / "user_project"
    for folder in ("raw", "orders_lake", "events_lake"):
        (package / "defs" / folder).mkdir(parents=True)
    (root / "pyproject.toml").write_text(PYPROJECT)
    (package / "__init__.py").write_text("")
    (package / "definitions.py").write_text(DEFINITIONS)
    (package / "defs" / "raw" / "assets.py").write_text(USER_ASSETS)
    orders = {
        "type": COMPONENT,
        "attributes": {
            "lakehouse": orders_lake,
            "groups": [{"name": f"orders_{ns}", "source": f"{ns}.orders", "sink": f"{ns}.orders_clean"}],
            "assets": {f"orders_{ns}": {"source_asset_key": ["raw", "orders"]}},
            "owners": ["team:data"],
            "tags": {"domain": "orders"},
        },
    }
    events = {
        "type": COMPONENT,
        "attributes": {
            "name": "events",
            "lakehouse": "lakehouse.yaml",
            "key_prefix": ["events_lake"],
            "asset_group_name": "events",
            "groups": [{"name": f"events_{ns}", "source": "demo.events", "sink": "demo.events_enriched"}],
        },
    }
    (package / "defs" / "orders_lake" / "defs.yaml").write_text(yaml.safe_dump(orders, sort_keys=False))
    (package / "defs" / "events_lake" / "defs.yaml").write_text(yaml.safe_dump(events, sort_keys=False))
    (package / "defs" / "events_lake" / "lakehouse.yaml").write_text(
        "catalog_name: lake2\ncatalog_uri: sqlite:///lake2/catalog.db\nwarehouse: lake2/warehouse\n"
    )
    return root


def run(project: Path, *command: str) -> subprocess.CompletedProcess[str]:
    """A command of the venv run in the project, as its user runs it: the project's sources importable."""
    env = {key: value for key, value in os.environ.items() if key != "DAGSTER_HOME"}  # the user's own, not the repo's
    env |= {"PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": f"{project / 'src'}"}
    result = subprocess.run(
        [str(BIN / command[0]), *command[1:]], cwd=project, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, f"{' '.join(command)}:\n{result.stdout}\n{result.stderr}"
    return result


@pytest.fixture
def project(tmp_path: Path, ns: str, lakehouse: LakehouseConfig) -> Path:
    """The user project in a fresh folder, its orders lake the test session's lakehouse."""
    return write_project(tmp_path / "project", ns, lakehouse.model_dump(mode="json", exclude_defaults=True))


def test_dg_scaffolds_the_component_and_loads_a_project_with_two(project: Path, ns: str) -> None:
    run(project, "dg", "scaffold", "defs", COMPONENT, "new_groups")
    scaffolded = yaml.safe_load((project / "src" / "user_project" / "defs" / "new_groups" / "defs.yaml").read_text())
    assert scaffolded["type"] == COMPONENT
    assert scaffolded["attributes"]["groups"][0]["name"] == "my_group"

    checked = run(project, "dg", "check", "defs")
    listed = json.loads(run(project, "dg", "list", "defs", "--json").stdout)
    validated = run(project, "dagster", "definitions", "validate")

    assert "All definitions loaded successfully" in checked.stdout
    assert "All code locations passed validation" in validated.stdout + validated.stderr
    said = (checked.stdout + checked.stderr + validated.stdout + validated.stderr).splitlines()
    # `dagster definitions validate` warns that `dg check defs` supersedes it; nothing else may warn.
    warned = [line for line in said if "warning" in line.lower() and "definitions_validate_command" not in line]
    assert warned == []
    assets = {a["asset_key"]: a for a in listed["assets"]}
    sink = assets[f"lake/{ns}/orders_clean"]
    assert sink["dependency_keys"] == ["raw/orders"], "the sink reads the project's own asset"
    assert f"lake/{ns}/orders" not in assets, "icegroup made no second asset for that source"
    assert sink["owners"] == [{"team": "data"}]
    assert {"key": "domain", "value": "orders"} in sink["tags"]
    assert assets["events_lake/demo/events_enriched"]["group_name"] == "events"
    assert assets["events_lake/demo/events_enriched"]["dependency_keys"] == ["events_lake/demo/events"]
    jobs = {j["name"] for j in listed["jobs"]}
    assert {f"orders_{ns}_consume", f"orders_{ns}_borrower", f"orders_{ns}_replay", f"events_{ns}_consume"} <= jobs
    assert {"icegroup_orders_lake_expire", "events_expire", "icegroup_new_groups_expire"} <= jobs
    assert {f"orders_{ns}_leader", f"events_{ns}_leader"} <= {s["name"] for s in listed["sensors"]}
    assert not (project / "src" / "user_project" / "defs" / "events_lake" / "lake2").exists(), "no lake created"


def test_a_components_sink_materializes_with_spark(
    spark: SparkSession, project: Path, ns: str, catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    append_batches(create_source(catalog, f"{ns}.orders"), 3, 20)
    monkeypatch.syspath_prepend(str(project / "src"))
    for name in [m for m in sys.modules if m == "user_project" or m.startswith("user_project.")]:
        monkeypatch.delitem(sys.modules, name)
    defs = importlib.import_module("user_project.definitions").defs()
    window = window_label(int(time.time() * 1000), "day")

    with dg.instance_for_test() as instance:
        consumed = defs.resolve_job_def(f"orders_{ns}_consume").execute_in_process(instance=instance)
        replayed = defs.resolve_job_def(f"orders_{ns}_replay").execute_in_process(
            instance=instance, partition_key=window
        )

    assert consumed.success
    (materialization,) = [m for n in replayed.job_def.nodes for m in replayed.asset_materializations_for_node(n.name)]
    assert all(check.passed for check in replayed.get_asset_check_evaluations()), "its checks ran, and passed"
    assert materialization.asset_key == dg.AssetKey(["lake", ns, "orders_clean"])
    assert materialization.partition == window
    assert materialization.metadata["rows_out"].value == 60
    rows = catalog.load_table(f"{ns}.orders_clean").scan(selected_fields=("event_id",)).to_arrow()
    assert len(rows) == 60
    sink = defs.resolve_assets_def(dg.AssetKey(["lake", ns, "orders_clean"]))
    assert sink.partitions_def is not None
    assert sink.partitions_def.get_partition_keys() == [window], "partitions begin at the source's first commit"
