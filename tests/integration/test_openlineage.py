"""OpenLineage events of Borrower and replay runs, read back from the client's file transport.

Each event, and each of its facets, is validated against OpenLineage's published JSON schemas
(``tests/openlineage_events.py``) and checked against the sink's own commits: the versions the
events name are the snapshots the runs really read and wrote, the schema facet holds the table's
columns, and the column lineage holds what the transform's plan makes of the source's columns.
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.catalog import Catalog
from pyspark.sql import SparkSession

from icegroup.dagster_project.openlineage_runs import expire_run, reset_run
from icegroup.iceberg.config.lakehouse import LakehouseConfig
from icegroup.iceberg.config.sections import OpenLineageSettings
from icegroup.iceberg.errors import StaleLease
from icegroup.iceberg.leader import tick
from icegroup.iceberg.openlineage import run_events
from icegroup.iceberg.protocol.fences import fence_key
from icegroup.iceberg.protocol.liveness import RunState
from icegroup.iceberg.protocol.reset import ResetTarget
from icegroup.iceberg.protocol.retention import StateRetention
from icegroup.iceberg.protocol.shards import window_label
from icegroup.iceberg.store.fences import raise_fences
from icegroup.iceberg.store.registry import load_state
from icegroup.spark_jobs.borrower.lease import run_lease
from icegroup.spark_jobs.replay import replay_window
from tests.factories import MakeGroup, append_batches, create_source
from tests.integration.helpers import drive, quiet
from tests.openlineage_events import read_events as read_valid_events

pytestmark = pytest.mark.spark


def read_events(path: Path) -> list[dict[str, Any]]:
    """The events the file transport wrote, each valid against the published schemas and stamped with its zone."""
    events = read_valid_events(path)
    for event in events:
        assert datetime.fromisoformat(event["eventTime"]).tzinfo is not None
    return events


def columns(dataset: dict[str, Any]) -> list[str]:
    """The column names a dataset's schema facet holds."""
    return [field["name"] for field in dataset["facets"]["schema"]["fields"]]


def version(dataset: dict[str, Any]) -> int:
    """A dataset's version facet: the snapshot id."""
    return int(dataset["facets"]["version"]["datasetVersion"])


def test_lease_and_replay_runs_emit_start_and_complete_with_the_snapshots_they_read_and_wrote(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup, tmp_path: Path
) -> None:
    emitted = tmp_path / "openlineage.jsonl"
    settings = OpenLineageSettings(transport={"type": "file", "log_file_path": str(emitted), "append": True})
    traced = lakehouse.model_copy(update={"openlineage": settings})
    group = make_group(shard_caps={"max_files": 3}, commit_batch_rows=0)
    append_batches(create_source(catalog, group.source), 3, 12)
    drive(spark, traced, group)

    events = read_events(emitted)
    runs: dict[str, list[dict[str, Any]]] = {}
    for event in events:
        runs.setdefault(event["run"]["runId"], []).append(event)
    assert {tuple(e["eventType"] for e in run) for run in runs.values()} == {("START", "COMPLETE")}
    sink = catalog.load_table(group.sink)
    source = catalog.load_table(group.source)
    summaries = {
        s.snapshot_id: s.summary.additional_properties
        for s in sorted(sink.snapshots(), key=lambda s: s.sequence_number)
        if s.summary is not None and s.summary.get("icegroup.group") == group.name
    }
    by_lease: dict[str, list[int]] = {}
    for snapshot_id, props in summaries.items():
        by_lease.setdefault(props["icegroup.lease"], []).append(snapshot_id)
    written = set()
    for start, complete in runs.values():
        assert (complete["job"]["namespace"], complete["job"]["name"]) == ("icegroup", f"{group.name}.lease")
        assert complete["job"]["facets"]["jobType"]["jobType"] == "LEASE"
        [read] = start["inputs"]
        assert (read["namespace"], read["name"]) == ("file", source.location().removeprefix("file://"))
        [wrote] = complete["outputs"]
        summary = summaries[version(wrote)]
        lease = by_lease[summary["icegroup.lease"]]
        assert version(wrote) == lease[-1], "the output version is the lease's last commit"
        rows = sum(int(summaries[s]["added-records"]) for s in lease)
        assert wrote["outputFacets"]["outputStatistics"]["rowCount"] == rows
        shards = json.loads(summary["icegroup.shards"])
        assert version(read) == shards[-1]["to"], "the lease read through its last shard's end"
        written.add(version(wrote))
        assert columns(wrote) == [f.name for f in sink.schema().fields], "the sink's schema, in order"
        assert columns(read) == [f.name for f in source.schema().fields]
        lineage = wrote["facets"]["columnLineage"]["fields"]
        assert set(lineage) == set(columns(read)), "the identity transform copies every source column"
        for name, origin in lineage.items():
            [field] = origin["inputFields"]
            assert (field["namespace"], field["name"], field["field"]) == (read["namespace"], read["name"], name)
            assert field["transformations"][0]["subtype"] == "IDENTITY"
    assert written == {lease[-1] for lease in by_lease.values()}, "every lease of the group ran, once"

    window = window_label(int(time.time() * 1000), group.replay_window)
    report = replay_window(spark, traced, group, window, progress=quiet)
    start, complete = read_events(emitted)[-2:]
    assert (start["eventType"], complete["eventType"]) == ("START", "COMPLETE")
    assert complete["job"]["name"] == f"{group.name}.replay"
    assert version(complete["outputs"][0]) == report.sink_snapshot
    head = source.current_snapshot()
    assert head is not None
    assert version(start["inputs"][0]) == head.snapshot_id


