"""The wheel as a user gets it: built from the repo, installed in a clean virtualenv, run outside the checkout.

The virtualenv is made by the machine's own Python, not the checkout's, and nothing of the checkout
is on its path: the `icegroup` command, the library, icegroup's jar and the Dagster component all
come from the wheel, and Spark fetches the Iceberg runtime from Maven Central into a new home, as
it would for a new user. Two installs: one held to requirements.lock (Spark 3.5, what CI tested),
and one with nothing pinned, as `pip install` resolves it for a new user (the newest pyspark the
ranges allow: Spark 4.0). Next to icegroup sit a team's own packages named `iceberg` and
`dagster_project`, names icegroup's folders have in the checkout: they must not clash.
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


TEAM_PACKAGES = ("iceberg", "dagster_project")


@pytest.fixture(scope="module", params=["pinned", "newest"])
def installed(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The bin folder of a clean virtualenv with the built wheel, its dependencies and a team's own packages."""
    root = tmp_path_factory.mktemp(f"{request.param}-wheel")
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
    pins = ["-c", "requirements.lock"] if request.param == "pinned" else []
    install = subprocess.run(
        [UV, "pip", "install", "-q", "--python", str(venv / "bin" / "python"), str(wheel), *pins],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert install.returncode == 0, install.stderr
    (site_packages,) = venv.glob("lib/python3*/site-packages")
    for name in TEAM_PACKAGES:
        (site_packages / name).mkdir()
        (site_packages / name / "__init__.py").write_text(f'"""A team\'s own {name}."""\n\nOWNER = "team"\n')
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
            "import iceberg, dagster_project, pyspark; "
            "print(j.ICEGROUP_JAR.is_file(), j.__file__, pyspark.__version__, iceberg.OWNER, dagster_project.OWNER)",
        ],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )

    assert version.stdout.strip() == "icegroup 0.1.0", version.stderr
    assert where.returncode == 0, where.stderr
    own_jar, module, spark, *owners = where.stdout.split()
    assert own_jar == "True"
    assert spark.startswith("3.5." if installed.parent.parent.name.startswith("pinned") else "4.0."), spark
    assert owners == ["team", "team"], "the team's own iceberg and dagster_project are theirs"
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
