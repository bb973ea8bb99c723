"""The import contracts are real: a copy of the tree that breaks one fails `lint-imports`."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import repo_root

PACKAGES = ("iceberg", "spark_jobs", "dagster_project", "infra")


def lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    """Run lint-imports on ``tree`` with its own packages first on the path."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    command = [str(Path(sys.executable).with_name("lint-imports")), "--config", str(tree / "pyproject.toml")]
    return subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of the packages and the contracts."""
    for package in PACKAGES:
        shutil.copytree(repo_root() / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(repo_root() / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_the_tree_as_it_is_keeps_every_contract(tree: Path) -> None:
    result = lint_imports(tree)

    assert result.returncode == 0, result.stdout
    assert "iceberg/protocol/ does no I/O KEPT" in result.stdout
    assert "iceberg/ rooms point down KEPT" in result.stdout


@pytest.mark.parametrize(
    "line",
    [
        "from pyiceberg.catalog import Catalog",
        "from pyiceberg.table import Table",
        "from iceberg.store.registry import load_state",
        "from iceberg.config.lakehouse import LakehouseConfig",
        "import yaml",
        "import sqlalchemy",
        "import pyarrow",
        "import openlineage.client",
    ],
)
def test_the_protocol_package_may_not_import_catalog_or_store_code(tree: Path, line: str) -> None:
    module = tree / "iceberg" / "protocol" / "state.py"
    module.write_text(module.read_text() + f"\n{line}  # noqa\n")

    result = lint_imports(tree)

    assert result.returncode != 0
    assert "iceberg/protocol/ does no I/O BROKEN" in result.stdout


@pytest.mark.parametrize(
    ("module", "line"),
    [
        (("store", "registry.py"), "from iceberg.leader import tick"),
        (("config", "lakehouse.py"), "from iceberg.store.tables import load_optional"),
        (("protocol", "state.py"), "from iceberg.describe import describe_group"),
        (("errors.py",), "from iceberg.protocol.state import GroupState"),
    ],
    ids=["store-reaches-a-concept", "config-reaches-the-store", "protocol-reaches-a-concept", "errors-reach-up"],
)
def test_a_room_of_iceberg_may_not_import_one_above_it(tree: Path, module: tuple[str, ...], line: str) -> None:
    path = tree.joinpath("iceberg", *module)
    path.write_text(path.read_text() + f"\n{line}  # noqa\n")

    result = lint_imports(tree)

    assert result.returncode != 0
    assert "iceberg/ rooms point down BROKEN" in result.stdout


def test_a_new_module_of_iceberg_must_take_a_layer(tree: Path) -> None:
    (tree / "iceberg" / "newcomer.py").write_text('"""A module no layer names yet."""\n')

    result = lint_imports(tree)

    assert result.returncode != 0
    assert "iceberg/ rooms point down BROKEN" in result.stdout
    assert "newcomer" in result.stdout
