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
guessed: ``streams_rows`` allows only operators known to hand rows on one at a time, and only
scans of the shard's own table (a union with another table's rows would name that table's files).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date
from typing import Any, TypeVar

from py4j.protocol import Py4JError
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from icegroup.iceberg.errors import ConfigError
from icegroup.iceberg.protocol.file_ref import file_ref
from icegroup.iceberg.protocol.locations import file_forms
from icegroup.iceberg.protocol.sink_commit import ROW_ID

# Iceberg's metadata columns: a row's data file and its position there.
FILE_COLUMN = "_file"
POS_COLUMN = "_pos"
# A format-v3 row's id (row lineage): kept through rewrites, so a watermark on it finds the rows added after it.
ROW_ID_COLUMN = ROW_ID

# Logical operators of an analyzed plan that Spark plans as operators emitting each input row (or
# rows made from it) before they take the next, or that planning removes (a view's or an alias's
# name, a join hint). Anything not named here (Sort, Aggregate, Window, Repartition, Join, Distinct,
# GlobalLimit, MapInPandas, LocalRelation, InMemoryRelation, a SQL ``WITH``'s CTE nodes, ...)
# makes the reference null. Joins are out even when broadcast: Spark may broadcast the shard and
# stream the other table, whose files ``input_file_name()`` would then name.
STREAMING = frozenset(
    {
        "Expand",
        "Filter",
        "Generate",
        "LocalLimit",
        "Project",
        "ResolvedHint",
        "Sample",
        "SubqueryAlias",
        "Union",
        "View",
    }
)
SCAN = "DataSourceV2Relation"
# Expressions the optimizer turns into operators of their own: Python UDFs are evaluated in batches
# (BatchEvalPython, ArrowEvalPython), and a subquery may become a join. A Hive UDTF may emit rows
# after its input ended.
HOLDING_EXPRESSIONS = frozenset(
    {
        "DynamicPruningSubquery",
        "Exists",
        "FunctionTableSubqueryArgumentExpression",
        "HiveGenericUDTF",
        "InSubquery",
        "LateralSubquery",
        "ListQuery",
        "PythonUDAF",
        "PythonUDF",
        "PythonUDTF",
        "ScalarSubquery",
    }
)


# Expressions without children, common enough in a shard's read to spare their py4j calls.
LEAVES = frozenset({"AttributeReference", "Literal"})


def plan_nodes(plan: Any) -> list[str]:
    """The node names of an analyzed plan, root first; a scan's is ``SCAN`` and the table it reads."""
    name = str(plan.nodeName())
    if name == SCAN:
        return [f"{SCAN} {plan.table().name()}"]
    children = plan.children()
    return [name, *(n for i in range(children.size()) for n in plan_nodes(children.apply(i)))]


def expression_kinds(plan: Any) -> set[str]:
    """The class names of every expression in an analyzed plan, its nodes' and their children's."""
    found: set[str] = set()
    nodes = [plan]
    while nodes:
        node = nodes.pop()
        children = node.children()
        nodes += [children.apply(i) for i in range(children.size())]
        top = node.expressions()
        pending = [top.apply(i) for i in range(top.size())]
        while pending:
            expression = pending.pop()
            kind = str(expression.getClass().getSimpleName())
            found.add(kind)
            if kind not in LEAVES:  # a shard's ``_file IN (...)`` holds a literal per file: py4j calls each
                inner = expression.children()
                pending += [inner.apply(i) for i in range(inner.size())]
    return found


def streams_rows(df: DataFrame, source: str, holding: frozenset[str] = HOLDING_EXPRESSIONS) -> bool:
    """Whether ``df``'s rows come from scans of ``source`` only, through operators that hand rows on one by one.

    The analyzed plan tells, with cached data in place (an ``InMemoryRelation``, refused: a cached
    partition is read whole before its rows come out). Spark made it already with the DataFrame:
    reading the physical plan planned the scan's files, which the write then planned again (3.3 s
    of a cold consume's first lease on W1), and even optimizing it cost a cold JVM 2 to 4 s. It is
    the stricter reading: Spark's optimizer may remove an operator, but adds one only for the
    expressions refused here (rules a session extension adds are not known to this check).
    ``holding`` are the expressions refused; row isolation allows a Python UDF, whose batches keep
    each row's output its own (``spark_jobs/borrower/isolation.py``).
    """
    plan = df._jdf.queryExecution().withCachedData()
    names = plan_nodes(plan)
    scans = [name for name in names if name.startswith(f"{SCAN} ")]
    return (
        bool(scans)
        and all(name == f"{SCAN} {source}" for name in scans)
        and all(name in STREAMING for name in names if name not in scans)
        and not expression_kinds(plan) & holding
    )


