"""An S3 warehouse on the stack's S3-compatible server (moto), through pyiceberg and through Spark.

The Leader's planning, the registry, the sink commits' lineage and the lag all go through pyiceberg,
so they are checked here against real S3 requests. Spark's Borrowers write the same bucket through
Iceberg's ``S3FileIO`` from ``iceberg-aws-bundle``, resolved from Maven Central by its coordinate.
"""

from __future__ import annotations

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
from tests.factories import MakeGroup, append_batches, create_source
from tests.integration.helpers import drive
from tests.sink_commits import commit_lease
from tests.stack_env import scratch_database, stack_layout


@pytest.fixture
def s3_lakehouse(tmp_path: Path) -> LakehouseConfig:
    """The stack's S3 lakehouse config (a SQL catalog), with a catalog database of its own in the stack's PostgreSQL."""
    config = yaml.safe_load((stack_layout().folder / "lakehouse-s3.yaml").read_text())
    path = tmp_path / "lakehouse.yaml"
    path.write_text(yaml.safe_dump({**config, "warehouse": f"s3://{BUCKET}/{tmp_path.name}"}))
    return load_lakehouse(path, env={"ICEGROUP_CATALOG_URI": stack_layout().catalog_uri(scratch_database("lake_s3"))})


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
