"""Which transform code goes to a cluster's executors, and how it is packed (no JVM started)."""

from __future__ import annotations

import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from icegroup.spark_jobs.code_shipping import code_root, ships_code, zip_code
from tests.conftest import repo_root


@pytest.mark.parametrize(("master", "ships"), [("local[*]", False), ("local[2]", False), ("spark://h:7077", True)])
def test_only_a_cluster_master_gets_the_code_shipped(master: str, ships: bool) -> None:
    assert ships_code(master) is ships


def test_a_project_module_ships_its_whole_top_level_package() -> None:
    assert code_root("tests.integration.transforms") == repo_root() / "tests"


@pytest.mark.parametrize("module", ["pyspark.sql.functions", "json", "no_such_module_anywhere"])
def test_installed_standard_and_missing_modules_are_not_shipped(module: str) -> None:
    assert code_root(module) is None


def package(tmp_path: Path, body: str) -> Path:
    root = tmp_path / "src" / "mytransforms"
    (root / "__pycache__").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "clean.py").write_text(body)
    (root / "__pycache__" / "clean.cpython-311.pyc").write_bytes(b"\0")
    (root / "notes.txt").write_text("not code")
    return root


def test_the_zip_holds_the_package_sources_under_its_own_name(tmp_path: Path) -> None:
    archive = zip_code(package(tmp_path, "def f(df):\n    return df\n"), tmp_path / "out")

    with zipfile.ZipFile(archive) as opened:
        assert sorted(opened.namelist()) == ["mytransforms/__init__.py", "mytransforms/clean.py"]
        assert opened.read("mytransforms/clean.py") == b"def f(df):\n    return df\n"


def test_the_same_code_makes_the_same_zip_and_an_edit_a_new_one(tmp_path: Path) -> None:
    root = package(tmp_path, "def f(df):\n    return df\n")
    first = zip_code(root, tmp_path / "out")
    again = zip_code(root, tmp_path / "out")
    (root / "clean.py").write_text("def f(df):\n    return df.limit(1)\n")
    edited = zip_code(root, tmp_path / "out")

    assert first == again
    assert edited != first
    assert first.name.startswith("mytransforms-")


def test_a_namespace_package_is_shipped_from_its_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "nspkg").mkdir()
    (tmp_path / "nspkg" / "rules.py").write_text("def f(df):\n    return df\n")
    monkeypatch.syspath_prepend(str(tmp_path))

    assert code_root("nspkg.rules") == tmp_path / "nspkg"


def test_writers_of_the_same_zip_at_once_all_get_it(tmp_path: Path) -> None:
    root = package(tmp_path, "def f(df):\n    return df\n")
    with ThreadPoolExecutor(max_workers=8) as pool:
        archives = list(pool.map(lambda _: zip_code(root, tmp_path / "out"), range(32)))

    assert len(set(archives)) == 1
    assert zipfile.ZipFile(archives[0]).testzip() is None
    assert [p.name for p in (tmp_path / "out").iterdir()] == [archives[0].name], "no partial file is left"