def test_a_failed_lease_attempt_emits_fail_with_its_error_and_openlineage_is_off_by_default(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup, tmp_path: Path
) -> None:
    assert lakehouse.openlineage is None
    assert run_events(lakehouse, catalog, "g", "g.lease", "k", "ns.t", None).client is None, "off unless configured"

    emitted = tmp_path / "openlineage.jsonl"
    settings = OpenLineageSettings(transport={"type": "file", "log_file_path": str(emitted), "append": True})
    traced = lakehouse.model_copy(update={"openlineage": settings})
    group = make_group()
    append_batches(create_source(catalog, group.source), 1, 12)
    drive(spark, traced, group)
    append_batches(catalog.load_table(group.source), 1, 12)
    lease = tick(catalog, group, lambda _: RunState.MISSING).launch[0]
    state = load_state(catalog, group.name).state
    assert state is not None
    shards = [state.shards[sid] for sid in lease.shard_ids]
    raise_fences(catalog.load_table(group.sink), {fence_key(group.name, lease.lease_id): lease.attempt + 1})
    with pytest.raises(StaleLease):
        run_lease(spark, traced, group, lease, shards, progress=quiet)
    start, fail = read_events(emitted)[-2:]
    assert (start["eventType"], fail["eventType"]) == ("START", "FAIL")
    assert fail["run"]["runId"] == start["run"]["runId"]
    assert "StaleLease" in fail["run"]["facets"]["errorMessage"]["message"]


def test_a_projection_has_column_lineage_and_resets_and_expiries_are_runs_too(
    spark: SparkSession, lakehouse: LakehouseConfig, catalog: Catalog, make_group: MakeGroup, tmp_path: Path
) -> None:
    emitted = tmp_path / "openlineage.jsonl"
    settings = OpenLineageSettings(transport={"type": "file", "log_file_path": str(emitted), "append": True})
    traced = lakehouse.model_copy(update={"openlineage": settings})
    group = make_group(transform="icegroup.spark_jobs.transforms:enrich_events")
    append_batches(create_source(catalog, group.source), 2, 12)
    drive(spark, traced, group)

    complete = [e for e in read_events(emitted) if e["eventType"] == "COMPLETE"][-1]
    lineage = complete["outputs"][0]["facets"]["columnLineage"]["fields"]
    assert set(lineage) == {"event_id", "region", "event_ts", "amount", "amount_cents", "is_large"}
    [cents] = lineage["amount_cents"]["inputFields"]
    assert cents["field"] == "amount"
    assert cents["transformations"][0]["subtype"] == "TRANSFORMATION"
    assert "amount * " in cents["transformations"][0]["description"]
    assert lineage["event_id"]["inputFields"][0]["transformations"][0]["subtype"] == "IDENTITY"

    plan = reset_run(traced, group, ResetTarget("earliest"), keep_output=False)
    expired = expire_run(traced, {group.name: group}, StateRetention(1, timedelta(0)), execute=True)
    events = read_events(emitted)
    reset_start, reset_done = [e for e in events if e["job"]["name"] == f"{group.name}.reset"]
    assert (reset_start["eventType"], reset_done["eventType"]) == ("START", "COMPLETE")
    [sink_out] = reset_done["outputs"]
    assert version(sink_out) == plan.state.sink_cursor, "the reset wrote the sink up to its delete"
    assert reset_start["inputs"][0]["name"] == catalog.load_table(group.source).location().removeprefix("file://")
    expire_start, expire_done = [e for e in events if e["job"]["name"] == "expire"]
    assert expire_done["run"]["runId"] == expire_start["run"]["runId"]
    done = {p.table for p in expired if p.done}
    assert done, "the registry's older snapshots expire at least"
    outputs = {o["facets"]["symlinks"]["identifiers"][0]["name"].split(".", 1)[1] for o in expire_done["outputs"]}
    assert outputs == done
