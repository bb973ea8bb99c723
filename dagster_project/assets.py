"""Assets: each group's source as an external spec, and its sink, partitioned by replay window."""

import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import dagster as dg
from pyiceberg.table import Table

from icegroup.dagster_project.resources import Lakehouse, lakehouse_of
from icegroup.dagster_project.table_metadata import TABLE_NAME, table_metadata
from icegroup.iceberg.errors import IcegroupError
from icegroup.iceberg.lag import Lag
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.lineage import WindowProvenance
from icegroup.iceberg.protocol.shards import window_label
from icegroup.iceberg.store.tables import load_optional
from icegroup.spark_jobs.borrower.attempt import LeaseReport
from icegroup.spark_jobs.borrower.user_errors import describe_error
from icegroup.spark_jobs.replay import ReplayReport, replay_window


def table_key(catalog_name: str, identifier: str) -> dg.AssetKey:
    """Asset key of an Iceberg table: catalog, namespace, table."""
    return dg.AssetKey([catalog_name, *identifier.split(".")])


@dataclass(frozen=True)
class Labels:
    """How the groups' assets show in the user's project: Dagster asset group, owners and tags."""

    group_name: str | None = None
    owners: Sequence[str] = ()
    tags: Mapping[str, str] = field(default_factory=dict)


def window_partitions(group: GroupConfig) -> dg.TimeWindowPartitionsDefinition:
    """The sink's partitions: replay windows of source commit time, UTC, including the current one.

    They begin at ``window_start``, which the definitions resolve when they load (``definitions.py``).
    """
    start = group.window_start.isoformat()
    if group.replay_window == "hour":
        return dg.HourlyPartitionsDefinition(start_date=f"{start}-00:00", end_offset=1, timezone="UTC")
    return dg.DailyPartitionsDefinition(start_date=start, end_offset=1, timezone="UTC")


def source_spec(group: GroupConfig, key: dg.AssetKey, labels: Labels) -> dg.AssetSpec:
    """The source table: written by producers outside Dagster, so it is an external asset."""
    return dg.AssetSpec(
        key,
        description=f"Iceberg table {group.source}, appended to by producers; consumed by group {group.name}.",
        metadata={TABLE_NAME: ".".join(key.path)},
        kinds={"iceberg"},
        group_name=labels.group_name or "sources",
        owners=labels.owners,
        tags=labels.tags,
    )


def lease_metadata(group: GroupConfig, report: LeaseReport, lag: Lag, window: str) -> dict[str, Any]:
    """What every observation of the sink by a lease of ``window`` records; numbers, so the UI plots them over time."""
    return {
        "rows_in": dg.MetadataValue.int(report.rows_in),
        "rows_out": dg.MetadataValue.int(report.rows_out),
        "bytes_in": dg.MetadataValue.int(report.bytes_in),
        "duration_s": dg.MetadataValue.float(round(report.duration_s, 3)),
        "source_from_snapshot": str(report.source_from),
        "source_to_snapshot": str(report.source_to),
        "lease": report.lease_id,
        "attempt": dg.MetadataValue.int(report.attempt),
        "epoch": dg.MetadataValue.int(report.epoch),
        "shards_committed": dg.MetadataValue.int(len(report.committed)),
        "shards_resumed": dg.MetadataValue.int(len(report.resumed)),
        "shards_fenced": dg.MetadataValue.int(len(report.fenced)),
        "commit_conflicts_retried": dg.MetadataValue.int(report.commit_conflicts),
        "redeliveries": dg.MetadataValue.int(report.redeliveries),
        "sink_snapshots": dg.MetadataValue.json([str(s) for s in report.sink_snapshots]),
        "lag_rows": dg.MetadataValue.int(lag.rows),
        "lag_snapshots": dg.MetadataValue.int(lag.snapshots),
        "lag_age_s": dg.MetadataValue.float(round(lag.age_s or 0.0, 1)),
        "window": window,
        "source_files": dg.MetadataValue.int(report.files_in),
        "lineage": lineage_command(group, f"--sink-snapshot {report.sink_snapshots[-1]}")
        if report.sink_snapshots
        else lineage_command(group, f"--window {window}"),
    }


def replay_metadata(group: GroupConfig, reports: list[ReplayReport]) -> dict[str, Any]:
    """What a replay's materialization of its windows records, with the lineage command for each window."""
    return {
        "lineage": dg.MetadataValue.md(
            "\n".join(f"- `icegroup lineage {group.name} --window {r.window}`" for r in reports)
        ),
        "replayed_windows": dg.MetadataValue.json([r.window for r in reports]),
        "generations": dg.MetadataValue.json([r.generation for r in reports]),
        "shards": dg.MetadataValue.int(sum(r.shards for r in reports)),
        "rows_in": dg.MetadataValue.int(sum(r.rows_in for r in reports)),
        "rows_out": dg.MetadataValue.int(sum(r.rows_out for r in reports)),
        "rows_replaced": dg.MetadataValue.int(sum(r.rows_replaced for r in reports)),
        "sink_snapshots": dg.MetadataValue.json([str(r.sink_snapshot) for r in reports if r.sink_snapshot]),
    }


