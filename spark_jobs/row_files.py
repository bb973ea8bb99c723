"""Which source file each output row came from: Spark's ``input_file_name()``, where it is exact.

A transform is user code and usually selects the columns it wants, so nothing icegroup adds to the
rows it reads survives it. What does survive is the task: Spark's file scan records the file it is
reading in a per-task holder that ``input_file_name()`` reads, and Iceberg's reader sets it each
time it opens a file. Evaluated on the transform's output, it names each row's file exactly when
every operator between the scan and the output hands rows on one by one, in order: a row is then
out of the plan before the reader opens the next file.

An operator that holds rows back (a sort, an aggregation, a Python UDF's batches) or a shuffle
breaks that: the file named would be the one open when the row came out, or none. For such plans
the reference is null, and lineage names the whole shard for those rows. The plan is read, not
guessed: ``streams_rows`` allows only operators known to hand rows on one at a time.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

# Physical operators that emit each input row (or rows made from it) before they take the next.
# A broadcast join streams its probe side; its broadcast side is a stage of its own and reads no
# file of the shard. Anything not named here (Sort, Exchange, HashAggregate, Window,
# BatchEvalPython, ArrowEvalPython, MapInPandas, MapPartitions, ...) makes the reference null.
STREAMING = frozenset(
    {
        "AdaptiveSparkPlan",
        "BatchScan",
        "BroadcastHashJoin",
        "BroadcastNestedLoopJoin",
        "ColumnarToRow",
        "Expand",
        "Filter",
        "Generate",
        "InputAdapter",
        "LocalLimit",
        "Project",
        "Sample",
        "Union",
        "WholeStageCodegen",
    }
)
BROADCAST = frozenset({"BroadcastExchange", "BroadcastQueryStage"})


def node_kind(name: str) -> str:
    """An operator's kind from its node name: ``WholeStageCodegen (3)`` and ``BatchScan cat.db.t`` name theirs first."""
    return name.split(" ", 1)[0]


def plan_kinds(plan: Any) -> list[str]:
    """The kinds of the operators of a physical plan that rows of the scan pass through, root first."""
    kind = node_kind(str(plan.nodeName()))
    if kind in BROADCAST:
        return []
    if kind == "AdaptiveSparkPlan":
        return [kind, *plan_kinds(plan.inputPlan())]
    children = plan.children()
    return [kind, *(k for i in range(children.size()) for k in plan_kinds(children.apply(i)))]


def streams_rows(df: DataFrame) -> bool:
    """Whether every operator between ``df``'s scans and its rows hands rows on one by one, in order."""
    plan = df._jdf.queryExecution().executedPlan()
    return all(kind in STREAMING for kind in plan_kinds(plan))


def file_ref_column(df: DataFrame) -> Column:
    """Each row's source-file reference (``iceberg.protocol.file_ref``): xxhash64 of its file, or null if unknown."""
    if not streams_rows(df):
        return F.lit(None).cast("long")
    name = F.input_file_name()
    return F.when(name != "", F.xxhash64(name))
