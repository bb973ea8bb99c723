"""OpenLineage events of Borrower and replay runs, read back from the client's file transport.

Each event is checked against the OpenLineage run-event schema (the parts of spec 2-0-2 that a
producer must fill, written out below: the spec's JSON file is not installable here) and against
the sink's own commits: the versions the events name are the snapshots the runs really read and wrote.
"""

from __future__ import annotations

import json
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from pyiceberg.catalog import Catalog
from pyspark.sql import SparkSession

from iceberg.config.lakehouse import LakehouseConfig
from iceberg.config.sections import OpenLineageSettings
from iceberg.errors import StaleLease
from iceberg.leader import tick
from iceberg.openlineage import run_events
from iceberg.protocol.fences import fence_key
from iceberg.protocol.liveness import RunState
from iceberg.protocol.shards import window_label
from iceberg.store.fences import raise_fences
from iceberg.store.registry import load_state
from spark_jobs.borrower.lease import run_lease
from spark_jobs.replay import replay_window
from tests.factories import MakeGroup, append_batches, create_source
from tests.integration.helpers import drive, quiet

pytestmark = pytest.mark.spark

FACET = {"type": "object", "required": ["_producer", "_schemaURL"]}
DATASET = {
    "type": "object",
    "required": ["namespace", "name"],
    "properties": {
        "namespace": {"type": "string", "minLength": 1},
        "name": {"type": "string", "minLength": 1},
        "facets": {"type": "object", "additionalProperties": FACET},
        "inputFacets": {"type": "object", "additionalProperties": FACET},
        "outputFacets": {"type": "object", "additionalProperties": FACET},
    },
}
RUN_EVENT = {
    "type": "object",
    "required": ["eventTime", "producer", "schemaURL", "run", "job", "eventType"],
    "properties": {
        "eventTime": {"type": "string", "minLength": 1},
        "producer": {"type": "string", "pattern": "^https?://"},
        "schemaURL": {"type": "string", "pattern": r"^https://openlineage\.io/spec/\d+-\d+-\d+/OpenLineage\.json#"},
        "eventType": {"enum": ["START", "RUNNING", "COMPLETE", "ABORT", "FAIL", "OTHER"]},
        "run": {
            "type": "object",
            "required": ["runId"],
            "properties": {"runId": {"type": "string"}, "facets": {"type": "object", "additionalProperties": FACET}},
        },
        "job": {
            "type": "object",
            "required": ["namespace", "name"],
            "properties": {"namespace": {"type": "string"}, "name": {"type": "string"}},
        },
        "inputs": {"type": "array", "items": DATASET},
        "outputs": {"type": "array", "items": DATASET},
    },
}


def read_events(path: Path) -> list[dict[str, Any]]:
    """The events the file transport wrote, each checked against the run-event schema."""
    events = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    for event in events:
        jsonschema.validate(event, RUN_EVENT)
        uuid.UUID(event["run"]["runId"])
        assert datetime.fromisoformat(event["eventTime"]).tzinfo is not None
    return events


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