# The data version of a materialization given as an event, not as an asset's return value. Dagster's
# public way to give one is the external-asset REST API's ``data_version`` (``/report_asset_materialization``),
# which the webserver records as this tag (``dagster_webserver/external_assets.py``); a sensor's or a run's
# reported events, and the replay's per-window materializations, take tags only, so they carry this one
# tag, as that API writes it, and no other tag of Dagster's.
DATA_VERSION_TAG = "dagster/data_version"


def lineage_command(group: GroupConfig, question: str) -> dg.MetadataValue:
    """The ``icegroup lineage`` command that answers the rest, as a reference people copy from the UI."""
    return dg.MetadataValue.md(f"`icegroup lineage {group.name} {question}`")


def source_observation(source_key: dg.AssetKey, snapshot_id: int, table: Table | None = None) -> dg.AssetObservation:
    """The source's version: its current snapshot id, as the source asset's data version, and the table as it is."""
    shown = table_metadata(table, ".".join(source_key.path)) if table is not None else {}
    return dg.AssetObservation(
        asset_key=source_key,
        tags={DATA_VERSION_TAG: str(snapshot_id)},
        metadata={"snapshot_id": str(snapshot_id), **shown},
    )


def provenance_metadata(group: GroupConfig, made: WindowProvenance) -> dict[str, Any]:
    """Where a window's output came from: its source range, files and rows, and the sink snapshots holding it."""
    return {
        "source_snapshot_range": made.source_range,
        "source_snapshot": str(made.source_snapshot),
        "source_files": dg.MetadataValue.int(made.source_files),
        "source_rows": dg.MetadataValue.int(made.source_rows),
        "shards": dg.MetadataValue.int(made.shards),
        "sink_snapshots": dg.MetadataValue.json([str(s) for s in made.sink_snapshots]),
        "code_version": group.config_hash,
        "lineage": lineage_command(group, f"--window {made.window}"),
    }


def complete_events(
    group: GroupConfig,
    sink_key: dg.AssetKey,
    source_key: dg.AssetKey,
    windows: list[int],
    provenance: Mapping[int, WindowProvenance],
    sink: Table | None = None,
) -> list[dg.AssetMaterialization | dg.AssetObservation]:
    """A materialization of each window the Leader found complete: its partition reads finished from now on.

    A window the group consumed nothing in is not materialized: nothing was made. It is observed
    instead, as complete and empty, so its partition shows as never materialized, and its history
    says why.

    A window with output carries its provenance (the source snapshot it was computed from, the
    group's config hash as its code version) and, as its data version, the sink snapshot it was
    found complete at (reading the sink at that snapshot gives the window as materialized); each
    carries the ``sink`` table as the tick left it (Dagster's standard table metadata), when given.
    """
    shown = table_metadata(sink, ".".join(sink_key.path)) if sink is not None and windows else {}
    head = sink.current_snapshot() if sink is not None else None
    events: list[dg.AssetMaterialization | dg.AssetObservation] = []
    for start in windows:
        label = window_label(start, group.replay_window)
        metadata: dict[str, Any] = {"window": label, "complete": True, "group": group.name}
        made = provenance.get(start)
        if made is None:
            events.append(
                dg.AssetObservation(
                    asset_key=sink_key,
                    partition=label,
                    description="The window is complete and empty: the group consumed no source rows in it.",
                    metadata={**metadata, "empty": True, "source_rows": dg.MetadataValue.int(0)},
                )
            )
            continue
        metadata.update({**shown, **provenance_metadata(group, made)})
        tags = {DATA_VERSION_TAG: str(head.snapshot_id)} if head is not None else {}
        events.append(
            dg.AssetMaterialization(
                asset_key=sink_key,
                partition=label,
                description="The window is complete: every source commit in it is in the sink.",
                metadata=metadata,
                tags=tags,
            )
        )
    return events