# Each row's source-file reference as Spark SQL: Spark's ``xxhash64(input_file_name())``, null where the task read
# no file, hashed once per file (``register_lineage_functions``): hashing each row's location took 0.08 of a plain
# write's task samples in a shard's JFR profile (``results/task_profile.json``).
FILE_REF_FUNCTION = "icegroup_file_ref"
FILE_REF_SQL = f"{FILE_REF_FUNCTION}()"


# Each row's source row on a format-v3 source (``RowRef.java``): the read notes each row's ``_row_id`` in its task
# (``MARK_ROW_SQL``, a filter that keeps every row), and the output gives back the one noted last (``ROW_REF_SQL``).
MARK_ROW_FUNCTION = "icegroup_mark_row"
MARK_ROW_SQL = f"{MARK_ROW_FUNCTION}({ROW_ID_COLUMN})"
ROW_REF_FUNCTION = "icegroup_row_ref"
ROW_REF_SQL = f"{ROW_REF_FUNCTION}()"


def register_lineage_functions(spark: SparkSession) -> None:
    """Make ``FILE_REF_SQL``, ``MARK_ROW_SQL`` and ``ROW_REF_SQL`` known to the session, from icegroup-spark.jar.

    Non-deterministic, like ``input_file_name()`` itself: the optimizer then neither moves a call
    away from the scan nor merges it, so it is evaluated on each row, in the task that read it. A
    ``ConfigError`` names the fix when the session's jar predates the functions, ``by_file_number``'s
    too: found only at a lease's delivery, a missing class would count against the shard as poison.
    """
    try:
        lineage = spark._jvm.icegroup.lineage  # type: ignore[union-attr]
        functions = {
            FILE_REF_FUNCTION: lineage.FileRef.function(),
            MARK_ROW_FUNCTION: lineage.RowRef.mark(),
            ROW_REF_FUNCTION: lineage.RowRef.current(),
        }
        lineage.FileValues.function("")
    except (Py4JError, TypeError) as exc:
        raise ConfigError(
            f"icegroup-spark.jar on Spark's classpath lacks icegroup.lineage's functions ({exc}): it is older than "
            "this icegroup; run `make jvm` in a checkout, or reinstall the wheel, and restart the process"
        ) from exc
    for name, function in functions.items():
        spark._jsparkSession.udf().register(name, function)


def mark_rows(df: DataFrame) -> DataFrame:
    """``df`` with each row's ``_row_id`` noted in its task as it is read, for ``ROW_REF_SQL`` to give back."""
    return df.where(F.expr(MARK_ROW_SQL))


def file_ref_column(df: DataFrame, source: str) -> Column:
    """Each row's source-file reference (``iceberg/protocol/file_ref.py``): xxhash64 of its file, or null if unknown.

    ``source`` is the table the shard was read from, as Spark names it (``catalog.namespace.table``).
    """
    return F.expr(FILE_REF_SQL) if streams_rows(df, source) else F.lit(None).cast("long")


@dataclass
class RowFiles:
    """Whether a lease's transform streams rows, per source schema: found from the first output built, kept.

    The verdict depends on the transform and the columns it is given, not on the number of rows:
    no operator that ``streams_rows`` allows changes with the size of its input. A transform may
    branch on its input's columns, so each source schema gets its own. ``row_ids``: the source
    gives its rows' ``_row_id`` (``session.reads_row_ids``), so the reads mark them and streamed rows name
    their source row too.
    """

    source: str
    row_ids: bool = False
    verdicts: dict[int | None, bool] = field(default_factory=dict)

    def row_ref(self, schema_id: int | None) -> Column | None:
        """Each row's source ``_row_id`` where the source has them and the transform streams rows (known already)."""
        return F.expr(ROW_REF_SQL) if self.row_ids and self.verdicts.get(schema_id) else None

    def known(self, schema_id: int | None) -> bool | None:
        """The verdict for rows of ``schema_id``, if one was found yet."""
        return self.verdicts.get(schema_id)

    def ref(self, df: DataFrame, schema_id: int | None) -> Column | None:
        """Each row's source-file reference where the transform streams rows; None where it does not."""
        if schema_id not in self.verdicts:
            self.verdicts[schema_id] = streams_rows(df, self.source)
        return F.expr(FILE_REF_SQL) if self.verdicts[schema_id] else None


