"""Column lineage of a transform, read from Spark's analyzed plan, for the OpenLineage sink facet.

A transform that is a projection (selects, renames and computed columns, with filters between
them) maps each output column to the source columns it is made from: a plain or renamed column is
a copy, anything else is computed, described by its SQL. A transform that aggregates, joins, sorts
or does anything else is not a projection, and no column lineage is claimed for it. Only the plan
is analyzed, on the source's schema, once per process and group configuration: no Spark job runs,
unless the transform itself runs one while it builds its plan (a ``count()`` inside it, say).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from icegroup.iceberg.config.lakehouse import LakehouseConfig
from icegroup.iceberg.openlineage import ColumnOrigin
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.sink_commit import LINEAGE_COLUMNS
from icegroup.spark_jobs.transforms import Transform, load_transform

log = logging.getLogger(__name__)

PASS_THROUGH = frozenset({"Filter", "SubqueryAlias"})
# Per process: a Borrower runs many leases of one group, and the plan only changes with its config
# (a source schema change gives columns the next process sees).
_COMPUTED: dict[tuple[str, str, str | None, str], dict[str, ColumnOrigin] | None] = {}


def scala_items(seq: Any) -> Iterator[Any]:
    """The items of a Scala collection reached through py4j."""
    items = seq.iterator()
    while items.hasNext():
        yield items.next()


def sink_columns(spark: SparkSession, lakehouse: LakehouseConfig, group: GroupConfig) -> dict[str, ColumnOrigin] | None:
    """The column lineage of ``group``'s sink, its transform over the source as a Borrower reads it; None when off."""
    if lakehouse.openlineage is None:
        return None
    key = (lakehouse.catalog_name, group.source, group.filter, group.transform)
    if key not in _COMPUTED:
        _COMPUTED[key] = computed(spark, lakehouse, group)
    return _COMPUTED[key]


def computed(spark: SparkSession, lakehouse: LakehouseConfig, group: GroupConfig) -> dict[str, ColumnOrigin] | None:
    """``sink_columns`` worked out: the transform's plan over the source, once per process and configuration."""
    try:
        df = spark.read.format("iceberg").load(f"{lakehouse.catalog_name}.{group.source}")
        if group.filter:
            df = df.where(group.filter)
        source = df.drop(*[c for c in df.columns if c in LINEAGE_COLUMNS])
        return projection_lineage(source, load_transform(group.transform))
    except Exception as exc:  # lineage is a description: a plan it cannot read costs the facet, not the run
        log.info("group %s: no column lineage for its sink: %s", group.name, exc)
        return None


def projection_lineage(source: DataFrame, transform: Transform) -> dict[str, ColumnOrigin] | None:
    """Each output column's origin in ``source`` when ``transform`` is a projection of it; None otherwise.

    Only the plan is analyzed; an error of the transform's own raises, for the caller to judge.
    """
    analyzed = transform(source)._jdf.queryExecution().analyzed()
    origins = origins_of(analyzed, source._jdf.queryExecution().analyzed())
    if origins is None:
        return None
    return {attr.name(): origins[attr.exprId().id()] for attr in scala_items(analyzed.output())}


def origins_of(plan: Any, source: Any) -> dict[int, ColumnOrigin] | None:
    """The origin of every column ``plan`` outputs, by expression id; None if it is not a projection of ``source``."""
    if plan.equals(source):
        names = [attr for attr in scala_items(plan.output())]
        return {attr.exprId().id(): ColumnOrigin((attr.name(),), True, attr.name()) for attr in names}
    if plan.nodeName() in PASS_THROUGH:
        return origins_of(plan.child(), source)
    if plan.nodeName() != "Project":
        return None
    below = origins_of(plan.child(), source)
    if below is None:
        return None
    origins: dict[int, ColumnOrigin] = {}
    for expression in scala_items(plan.projectList()):
        refs = [below[ref.exprId().id()] for ref in scala_items(expression.references())]
        inputs = tuple(sorted({name for ref in refs for name in ref.inputs}))
        kind = expression.getClass().getSimpleName()
        copied = kind == "AttributeReference" or (
            kind == "Alias" and expression.child().getClass().getSimpleName() == "AttributeReference"
        )
        identity = copied and len(refs) == 1 and refs[0].identity
        origins[expression.exprId().id()] = ColumnOrigin(inputs, identity, expression.sql())
    return origins