def sink_asset(
    group: GroupConfig, key: dg.AssetKey, source_key: dg.AssetKey, labels: Labels, resource_key: str
) -> dg.AssetsDefinition:
    """The sink: a partition per replay window, materialized when the window is complete or replayed.

    Borrower runs (``dagster_project/jobs.py``) commit shards and record an observation of the
    partition: the window may still be open, so it must not look finished. The Leader materializes
    a partition once its window is complete (``iceberg/protocol/completion.py``). A run of the asset
    itself, such as a backfill launched from the UI, replays its partitions: a backfill of many
    windows is one run per contiguous range (``BackfillPolicy.single_run``, one SparkSession for all
    of them), which records each window as its replay commits (``replay_windows``).
    """
    # ``backfill_policy`` is beta in Dagster 1.13: chosen knowingly for one run per range, and tested
    # (``tests/integration/test_dagster.py``), so its warning would only repeat what the pin says.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dg.BetaWarning)

        @dg.asset(
            key=key,
            deps=[source_key],
            partitions_def=window_partitions(group),
            backfill_policy=dg.BackfillPolicy.single_run(),
            output_required=False,
            kinds={"spark", "iceberg"},
            group_name=labels.group_name or group.name,
            owners=labels.owners,
            tags={**labels.tags, "icegroup/group": group.name},
            metadata={TABLE_NAME: ".".join(key.path)},
            required_resource_keys={resource_key},
            description=f"Rows of {group.source} through {group.transform}, exactly once, by group {group.name}.",
        )
        def sink(
            context: dg.AssetExecutionContext,
        ) -> Iterator[dg.AssetObservation | dg.AssetMaterialization | dg.MaterializeResult[None]]:
            """Replay the run's windows one by one, recording each as it commits; a failure leaves the others done."""
            icegroup = lakehouse_of(context.resources, resource_key)
            yield from replay_windows(
                group, context.asset_key, context.partition_keys, icegroup, context.run.run_id, context.log
            )

    return sink


def replay_windows(
    group: GroupConfig,
    key: dg.AssetKey,
    windows: Sequence[str],
    icegroup: Lakehouse,
    run_id: str,
    log: dg.DagsterLogManager,
) -> Iterator[dg.AssetObservation | dg.AssetMaterialization | dg.MaterializeResult[None]]:
    """Replay each window, recording it as its replay commits; then materialize them all, or the ones done.

    Each window's replay is a commit of its own, so a window that fails (a replay of it already in
    flight, a transform that fails on its rows) changes nothing of the others: the rest go on. Each
    window that commits is observed at once (its sink snapshot is its data version), so a long
    backfill shows its progress. When every window replayed, one result materializes the run's
    windows and the sink's checks run after it; when some failed, the windows done are materialized
    one by one and the run fails naming the others and why, for a retry of just those. A run of one
    window that fails with an icegroup error (a replay of it in flight, a registry that kept moving)
    fails with that error, so ``icegroup replay`` ends with its message and exit code.
    """
    lakehouse = icegroup.lakehouse()
    done: list[tuple[ReplayReport, dg.AssetObservation]] = []
    failed: dict[str, str] = {}
    for count, window in enumerate(windows, start=1):
        try:
            report = replay_window(icegroup.spark(), lakehouse, group, window, run_id=run_id, progress=log.info)
        except Exception as exc:  # one window's failure must not cost the windows after it
            if len(windows) == 1 and isinstance(exc, IcegroupError):
                raise  # a lone window's named error is the run's: the command ends with it, not "1 of 1 failed"
            failed[window] = describe_error(exc)
            log.error(f"{group.name}: window {window} ({count}/{len(windows)}) failed: {failed[window]}")
            continue
        log.info(f"{group.name}: window {window} replayed ({count}/{len(windows)})")
        table = load_optional(lakehouse.catalog(), group.sink)
        shown = table_metadata(table, ".".join(key.path)) if table is not None else {}
        tags = {DATA_VERSION_TAG: str(report.sink_snapshot)} if report.sink_snapshot else None
        observed = dg.AssetObservation(
            asset_key=key, partition=window, metadata={**replay_metadata(group, [report]), **shown}, tags=tags
        )
        done.append((report, observed))
        yield observed
    if not failed:
        heads = [r.sink_snapshot for r, _ in done if r.sink_snapshot]
        table = load_optional(lakehouse.catalog(), group.sink)
        shown = table_metadata(table, ".".join(key.path)) if table is not None else {}
        yield dg.MaterializeResult(
            metadata={**replay_metadata(group, [r for r, _ in done]), **shown},
            data_version=dg.DataVersion(str(heads[-1])) if heads else None,
        )
        return
    for report, observed in done:
        yield dg.AssetMaterialization(
            asset_key=key, partition=report.window, metadata=observed.metadata, tags=observed.tags
        )
    raise dg.Failure(
        description=f"{len(failed)} of {len(windows)} windows of {group.name} failed; the others are replayed: "
        + "; ".join(f"{window}: {why}" for window, why in failed.items()),
        metadata={"failed_windows": dg.MetadataValue.json(sorted(failed))},
    )
