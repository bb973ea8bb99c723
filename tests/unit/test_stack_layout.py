"""The scale-out stack's configs and its process bookkeeping, without starting the stack."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest
import yaml

from icegroup.iceberg.config.lakehouse import LakehouseConfig
from icegroup.infra.processes import MEMBER, members, terminate
from icegroup.infra.rest_fixture import FixtureServer, server_env
from icegroup.infra.stack_layout import (
    Layout,
    dagster_config,
    lakehouse_config,
    rest_secret,
    s3_lakehouse_config,
    stack_env,
)

REPO = Path(__file__).resolve().parents[2]


def test_the_stacks_lakehouse_is_a_valid_config_on_the_rest_catalog_and_the_cluster(tmp_path: Path) -> None:
    layout = Layout(folder=tmp_path)

    lakehouse = LakehouseConfig.model_validate(lakehouse_config(layout))

    assert lakehouse.catalog_uri is None
    assert lakehouse.rest is not None
    assert (lakehouse.rest.uri, lakehouse.rest.warehouse) == ("http://127.0.0.1:18181", "lake")
    assert lakehouse.heartbeats_uri == "postgresql+psycopg2://postgres@127.0.0.1:55432/dagster"
    assert lakehouse.spark_master == "spark://127.0.0.1:17077"
    assert lakehouse.jars is None, "the cluster's driver resolves the coordinates and serves the jars to its workers"
    assert lakehouse.spark.conf()["spark.cores.max"] == "1"
    assert lakehouse.spark.python == sys.executable


def test_the_stacks_s3_lakehouse_reaches_its_s3_server_without_keys_in_the_file(tmp_path: Path) -> None:
    layout = Layout(folder=tmp_path)

    lakehouse = LakehouseConfig.model_validate(s3_lakehouse_config(layout))

    props = lakehouse.pyiceberg_properties()
    assert props["warehouse"] == "s3://icegroup/warehouse"
    assert props["s3.endpoint"] == "http://127.0.0.1:19000"
    assert props["s3.force-virtual-addressing"] == "false"
    assert "AWS_SECRET_ACCESS_KEY" in stack_env(layout), "the keys are in the environment the stack writes"


def test_the_rest_credential_is_made_once_kept_from_other_users_and_only_in_the_environment(tmp_path: Path) -> None:
    layout = Layout(folder=tmp_path)

    first, again = stack_env(layout)["ICEGROUP_REST_CREDENTIAL"], stack_env(layout)["ICEGROUP_REST_CREDENTIAL"]

    assert first == again
    assert first == f"icegroup-stack:{rest_secret(layout)}"
    assert (tmp_path / "rest-secret").stat().st_mode & 0o077 == 0
    assert rest_secret(layout) not in yaml.safe_dump(lakehouse_config(layout))


def test_down_finds_a_stack_process_by_its_mark_and_leaves_none(tmp_path: Path) -> None:
    env = {**os.environ, MEMBER: str(tmp_path)}
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert members(tmp_path) == [child.pid]

        terminate(members(tmp_path), grace_s=5)
        child.wait(timeout=5)

        assert members(tmp_path) == []
        assert other.poll() is None, "a process without the mark is left alone"
    finally:
        for process in (child, other):
            process.kill()
            process.wait()


def test_on_the_fixture_and_nessie_the_lakehouse_reaches_their_s3_warehouse_and_holds_no_credential(
    tmp_path: Path,
) -> None:
    fixture = LakehouseConfig.model_validate(lakehouse_config(Layout(folder=tmp_path, catalog="fixture")))
    nessie = LakehouseConfig.model_validate(lakehouse_config(Layout(folder=tmp_path, catalog="nessie")))

    assert fixture.rest is not None
    assert (fixture.rest.uri, fixture.rest.warehouse) == ("http://127.0.0.1:18181", None), "one catalog: no name"
    assert nessie.rest is not None
    assert (nessie.rest.uri, nessie.rest.warehouse) == ("http://127.0.0.1:19120/iceberg", "warehouse")
    assert fixture.on_s3, "Spark gets S3FileIO and the AWS bundle for a REST catalog's S3 warehouse"
    assert nessie.pyiceberg_s3_properties()["s3.endpoint"] == "http://127.0.0.1:19000"
    assert "ICEGROUP_REST_CREDENTIAL" not in stack_env(Layout(folder=tmp_path, catalog="fixture"))


def test_a_catalog_the_stack_cannot_run_is_refused_naming_the_ones_it_can(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="use icegroup, fixture, nessie"):
        Layout(folder=tmp_path, catalog="polaris")


def test_the_fixture_reads_each_property_from_the_variable_its_name_maps_to() -> None:
    settings = FixtureServer(jdbc_url="jdbc:sqlite:/tmp/c.db", warehouse="s3://b/w", s3_endpoint="http://s3:9000")

    env = server_env(settings, {"CATALOG_STRAY": "x", "HOME": "/root"})

    assert env["CATALOG_S3_PATH__STYLE__ACCESS"] == "true"
    assert env["CATALOG_JDBC_SCHEMA__VERSION"] == "V1"
    assert env["CATALOG_IO__IMPL"] == "org.apache.iceberg.aws.s3.S3FileIO"
    assert env["CATALOG_URI"] == "jdbc:icegroup-sqlite:/tmp/c.db?busy_timeout=30000&journal_mode=WAL"
    assert "CATALOG_STRAY" not in env, "an inherited CATALOG_* variable would become a catalog property"
    assert env["HOME"] == "/root"


@pytest.mark.parametrize("instance", ["embedded", "stack"])
def test_the_instances_queue_hands_a_requested_run_on_within_a_second(tmp_path: Path, instance: str) -> None:
    home = tmp_path / "dagster_home"
    home.mkdir()
    config = (
        (REPO / "infra" / "dagster.yaml").read_text()
        if instance == "embedded"
        else yaml.safe_dump(dagster_config(Layout(folder=tmp_path)))
    )
    if instance == "stack":  # the stack's PostgreSQL is not up here; the queue's config is what is judged
        config = yaml.safe_dump({**yaml.safe_load(config), "storage": {"sqlite": {"base_dir": str(home)}}})
    (home / "dagster.yaml").write_text(config)

    with dg.DagsterInstance.from_config(str(home)) as opened:
        assert opened.run_coordinator.dequeue_interval_seconds == 1  # type: ignore[attr-defined]