def by_file(values: Mapping[str, str | int | date]) -> Column:
    """Each row's value in ``values`` (by source-file location), chosen by the row's file; for streaming plans only.

    Every spelling of a location is matched (``icegroup.iceberg.protocol.locations``). A row whose file is not in
    ``values`` fails its task: it would otherwise be written without the lineage it needs. The choice
    is one SQL expression, built in one call, however many files there are. Shard numbers take
    ``by_file_number``, a Java function; this chooses a batch's windows where it spans several
    (dates or hour labels).

    The files' references sit in an array of small maps, by the reference's remainder (``file_buckets``),
    not in a ``CASE`` of the files: Spark writes a primitive literal into the code it generates for a
    job, so each lease's values made a class of its own, which the JVM then compiled while the
    job ran (1.32x a plain job against 1.09x for the same job run again, in a warm session). An
    array of maps is handed to the code as one object, so leases with as many buckets (``MIN_BUCKETS``
    but for the largest) run one class; and a row looks through ``BUCKET_KEYS`` references at most on
    average.
    """
    refs = file_refs(values)
    kind = sql_type(next(iter(refs.values()))) if refs else "bigint"
    buckets = file_buckets(refs)
    maps = ", ".join(
        f"map({', '.join(f'{ref}L, {map_value(value)}' for ref, value in bucket)})"
        if bucket
        else f"cast(map() as map<bigint, {kind}>)"
        for bucket in buckets
    )
    bucket = f"cast(pmod({FILE_REF_SQL}, {len(buckets)}L) as int) + 1"
    fail = "raise_error(concat('a row of a source file the batch does not hold: ', input_file_name()))"
    return F.expr(f"coalesce(try_element_at(element_at(array({maps}), {bucket}), {FILE_REF_SQL}), {fail})")


def by_file_number(spark: SparkSession, values: Mapping[str, int]) -> Column:
    """Each row's number in ``values`` (by source-file location), as ``by_file`` chooses it, in one Java function.

    ``FileValues.java`` (icegroup-spark.jar) holds the numbers by reference in a map that travels with
    the function to the tasks, and keeps the last file's number: a row costs one call and a reference
    comparison, where ``by_file`` called the reference twice and looked through an array of maps, and
    the job's plan holds one function where it held a map of literals per bucket for Spark to
    analyze (0.4 s of a cold consume's first lease on W1, 0.9 s on W2's 300 files). The
    numbers are data, not code, so every lease runs one generated class. A row of a file
    ``values`` does not hold fails its task, as with ``by_file``.
    """
    pairs = "\n".join(f"{ref} {value}" for ref, value in file_refs(values).items())
    jvm: Any = spark._jvm
    function = jvm.icegroup.lineage.FileValues.function(pairs)
    return Column(function.apply(jvm.PythonUtils.toSeq(jvm.java.util.ArrayList())))


V = TypeVar("V")


def file_refs(values: Mapping[str, V]) -> dict[int, V]:
    """``values`` by the reference of each spelling of their file's location (``file_forms``).

    Two locations whose references are equal but whose values differ cannot be told apart by a
    row: a ``ValueError`` names them (XXH64's 64 bits make that about one in 10^16 for a lease of
    a thousand files).
    """
    refs: dict[int, V] = {}
    for path, value in values.items():
        for form in file_forms(path):
            ref = file_ref(form)
            if refs.setdefault(ref, value) != value:
                raise ValueError(f"file_refs: {form!r} and another file share the reference {ref}, with other values")
    return refs


# References a row's lookup goes through at most on average (``file_buckets``).
BUCKET_KEYS = 4
# Buckets at least: the count is written into the job's code, so every lease of up to 256 references (85 local
# files, 3 spellings each; 256 on object stores) runs one class, whatever its files; more get a power of two more.
MIN_BUCKETS = 64


def file_buckets(refs: Mapping[int, str | int | date]) -> list[list[tuple[int, str | int | date]]]:
    """``refs`` by their remainder (Spark's ``pmod``) in ``MIN_BUCKETS`` buckets, or a power of two more for many."""
    count = MIN_BUCKETS
    while count * BUCKET_KEYS < len(refs):
        count *= 2
    buckets: list[list[tuple[int, str | int | date]]] = [[] for _ in range(count)]
    for ref, value in refs.items():
        buckets[ref % count].append((ref, value))  # Python's % of a positive count is Spark's pmod
    return buckets


def map_value(value: str | int | date) -> str:
    """``sql_literal`` of ``value``, a ``long`` as Spark SQL's short form: a lease's map holds one per file spelling."""
    return f"{value}L" if isinstance(value, int) else sql_literal(value)


def sql_type(value: str | int | date) -> str:
    """The Spark SQL type ``sql_literal`` gives ``value``."""
    return "string" if isinstance(value, str) else "date" if isinstance(value, date) else "bigint"


def sql_literal(value: str | int | date) -> str:
    """A Spark SQL literal of a string, a ``long`` or a date."""
    if isinstance(value, str):
        return sql_string(value)
    return f"DATE'{value.isoformat()}'" if isinstance(value, date) else f"CAST({value} AS BIGINT)"


def sql_string(value: str) -> str:
    """A Spark SQL string of ``value`` as a binary literal: no parser setting or variable substitution alters it."""
    return f"CAST(X'{value.encode().hex()}' AS STRING)"
