"""Where the icegroup command finds its configs (iceberg/config/search.py), and `icegroup init`."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from icegroup.iceberg.config.lakehouse import load_lakehouse
from icegroup.iceberg.config.search import Places, find_groups, find_lakehouse
from icegroup.iceberg.errors import ConfigError
from tests.factories import SCHEMA

ICEGROUP = str(Path(sys.executable).with_name("icegroup"))


def places(tmp_path: Path, **env: str) -> Places:
    (tmp_path / "cwd").mkdir(exist_ok=True)
    (tmp_path / "home").mkdir(exist_ok=True)
    return Places(cwd=tmp_path / "cwd", home=tmp_path / "home", env=env)


def touch(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("groups: []\n")
    return path


def test_the_flag_wins_over_everything(tmp_path: Path) -> None:
    where = places(tmp_path, ICEGROUP_LAKEHOUSE=str(touch(tmp_path / "env.yaml")))
    touch(where.cwd / "lakehouse.yaml")
    flag = touch(tmp_path / "flag.yaml")

    found = find_lakehouse(str(flag), where)

    assert (found.how, found.file) == ("--lakehouse", flag.resolve())


def test_the_variable_comes_before_the_current_folder(tmp_path: Path) -> None:
    env_file = touch(tmp_path / "env.yaml")
    where = places(tmp_path, ICEGROUP_GROUPS=str(env_file))
    touch(where.cwd / "groups.yaml")

    assert find_groups(None, where).file == env_file.resolve()


def test_the_current_folder_comes_before_the_home_folder(tmp_path: Path) -> None:
    where = places(tmp_path)
    here = touch(where.cwd / "lakehouse.yaml")
    touch(where.home / ".icegroup" / "lakehouse.yaml")

    assert (find_lakehouse(None, where).how, find_lakehouse(None, where).file) == ("./lakehouse.yaml", here.resolve())


def test_the_home_folder_is_the_last_file(tmp_path: Path) -> None:
    where = places(tmp_path)
    home = touch(where.home / ".icegroup" / "groups.yaml")

    assert find_groups(None, where).file == home.resolve()


def test_a_named_file_that_is_missing_is_an_error_not_a_fall_through(tmp_path: Path) -> None:
    where = places(tmp_path, ICEGROUP_LAKEHOUSE=str(tmp_path / "typo.yaml"))
    touch(where.cwd / "lakehouse.yaml")

    with pytest.raises(ConfigError, match=r"\$ICEGROUP_LAKEHOUSE: .*typo.yaml does not exist"):
        find_lakehouse(None, where)


def test_icegroup_home_names_a_local_lake(tmp_path: Path) -> None:
    where = places(tmp_path, ICEGROUP_HOME=str(tmp_path / "lakehome"))

    found = find_lakehouse(None, where)

    assert (found.file, found.lake_home) == (None, (tmp_path / "lakehome").resolve())


def test_an_existing_local_lake_in_the_current_folder_is_found(tmp_path: Path) -> None:
    where = places(tmp_path)
    touch(where.cwd / ".lake" / "catalog.db")

    assert find_lakehouse(None, where).how == "./.lake"


def test_nothing_found_names_every_place_and_the_fix(tmp_path: Path) -> None:
    where = places(tmp_path)

    with pytest.raises(ConfigError) as lakehouse:
        find_lakehouse(None, where)
    with pytest.raises(ConfigError) as groups:
        find_groups(None, where)

    for needle in ("--lakehouse", "$ICEGROUP_LAKEHOUSE", "./lakehouse.yaml", "~/.icegroup/lakehouse.yaml", "init"):
        assert needle in str(lakehouse.value)
    for needle in ("--groups", "$ICEGROUP_GROUPS", "./groups.yaml", "~/.icegroup/groups.yaml", "init"):
        assert needle in str(groups.value)


def test_relative_paths_in_a_lakehouse_file_are_read_from_its_folder(tmp_path: Path) -> None:
    config = tmp_path / "project" / "lakehouse.yaml"
    config.parent.mkdir()
    config.write_text("catalog_uri: sqlite:///.lake/catalog.db\nwarehouse: .lake/warehouse\n")

    lakehouse = load_lakehouse(config, env={})

    assert lakehouse.catalog_uri == f"sqlite:///{config.parent.resolve()}/.lake/catalog.db"
    assert lakehouse.warehouse == str(config.parent.resolve() / ".lake" / "warehouse")


def test_a_missing_local_catalog_is_named_not_created(tmp_path: Path) -> None:
    lakehouse = load_lakehouse(None, env={"ICEGROUP_HOME": str(tmp_path)})

    assert "no lake at" in (lakehouse.missing_lake() or "")
    assert "icegroup init" in (lakehouse.missing_lake() or "")
    assert not (tmp_path / ".lake").exists()


def test_a_mistyped_catalog_path_names_the_lakes_beside_it_and_does_not_lead_with_init(tmp_path: Path) -> None:
    lake = tmp_path / ".lake"
    lake.mkdir()
    sqlite3.connect(lake / "catalog.db").execute("create table t (x)").connection.close()
    (lake / "notes.db").write_text("not a database")
    lakehouse = load_lakehouse(
        None, env={"ICEGROUP_CATALOG_URI": f"sqlite:///{lake}/catalg.db", "ICEGROUP_WAREHOUSE": str(lake)}
    )

    message = lakehouse.missing_lake() or ""
    assert f"no lake at {lake}/catalg.db" in message
    assert f"lakes that do exist near it: {lake}/catalog.db." in message, "a file that is no SQLite is no lake"
    assert message.index("Fix catalog_uri") < message.index("icegroup init"), "init is the last advice"


def cli(folder: Path, *args: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home)}
    return subprocess.run([ICEGROUP, *args], cwd=folder, env=env, capture_output=True, text=True, timeout=120)


def test_a_read_only_command_outside_any_lake_creates_nothing_and_says_where_it_looked(tmp_path: Path) -> None:
    listed = cli(tmp_path, "list", home=tmp_path)

    assert listed.returncode == 2
    assert listed.stderr.startswith("icegroup: error: no lakehouse config found; looked for --lakehouse FILE")
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_lakehouse_file_naming_a_lake_that_does_not_exist_is_an_error_and_creates_nothing(tmp_path: Path) -> None:
    (tmp_path / "lakehouse.yaml").write_text("catalog_uri: sqlite:///nowhere/catalog.db\nwarehouse: nowhere/w\n")
    (tmp_path / "groups.yaml").write_text("groups: []\n")

    listed = cli(tmp_path, "list", home=tmp_path)

    assert listed.returncode == 2
    assert f"no lake at {tmp_path.resolve()}/nowhere/catalog.db" in listed.stderr
    assert "(lakehouse config from ./lakehouse.yaml)" in listed.stderr
    assert not (tmp_path / "nowhere").exists()


def test_init_starts_a_lake_that_list_then_finds_and_never_overwrites(tmp_path: Path) -> None:
    first = cli(tmp_path, "init", home=tmp_path)
    (tmp_path / "groups.yaml").write_text("groups: []  # mine\n")
    again = cli(tmp_path, "init", home=tmp_path)
    listed = cli(tmp_path, "list", home=tmp_path)

    assert first.returncode == 0, first.stderr
    assert (tmp_path / ".lake" / "catalog.db").is_file()
    assert "kept" in again.stdout
    assert (tmp_path / "groups.yaml").read_text() == "groups: []  # mine\n"
    assert listed.returncode == 0, listed.stderr


def test_version_prints_the_installed_version() -> None:
    shown = subprocess.run([ICEGROUP, "--version"], capture_output=True, text=True, check=True)

    assert shown.stdout.strip().startswith("icegroup 0.")


def test_read_only_commands_and_previews_create_no_table(tmp_path: Path) -> None:
    assert cli(tmp_path, "init", home=tmp_path).returncode == 0
    catalog = load_lakehouse(tmp_path / "lakehouse.yaml", env={}).catalog()
    catalog.create_namespace("shop")
    source = catalog.create_table("shop.orders", schema=pa.schema([("order_id", pa.int64())]))
    source.append(pa.table({"order_id": [1, 2, 3]}))
    (tmp_path / "groups.yaml").write_text("groups:\n  - {name: orders, source: shop.orders, sink: shop.orders_copy}\n")

    ran = [
        cli(tmp_path, *command.split(), home=tmp_path)
        for command in ("list", "describe orders", "checkpoints orders", "dead-letters orders", "delete orders")
    ]

    assert [r.returncode for r in ran] == [0] * len(ran), [r.stderr for r in ran]
    assert catalog.list_tables("shop") == [("shop", "orders")]
    assert sorted(p.name for p in tmp_path.iterdir()) == [".lake", "groups.yaml", "lakehouse.yaml"]


def test_metrics_and_describe_plot_only_read_and_create_no_dagster_folder(tmp_path: Path) -> None:
    assert cli(tmp_path, "init", home=tmp_path).returncode == 0
    (tmp_path / "groups.yaml").write_text("groups:\n  - {name: g1, source: shop.orders, sink: shop.orders_copy}\n")
    catalog = load_lakehouse(tmp_path / "lakehouse.yaml", env={}).catalog()
    catalog.create_namespace_if_not_exists("shop")
    catalog.create_table("shop.orders", schema=SCHEMA)

    metrics = cli(tmp_path, "metrics", home=tmp_path)
    described = cli(tmp_path, "describe", "g1", "--plot", home=tmp_path)

    assert metrics.returncode == 0, metrics.stderr
    assert described.returncode == 0, described.stderr
    assert "no lease observed" in described.stdout
    assert not (tmp_path / ".dagster").exists(), "a command that only reads created the Dagster instance's folder"
