"""OpenLineage run events for every run that reads or writes data: START, then COMPLETE or FAIL.

The runs are lease attempts, replays, resets and expiries. Off unless the lakehouse config has an
``openlineage`` section (or ``ICEGROUP_OPENLINEAGE_FILE`` names a file); its transport is the
OpenLineage client's own (console, file, HTTP to Marquez, ...). Inputs and outputs are the Iceberg
tables, named by their location as OpenLineage names tables (namespace ``file`` or ``s3://bucket``,
name the path) with the catalog identifier as a symlink, versioned by snapshot id (the source at
the last snapshot the run read, the sink at the snapshot it committed) and described by the schema
of that snapshot. Where the transform is a projection, the sink carries column lineage: which
source columns each sink column is made from, and whether it is a copy or computed. A lease
attempt's run id is derived from the group, lease and attempt, and a replay's from its window and
generation, so every event of one run carries the same id. An event that cannot be sent is logged,
never raised: lineage must not fail the work it describes.
"""

from __future__ import annotations

import logging
import threading
import traceback
import uuid
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from pyiceberg.catalog import Catalog
from pyiceberg.table import Table
from pyiceberg.types import NestedField, StructType

from icegroup.iceberg.config.lakehouse import LakehouseConfig
from icegroup.iceberg.config.sections import OpenLineageSettings
from icegroup.iceberg.store.tables import load_optional

# OpenLineage's client library is imported where an event or facet is built, so a process with
# OpenLineage off never imports it: that took 0.28 s of a consume's start, beside the booting JVM.
if TYPE_CHECKING:
    from openlineage.client import OpenLineageClient
    from openlineage.client.event_v2 import InputDataset, OutputDataset
    from openlineage.client.facet_v2 import (
        DatasetFacet,
        RunFacet,
        column_lineage_dataset,
        job_type_job,
        schema_dataset,
    )

log = logging.getLogger(__name__)

PRODUCER = "https://github.com/icegroup/icegroup"
_CLIENTS: dict[str, OpenLineageClient] = {}
_CLIENTS_LOCK = threading.Lock()


def client_for(settings: OpenLineageSettings) -> OpenLineageClient:
    """The process's client for these settings: built once, since an HTTP transport keeps a session."""
    from openlineage.client import OpenLineageClient

    key = settings.model_dump_json()
    with _CLIENTS_LOCK:
        if key not in _CLIENTS:
            transport = settings.transport
            _CLIENTS[key] = OpenLineageClient(config={"transport": transport}) if transport else OpenLineageClient()
        return _CLIENTS[key]


def run_id_for(group: str, key: str) -> str:
    """A stable OpenLineage run id (a UUID) for one run of ``group``, e.g. a lease attempt."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"icegroup/{group}/{key}"))


def table_name(location: str) -> tuple[str, str]:
    """OpenLineage's namespace and name of a table at ``location``: ``file`` and its path, or ``s3://b`` and its key."""
    parsed = urlparse(location)
    if parsed.scheme in ("", "file"):
        return "file", parsed.path
    return f"{parsed.scheme}://{parsed.netloc}", parsed.path.lstrip("/")


@dataclass(frozen=True)
class ColumnOrigin:
    """Where one output column of a projection comes from: source columns, copied or computed."""

    inputs: tuple[str, ...]
    identity: bool
    sql: str


