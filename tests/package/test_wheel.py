"""The wheel as a user gets it: built from the repo, installed in a clean virtualenv, run outside the checkout.

The virtualenv is made by the machine's own Python, not the checkout's, and nothing of the checkout
is on its path: the `icegroup` command, the library, the compiled jars and the Dagster component all
come from the wheel. The versions are held to requirements.lock, so this tests what CI tested, and
uv's cache (filled by `make venv`) keeps the install to seconds.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.docs.console import run_page
from tests.docs.test_docs_console import WHEEL_PAGES

pytestmark = [pytest.mark.package]

REPO = Path(__file__).resolve().parents[2]
UV = str(Path(sys.executable).with_name("uv"))
BASE_PYTHON = Path(sys.base_prefix) / "bin" / "python3"


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The bin folder of a clean virtualenv with only the built wheel (and its dependencies) installed."""
    root = tmp_path_factory.mktemp("wheel")
    dist = root / "dist"
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dist), str(REPO)],
        capture_output=True,
        text=True,
        cwd=root,
    )
    assert built.returncode == 0, built.stderr
    wheel = next(dist.glob("icegroup-*.whl"))
    venv = root / "venv"
    subprocess.run([str(BASE_PYTHON), "-m", "venv", str(venv)], check=True)
    install = subprocess.run(
        [UV, "pip", "install", "-q", "--python", str(venv / "bin" / "python"), str(wheel), "-c", "requirements.lock"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert install.returncode == 0, install.stderr
    yield venv / "bin"
    shutil.rmtree(root, ignore_errors=True)


def user_env(bin_dir: Path, home: Path) -> dict[str, str]:
    """A new user's shell: the virtualenv's bin first, no icegroup, Dagster, Spark or Python path settings."""
    dropped = ("ICEGROUP_", "PYICEBERG_", "DAGSTER_", "VIRTUAL_ENV", "SPARK_", "PYSPARK_", "PYTHONPATH")
    env = {key: value for key, value in os.environ.items() if not key.startswith(dropped)}
    env.update({"HOME": str(home), "PATH": f"{bin_dir}:/usr/bin:/bin", "NO_COLOR": "1", "TERM": "dumb"})
    return env


def test_the_wheel_holds_the_command_the_library_and_the_jars_and_nothing_from_the_checkout(
    installed: Path, tmp_path: Path
) -> None:
    env = user_env(installed, tmp_path)
    version = subprocess.run(["icegroup", "--version"], env=env, cwd=tmp_path, capture_output=True, text=True)
    where = subprocess.run(
        [
            "python",
            "-c",
            "import icegroup.dagster_project.components, icegroup.spark_jobs.jars as j; "
            "print(j.ICEGROUP_JAR.is_file(), j.__file__)",
        ],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )

    assert version.stdout.strip() == "icegroup 0.1.0", version.stderr
    assert where.returncode == 0, where.stderr
    own_jar, module = where.stdout.split()
    assert own_jar == "True"
    assert module.startswith(str(installed.parent)), module
    jars = sorted(installed.parent.glob("lib/python*/site-packages/**/*.jar"))
    assert [jar.name for jar in jars if "pyspark" not in jar.parts] == ["icegroup-spark.jar"], "the wheel's one jar"


@pytest.mark.spark
def test_the_tutorial_works_from_the_wheel_outside_the_checkout(installed: Path, tmp_path: Path) -> None:
    workdir = tmp_path / "work"
    workdir.mkdir()

    (page,) = WHEEL_PAGES
    mismatches = run_page(REPO / page, workdir, user_env(installed, tmp_path))

    assert mismatches == [], "\n\n".join(mismatches)
