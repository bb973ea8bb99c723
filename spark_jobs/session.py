"""SparkSession setup from the one lakehouse config, so Spark sees the catalog pyiceberg sees."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import ClassVar

import pyspark
from py4j.protocol import Py4JError
from pyspark import SparkContext
from pyspark.errors import PySparkRuntimeError
from pyspark.sql import SparkSession

from icegroup.iceberg.config.lakehouse import LakehouseConfig
from icegroup.iceberg.config.rest import spark_catalog_properties
from icegroup.iceberg.errors import ConfigError
from icegroup.spark_jobs.class_archive import archive_folder, archive_options, archive_path, submit_options
from icegroup.spark_jobs.engines import check_pair, reads_row_lineage, supported_pairs
from icegroup.spark_jobs.jars import IVY_CONF, JARS_CONF, PACKAGES_CONF, remember, resolving, spark_jars
from icegroup.spark_jobs.java import check_java, gateway_exited, spark_java
from icegroup.spark_jobs.row_files import register_lineage_functions

SPARK_REDACTION = "(?i)secret|password|token|access[.]key|credential|header[.]"
log = logging.getLogger(__name__)


def spark_jdbc_url(lakehouse: LakehouseConfig) -> str:
    """The catalog's JDBC URL as Spark opens it; SQLite goes through the shim driver."""
    url, _ = lakehouse.jdbc()
    return url.replace("jdbc:sqlite:", "jdbc:icegroup-sqlite:", 1)