@dataclass
class RunEvents:
    """One run's events; with no client (OpenLineage off) every method does nothing."""

    client: OpenLineageClient | None
    namespace: str
    job: str
    run_id: str
    inputs: list[InputDataset] = field(default_factory=list)

    def job_type(self) -> job_type_job.JobTypeJobFacet:
        """A batch job of icegroup's: a lease attempt or a replay, by the job's name."""
        from openlineage.client.facet_v2 import job_type_job

        kind = self.job.rsplit(".", 1)[-1].upper()
        return job_type_job.JobTypeJobFacet(
            processingType="BATCH", integration="ICEGROUP", jobType=kind, producer=PRODUCER
        )

    def start(self) -> None:
        """The run began: its inputs, at the versions it will read."""
        self._emit("START", [])

    def complete(self, outputs: list[OutputDataset], columns: Mapping[str, ColumnOrigin] | None = None) -> None:
        """The run ended well: its outputs, at the versions it committed, with ``columns`` as their column lineage."""
        if columns and self.inputs:
            from openlineage.client.event_v2 import OutputDataset

            facet = column_lineage(self.inputs[0], columns)
            outputs = [
                OutputDataset(
                    o.namespace,
                    o.name,
                    facets={**(o.facets or {}), "columnLineage": facet},
                    outputFacets=o.outputFacets,
                )
                for o in outputs
            ]
        self._emit("COMPLETE", outputs)

    def abort(self, outputs: list[OutputDataset]) -> None:
        """The run was stopped on purpose before the end: ``outputs`` at what it committed until then."""
        self._emit("ABORT", outputs)

    @contextmanager
    def observe(self) -> Iterator[RunEvents]:
        """START now, FAIL with the error if the block raises; the block calls ``complete`` with what it wrote."""
        self.start()
        try:
            yield self
        except BaseException as exc:
            self.fail(exc)
            raise

    def fail(self, error: BaseException) -> None:
        """The run failed: the error, with its traceback."""
        if self.client is None:
            return
        from openlineage.client.facet_v2 import error_message_run

        facet = error_message_run.ErrorMessageRunFacet(
            message=f"{type(error).__name__}: {error}",
            programmingLanguage="python",
            stackTrace="".join(traceback.format_exception(error)),
            producer=PRODUCER,
        )
        self._emit("FAIL", [], {"errorMessage": facet})

    def _emit(self, state: str, outputs: list[OutputDataset], facets: dict[str, RunFacet] | None = None) -> None:
        if self.client is None:
            return
        from openlineage.client.event_v2 import Job, Run, RunEvent, RunState

        event = RunEvent(
            eventType=RunState(state),
            eventTime=datetime.now(UTC).isoformat(),
            run=Run(runId=self.run_id, facets=facets or {}),
            job=Job(namespace=self.namespace, name=self.job, facets={"jobType": self.job_type()}),
            inputs=self.inputs,
            outputs=outputs,
            producer=PRODUCER,
        )
        try:
            self.client.emit(event)
        except Exception as exc:  # a lineage backend that is down must not fail the run
            log.warning("OpenLineage: %s event of %s (run %s) not sent: %s", state, self.job, self.run_id, exc)


def column_lineage(
    source: InputDataset, columns: Mapping[str, ColumnOrigin]
) -> column_lineage_dataset.ColumnLineageDatasetFacet:
    """OpenLineage's column lineage of a projection of ``source``: a copy is IDENTITY, computed is TRANSFORMATION."""
    from openlineage.client.facet_v2 import column_lineage_dataset

    def origin(column: ColumnOrigin, name: str) -> column_lineage_dataset.InputField:
        kind = column_lineage_dataset.Transformation(
            type="DIRECT",
            subtype="IDENTITY" if column.identity else "TRANSFORMATION",
            description="" if column.identity else column.sql,
            masking=False,
        )
        return column_lineage_dataset.InputField(source.namespace, source.name, name, transformations=[kind])

    fields = {
        out: column_lineage_dataset.Fields(inputFields=[origin(column, name) for name in column.inputs])
        for out, column in columns.items()
    }
    return column_lineage_dataset.ColumnLineageDatasetFacet(fields=fields, producer=PRODUCER)


def run_events(
    lakehouse: LakehouseConfig,
    catalog: Catalog,
    group: str,
    job: str,
    key: str,
    source: str | None,
    source_version: int | None,
) -> RunEvents:
    """The events of one run of ``group``'s ``job`` reading ``source`` at ``source_version``; inert when off."""
    settings = lakehouse.openlineage
    if settings is None:
        return RunEvents(None, "", job, run_id_for(group, key))
    from openlineage.client.event_v2 import InputDataset

    dataset = None if source is None else described(catalog, lakehouse, source, source_version)
    inputs = [] if dataset is None else [InputDataset(dataset[0], dataset[1], facets=dataset[2])]
    return RunEvents(client_for(settings), settings.namespace, job, run_id_for(group, key), inputs)


