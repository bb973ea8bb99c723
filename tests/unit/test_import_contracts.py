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
# Not sources: bytecode, and what `make jvm` builds and fetches (none of it is tracked: .gitignore).
BUILT = shutil.ignore_patterns("__pycache__", "target", "lib", "*.jar")


def lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    """Run lint-imports on ``tree`` (a copy of the ``icegroup`` package) with it first on the path."""
    env = {**os.environ, "PYTHONPATH": str(tree.parent)}
    command = [str(Path(sys.executable).with_name("lint-imports")), "--config", str(tree / "pyproject.toml")]
    return subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of the ``icegroup`` package (its four folders' sources) and the contracts.

    What ``make jvm`` builds and fetches there (Maven's ``target``, the REST servers' ``lib`` of jars,
    175 MB in all) is left out: a copy per test filled gigabytes of a CI machine's disk.
    """
    package_root = tmp_path / "icegroup"
    for package in PACKAGES:
        shutil.copytree(repo_root() / package, package_root / package, ignore=BUILT)
    (package_root / "__init__.py").write_text('"""A copy of icegroup."""\n')
    shutil.copy(repo_root() / "pyproject.toml", package_root / "pyproject.toml")
    return package_root


def test_the_tree_as_it_is_keeps_every_contract(tree: Path) -> None:
    result = lint_imports(tree)

    assert result.returncode == 0, result.stdout
    assert "iceberg/protocol/ does no I/O KEPT" in result.stdout
    assert "iceberg/ rooms point down KEPT" in result.stdout
    assert "spark_jobs/ rooms point down KEPT" in result.stdout
    assert "dagster_project/ rooms point down KEPT" in result.stdout


@pytest.mark.parametrize(
    "line",
    [
        "from pyiceberg.catalog import Catalog",
        "from pyiceberg.table import Table",
        "from icegroup.iceberg.store.registry import load_state",
        "from icegroup.iceberg.config.lakehouse import LakehouseConfig",
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
        (("store", "registry.py"), "from icegroup.iceberg.leader import tick"),
        (("config", "lakehouse.py"), "from icegroup.iceberg.store.tables import load_optional"),
        (("protocol", "state.py"), "from icegroup.iceberg.describe import describe_group"),
        (("errors.py",), "from icegroup.iceberg.protocol.state import GroupState"),
    ],
    ids=["store-reaches-a-concept", "config-reaches-the-store", "protocol-reaches-a-concept", "errors-reach-up"],
)
def test_a_room_of_iceberg_may_not_import_one_above_it(tree: Path, module: tuple[str, ...], line: str) -> None:
    path = tree.joinpath("iceberg", *module)
    path.write_text(path.read_text() + f"\n{line}  # noqa\n")

    result = lint_imports(tree)

    assert result.returncode != 0
    assert "iceberg/ rooms point down BROKEN" in result.stdout


@pytest.mark.parametrize(
    ("package", "module", "line"),
    [
        ("spark_jobs", ("sink", "migrate.py"), "from icegroup.spark_jobs.shards import read_shard"),
        ("spark_jobs", ("session.py",), "from icegroup.spark_jobs.borrower.lease import run_lease"),
        ("dagster_project", ("definitions.py",), "from icegroup.dagster_project.cli.support import GROUP_HELP"),
        ("dagster_project", ("assets.py",), "from icegroup.dagster_project.jobs import borrower_job"),
    ],
    ids=["sink-reaches-the-reader", "session-reaches-the-lease", "location-reaches-the-cli", "asset-reaches-a-job"],
)
def test_a_room_of_spark_jobs_or_dagster_project_may_not_import_one_above_it(
    tree: Path, package: str, module: tuple[str, ...], line: str
) -> None:
    path = tree.joinpath(package, *module)
    path.write_text(path.read_text() + f"\n{line}  # noqa\n")

    result = lint_imports(tree)

    assert result.returncode != 0
    assert f"{package}/ rooms point down BROKEN" in result.stdout


def test_a_new_module_of_iceberg_must_take_a_layer(tree: Path) -> None:
    (tree / "iceberg" / "newcomer.py").write_text('"""A module no layer names yet."""\n')

    result = lint_imports(tree)

    assert result.returncode != 0
    assert "iceberg/ rooms point down BROKEN" in result.stdout
    assert "newcomer" in result.stdout
