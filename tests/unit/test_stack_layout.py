"""The scale-out stack's configs and its process bookkeeping, without starting the stack."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

from icegroup.iceberg.config.lakehouse import LakehouseConfig
from icegroup.infra.processes import MEMBER, members, terminate
from icegroup.infra.stack_layout import Layout, lakehouse_config, rest_secret, s3_lakehouse_config, stack_env


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