def spark_conf(lakehouse: LakehouseConfig, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """Every Spark setting icegroup needs, unit-tested: reads only a REST catalog's secrets and where the jars are."""
    prefix = f"spark.sql.catalog.{lakehouse.catalog_name}"
    conf = {
        "spark.master": lakehouse.spark_master,
        "spark.app.name": "icegroup-borrower",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        # Leases run at once in threads of one session, each in its own pool, share the cores fairly.
        "spark.scheduler.mode": "FAIR",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.extensions": "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
        # Spark's own pattern plus a REST catalog's credential and headers: redacted in the UI, logs and event logs.
        "spark.redaction.regex": SPARK_REDACTION,
        prefix: "org.apache.iceberg.spark.SparkCatalog",
        f"{prefix}.cache-enabled": "false",
        # Writes to sinks (write.wap.enabled) are staged, then published by the fenced commit.
        "spark.wap.id": "icegroup",
    }
    if lakehouse.rest is not None:
        catalog = spark_catalog_properties(lakehouse.rest_properties(env))
        conf.update({f"{prefix}.{key}": value for key, value in catalog.items()})
    else:
        _, jdbc_props = lakehouse.jdbc()
        conf.update(
            {
                f"{prefix}.type": "jdbc",
                f"{prefix}.uri": spark_jdbc_url(lakehouse),
                f"{prefix}.warehouse": lakehouse.warehouse_uri,
                f"{prefix}.jdbc.schema-version": "V1",
            }
        )
        conf.update({f"{prefix}.jdbc.{key}": value for key, value in jdbc_props.items()})
    conf.update(lakehouse.spark.conf())
    if lakehouse.on_s3:
        conf.update(s3_conf(lakehouse))
    conf.update(lakehouse.spark_conf)
    # Last, so a user's spark.jars and spark.jars.packages join icegroup's rather than replace them.
    jars = spark_jars(lakehouse, pyspark.__version__)
    conf[IVY_CONF] = str(jars.ivy)
    conf.pop(PACKAGES_CONF, None)
    if jars.packages:
        conf[PACKAGES_CONF] = ",".join(jars.packages)
    conf[JARS_CONF] = ",".join([*jars.files, *filter(None, [lakehouse.spark_conf.get(JARS_CONF)])])
    return conf


def s3_conf(lakehouse: LakehouseConfig) -> dict[str, str]:
    """Iceberg's S3FileIO for the catalog; credentials come from the AWS chain on each host, never from here."""
    prefix = f"spark.sql.catalog.{lakehouse.catalog_name}"
    s3 = lakehouse.s3
    conf = {f"{prefix}.io-impl": "org.apache.iceberg.aws.s3.S3FileIO"}
    if s3 is not None:
        if s3.region:
            conf[f"{prefix}.client.region"] = s3.region
        conf[f"{prefix}.s3.path-style-access"] = str(s3.path_style_access).lower()
        if s3.endpoint:
            conf[f"{prefix}.s3.endpoint"] = s3.endpoint
    return conf


class _Started:
    """The session this process started last, with the settings it was started with."""

    lock: ClassVar[threading.Lock] = threading.Lock()
    conf: ClassVar[dict[str, str]] = {}
    session: ClassVar[SparkSession | None] = None


@contextmanager
def executors_python(python: str | None) -> Iterator[None]:
    """Set PYSPARK_PYTHON while a SparkContext starts, then put it back.

    PySpark reads the executors' Python from this variable once, when it starts the context, and
    not from any Spark setting; the rest of the process keeps its own environment.
    """
    if python is None:
        yield
        return
    before = os.environ.get("PYSPARK_PYTHON")
    os.environ["PYSPARK_PYTHON"] = python
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("PYSPARK_PYTHON", None)
        else:
            os.environ["PYSPARK_PYTHON"] = before


def get_session(lakehouse: LakehouseConfig) -> SparkSession:
    """Create, or reuse within this process, the Borrower's SparkSession.

    A second call with the same settings returns the running session as it is: handing the settings
    to ``getOrCreate`` again costs half a second of JVM round trips, on the path to the first lease.
    Other settings go through ``getOrCreate``, which applies the runtime ones to the running session.
    """
    conf = spark_conf(lakehouse)
    with _Started.lock:
        session = _Started.session
        if (
            session is not None
            and _without_jars(conf) == _without_jars(_Started.conf)
            and SparkContext._active_spark_context is session.sparkContext
        ):
            return session
        builder = SparkSession.builder
        for key, value in conf.items():
            builder = builder.config(key, value)
        # Spark resolves packages only when it starts the JVM (pyspark keeps one JVM for the process, also
        # after a session stops); then what it resolved is handed to the executors and remembered.
        packages = conf.get(PACKAGES_CONF) if SparkContext._gateway is None else None
        ivy = Path(conf[IVY_CONF])
        archive = driver_archive(conf) if SparkContext._gateway is None else None
        with (
            executors_python(lakehouse.spark.python),
            submit_options(archive),
            resolving(ivy) if packages else nullcontext(),
        ):
            try:
                session = builder.getOrCreate()
            except PySparkRuntimeError as exc:
                if exc.getErrorClass() != "JAVA_GATEWAY_EXITED":
                    raise
                raise gateway_exited(exc) from exc
        session.sparkContext.setLogLevel("ERROR")
        if packages:
            ship_resolved(session, ivy, tuple(packages.split(",")))
        check_engine(session)
        register_lineage_functions(session)
        _Started.conf, _Started.session = conf, session
        return session


def driver_archive(conf: Mapping[str, str]) -> str | None:
    """The options that map the recorded class archive into a new driver JVM, if one fits (``class_archive.py``).

    Without a Java it stops here, naming the fix (``check_java``), rather than in Spark's launcher.
    """
    check_java()
    java = spark_java()
    return archive_options(conf, archive_path(conf, java, pyspark.__version__, archive_folder()) if java else None)


def reads_row_ids(spark: SparkSession, format_version: int) -> bool:
    """Whether a source of ``format_version`` gives each row's ``_row_id`` to this session's Iceberg runtime.

    Row lineage is format v3's; Iceberg before 1.10 neither reads it in Spark nor keeps it through a
    compaction, so a row id would not name the row for long.
    """
    if format_version < 3:
        return False
    return reads_row_lineage(str(spark._jvm.org.apache.iceberg.IcebergBuild.version()))  # type: ignore[union-attr]


def jvm_alive(spark: SparkSession) -> bool:
    """Whether the session's driver JVM still answers: after it exited (out of memory, killed) every call fails."""
    try:
        spark._jvm.java.lang.System.nanoTime()  # type: ignore[union-attr]
    except (Py4JError, OSError):  # py4j's own error, or the refused connection to a gateway that is gone
        return False
    return True


def _without_jars(conf: Mapping[str, str]) -> dict[str, str]:
    """The settings but where the jars come from: a first start's coordinates and a later start's files agree."""
    return {key: value for key, value in conf.items() if key not in (JARS_CONF, PACKAGES_CONF)}


def ship_resolved(spark: SparkSession, ivy: Path, packages: tuple[str, ...]) -> None:
    """Hand the jars Spark resolved for ``packages`` to the executors, and remember them for the next start.

    SparkSubmit merges the resolved jars into ``spark.jars`` and puts them on the driver's classpath,
    but pyspark then applies the session's own ``spark.jars`` (icegroup's jar) over that merged list,
    so a cluster's executors would never get the Iceberg runtime: tasks then fail to deserialize
    (``ClassCastException ... List$SerializationProxy``). The merged list survives as a JVM property.
    """
    merged = str(spark._jvm.System.getProperty("spark.jars") or "")  # type: ignore[union-attr]
    for jar in merged.split(","):
        if str(ivy / "jars") in jar:
            spark._jsc.addJar(jar)
    remember(ivy, packages, merged)


def check_engine(spark: SparkSession) -> None:
    """Refuse a Spark and Iceberg pair icegroup does not support, before anything is read or written.

    The versions are the JVM's own, so a runtime a cluster put in ``$SPARK_HOME/jars`` or a user's
    ``iceberg_packages`` is checked as well as the one icegroup chose.
    """
    try:
        release = str(spark._jvm.org.apache.iceberg.IcebergBuild.version())  # type: ignore[union-attr]
    except (Py4JError, TypeError) as exc:
        raise ConfigError(
            f"iceberg_packages: Spark {spark.version} has no Iceberg runtime on its classpath ({exc}); unset "
            f"iceberg_packages to let icegroup fetch one, or add a runtime for {supported_pairs()}"
        ) from exc
    check_pair(spark.version, release.split()[0])


def start_in_background(lakehouse: LakehouseConfig) -> threading.Thread:
    """Start the process's SparkSession on a thread, so the JVM boots while the caller sets up its run.

    A later ``get_session`` in this process waits for it (both hold ``_Started.lock``) and gets the
    same session. If the start fails, that later call fails the same way and reports it, so the
    thread drops the error rather than print it twice.
    """

    def start() -> None:
        try:
            get_session(lakehouse)
        except Exception:  # reported by the caller's own get_session, which raises the same error
            log.debug("starting Spark in the background failed; the next get_session reports why", exc_info=True)

    thread = threading.Thread(target=start, name="spark-start", daemon=True)
    thread.start()
    return thread


def activate(spark: SparkSession) -> None:
    """Make ``spark`` the JVM thread's active session.

    Spark resolves catalogs through a thread-local SQLConf. A Borrower that runs on another thread
    than the one that created the session (thread pools, Dagster's executors) would otherwise see no
    ``spark.sql.catalog.*`` settings and fail to find the lakehouse catalog.
    """
    spark._jvm.SparkSession.setActiveSession(spark._jsparkSession)  # type: ignore[union-attr]


def use_pool(spark: SparkSession, pool: str, job_group: str) -> None:
    """Run this thread's Spark jobs in FAIR scheduler pool ``pool``, as job group ``job_group``.

    Leases run at once on one session each get a pool, so a large shard's job cannot hold every
    core while a small lease waits behind it (Spark creates a pool on first use). The job group
    names the lease in the Spark UI, and lets its renewals count its tasks (``borrower/renewal.py``).
    """
    spark.sparkContext.setLocalProperty("spark.scheduler.pool", pool)
    spark.sparkContext.setJobGroup(job_group, f"icegroup {job_group}")
