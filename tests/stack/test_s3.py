"""An S3 warehouse on the stack's S3-compatible server (moto), through pyiceberg and through Spark.

The Leader's planning, the registry, the sink commits' lineage and the lag all go through pyiceberg,
so they are checked here against real S3 requests. Spark's Borrowers write the same bucket through
Iceberg's ``S3FileIO`` from ``iceberg-aws-bundle``, resolved from Maven Central by its coordinate.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import boto3
import pytest
import yaml
from pyspark.sql import SparkSession

from icegroup.iceberg.config.lakehouse import LakehouseConfig, load_lakehouse
from icegroup.iceberg.leader import tick
from icegroup.iceberg.protocol.liveness import RunState
from icegroup.iceberg.store.registry import load_state
from icegroup.iceberg.verify import verify_group
from icegroup.infra.stack_layout import BUCKET, S3_KEYS
from icegroup.spark_jobs.session import get_session
from tests.factories import MakeGroup, append_batches, create_source, write_groups
from tests.integration.helpers import drive
from tests.sink_commits import commit_lease
from tests.stack_env import scratch_database, stack_layout

ICEGROUP = str(Path(sys.executable).with_name("icegroup"))


@pytest.fixture
def s3_env(tmp_path: Path) -> dict[str, str]:
    """The variables that select the stack's S3 lakehouse (a SQL catalog) with a catalog database of its own."""
    config = yaml.safe_load((stack_layout().folder / "lakehouse-s3.yaml").read_text())
    path = tmp_path / "lakehouse.yaml"
    path.write_text(yaml.safe_dump({**config, "warehouse": f"s3://{BUCKET}/{tmp_path.name}"}))
    uri = stack_layout().catalog_uri(scratch_database("lake_s3"))
    return {"ICEGROUP_LAKEHOUSE": str(path), "ICEGROUP_CATALOG_URI": uri}


@pytest.fixture
def s3_lakehouse(s3_env: dict[str, str]) -> LakehouseConfig:
    """The stack's S3 lakehouse config, loaded in this process."""
    return load_lakehouse(
        Path(s3_env["ICEGROUP_LAKEHOUSE"]), env={"ICEGROUP_CATALOG_URI": s3_env["ICEGROUP_CATALOG_URI"]}
    )


def bucket_keys(prefix: str) -> list[str]:
    """The object keys under ``prefix`` in the stack's bucket, listed with boto3."""
    layout = stack_layout()
    client = boto3.client(
        "s3",
        endpoint_url=layout.s3_endpoint,
        aws_access_key_id=S3_KEYS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=S3_KEYS["AWS_SECRET_ACCESS_KEY"],
        region_name=S3_KEYS["AWS_REGION"],
    )
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
    return [item["Key"] for page in pages for item in page.get("Contents", [])]


def test_the_leader_plans_and_the_registry_commits_in_an_s3_warehouse(
    s3_lakehouse: LakehouseConfig, make_group: MakeGroup
) -> None:
    catalog = s3_lakehouse.catalog()
    group = make_group()
    rows = append_batches(create_source(catalog, group.source), 3, 20)

    done: set[tuple[str, int]] = set()
    planned = 0
    for _ in range(20):
        result = tick(
            catalog,
            group,
            lambda lease: RunState.SUCCEEDED if (lease.lease_id, lease.attempt) in done else RunState.MISSING,
        )
        if result.caught_up:
            break
        for lease in result.launch:
            commit_lease(catalog, group, result.state, lease)
            planned += sum(result.state.shards[shard_id].rows for shard_id in lease.shard_ids)
            done.add((lease.lease_id, lease.attempt))
    else:
        pytest.fail("not caught up in 20 ticks")

    state = load_state(catalog, group.name).state
    assert state is not None
    assert state.is_idle()
    assert planned == rows, "the Leader planned every source row once"
    assert len(catalog.load_table(group.sink).scan().to_arrow()) == rows
    keys = bucket_keys(s3_lakehouse.warehouse.removeprefix(f"s3://{BUCKET}/"))
    for table in (group.source, group.sink):
        location = catalog.load_table(table).location().removeprefix(f"s3://{BUCKET}/")
        assert any(key.startswith(f"{location}/metadata/") for key in keys), f"{table}: its metadata in the bucket"
        assert any(key.startswith(f"{location}/data/") for key in keys), f"{table}: its data in the bucket"


def test_spark_borrowers_consume_exactly_once_in_an_s3_warehouse(
    s3_lakehouse: LakehouseConfig, make_group: MakeGroup
) -> None:
    spark: SparkSession = get_session(s3_lakehouse)
    catalog = s3_lakehouse.catalog()
    group = make_group()
    append_batches(create_source(catalog, group.source), 3, 20)

    drive(spark, s3_lakehouse, group)

    assert verify_group(catalog, group, key="event_id").ok


def test_the_icegroup_command_consumes_into_s3_with_the_jars_it_resolves_itself(
    s3_env: dict[str, str], s3_lakehouse: LakehouseConfig, make_group: MakeGroup, tmp_path: Path
) -> None:
    catalog = s3_lakehouse.catalog()
    group = make_group()
    rows = append_batches(create_source(catalog, group.source), 3, 20)
    groups = write_groups(tmp_path / "groups.yaml", group)
    env = {key: value for key, value in os.environ.items() if not key.startswith("ICEGROUP_")}
    env.update({**s3_env, "ICEGROUP_GROUPS": str(groups), "ICEGROUP_HOME": str(tmp_path)})

    done = subprocess.run(
        [ICEGROUP, "consume", group.name, "--until-caught-up"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )

    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert verify_group(catalog, group, key="event_id").ok
    assert len(catalog.load_table(group.sink).scan().to_arrow()) == rows
    location = catalog.load_table(group.sink).location().removeprefix(f"s3://{BUCKET}/")
    # The executors wrote these through S3FileIO: the AWS bundle icegroup chose reached the cluster's workers.
    assert any(key.startswith(f"{location}/data/") for key in bucket_keys(location)), "Spark wrote the sink to S3"