def output_dataset(
    lakehouse: LakehouseConfig,
    catalog: Catalog,
    sink: str,
    version: int | None,
    rows: int | None,
    files: int | None = None,
) -> list[OutputDataset]:
    """A table as a run's output, at the snapshot it committed, with the rows it wrote if known; none if off."""
    if lakehouse.openlineage is None:
        return []
    from openlineage.client.event_v2 import OutputDataset
    from openlineage.client.facet_v2 import output_statistics_output_dataset

    dataset = described(catalog, lakehouse, sink, version)
    if dataset is None:
        return []
    if rows is None:
        return [OutputDataset(dataset[0], dataset[1], facets=dataset[2])]
    stats = output_statistics_output_dataset.OutputStatisticsOutputDatasetFacet(
        rowCount=rows, fileCount=files, producer=PRODUCER
    )
    return [OutputDataset(dataset[0], dataset[1], facets=dataset[2], outputFacets={"outputStatistics": stats})]


def described(
    catalog: Catalog, lakehouse: LakehouseConfig, identifier: str, version: int | None
) -> tuple[str, str, dict[str, DatasetFacet]] | None:
    """``table_dataset``, or None (logged) when the table cannot be read: lineage must not fail the work."""
    try:
        return table_dataset(catalog, lakehouse, identifier, version)
    except Exception as exc:  # a catalog hiccup after the run committed must not turn it into a failure
        log.warning("OpenLineage: %s not described (%s); the event names no dataset for it", identifier, exc)
        return None


def table_dataset(
    catalog: Catalog, lakehouse: LakehouseConfig, identifier: str, version: int | None
) -> tuple[str, str, dict[str, DatasetFacet]] | None:
    """Namespace, name and facets of an Iceberg table at ``version``; None if the table does not exist."""
    from openlineage.client.facet_v2 import dataset_version_dataset, symlinks_dataset

    table = load_optional(catalog, identifier)
    if table is None:
        return None
    namespace, name = table_name(table.location())
    symlink = symlinks_dataset.Identifier(
        namespace=lakehouse.tables_namespace, name=f"{lakehouse.catalog_name}.{identifier}", type="TABLE"
    )
    links = symlinks_dataset.SymlinksDatasetFacet(identifiers=[symlink], producer=PRODUCER)
    facets: dict[str, DatasetFacet] = {"symlinks": links, "schema": schema_facet(table, version)}
    if version is not None:
        facets["version"] = dataset_version_dataset.DatasetVersionDatasetFacet(
            datasetVersion=str(version), producer=PRODUCER
        )
    return namespace, name, facets


def schema_facet(table: Table, version: int | None) -> schema_dataset.SchemaDatasetFacet:
    """The table's columns at snapshot ``version`` (the current schema without one), nested fields included."""
    from openlineage.client.facet_v2 import schema_dataset

    snapshot = None if version is None else table.snapshot_by_id(version)
    schema_id = None if snapshot is None else snapshot.schema_id
    schema = table.schemas().get(schema_id, table.schema()) if schema_id is not None else table.schema()

    def fields(columns: Iterable[NestedField]) -> list[schema_dataset.SchemaDatasetFacetFields]:
        return [
            schema_dataset.SchemaDatasetFacetFields(
                name=column.name,
                type=str(column.field_type),
                description=column.doc,
                ordinal_position=position,
                fields=fields(column.field_type.fields) if isinstance(column.field_type, StructType) else [],
            )
            for position, column in enumerate(columns, start=1)
        ]

    return schema_dataset.SchemaDatasetFacet(fields=fields(schema.fields), producer=PRODUCER)
