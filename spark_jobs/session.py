"""SparkSession setup from the one lakehouse config, so Spark sees the catalog pyiceberg sees."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from importlib.resources import files
from pathlib import Path
from typing import ClassVar

from pyspark import SparkContext
from pyspark.sql import SparkSession
from sqlalchemy.engine import make_url

from iceberg.config.lakehouse import LakehouseConfig
from iceberg.config.rest import spark_catalog_properties
from iceberg.errors import ConfigError

RUNTIME_JAR = "iceberg-spark-runtime-3.5_2.12-1.9.2.jar"
# S3FileIO and the AWS SDK for Spark's side of an s3:// warehouse; Maven Central only, not on PyPI.
AWS_BUNDLE_JAR = "iceberg-aws-bundle-1.9.2.jar"
AWS_BUNDLE_PACKAGE = "org.apache.iceberg:iceberg-aws-bundle:1.9.2"
DRIVER_JARS = {"sqlite": "/usr/share/java/sqlite-jdbc.jar", "postgresql": "/usr/share/java/postgresql.jar"}
COMMIT_JAR = Path(__file__).parent / "sink" / "jvm" / "icegroup-commit.jar"
# The SQLite shim is plumbing of the embedded stack, so it lives in infra/; a jar, not an import.
SQLITE_SHIM_JAR = Path(__file__).resolve().parents[1] / "infra" / "sqlite_jdbc" / "icegroup-sqlite-jdbc.jar"
SPARK_REDACTION = "(?i)secret|password|token|access[.]key|credential|header[.]"
log = logging.getLogger(__name__)


def runtime_jar() -> Path:
    """The Iceberg Spark runtime shipped in the pinned snowpark-connect-deps-iceberg wheel."""
    jar = Path(str(files("snowpark_connect_deps_iceberg") / "jars" / RUNTIME_JAR))
    if not jar.is_file():
        raise ConfigError(
            f"iceberg_packages: unset, and {RUNTIME_JAR} is not in the snowpark-connect-deps-iceberg wheel; "
            "reinstall with `make venv`, or set ICEGROUP_ICEBERG_PACKAGES to Maven coordinates"
        )
    return jar


def _catalog_backend(lakehouse: LakehouseConfig) -> str | None:
    """The SQL catalog's database backend (``sqlite``, ``postgresql``); None for a REST catalog: no driver."""
    return None if lakehouse.catalog_uri is None else make_url(lakehouse.catalog_uri).get_backend_name()


def driver_jars(lakehouse: LakehouseConfig) -> list[Path]:
    """The JDBC driver for a SQL catalog's database (from Debian), plus icegroup's own jars.

    ``icegroup-commit.jar`` holds the fenced sink commit; a SQLite catalog also needs the shim in
    ``icegroup-sqlite-jdbc.jar``. ``make jvm`` builds both. A REST catalog needs no driver: Iceberg's
    runtime jar holds its client.
    """
    backend = _catalog_backend(lakehouse)
    jars: list[Path] = []
    if backend is not None:
        jar = Path(DRIVER_JARS[backend])
        if not jar.is_file():
            package = "libxerial-sqlite-jdbc-java" if backend == "sqlite" else "libpostgresql-jdbc-java"
            raise ConfigError(
                f"catalog_uri: Spark needs {jar} for {backend}; install it with apt-get install {package}"
            )
        jars = [jar, SQLITE_SHIM_JAR] if backend == "sqlite" else [jar]
    for own in (*jars[1:], COMMIT_JAR):
        if not own.is_file():
            raise ConfigError(f"Spark needs {own}; build it with `make jvm`")
    return [*jars, COMMIT_JAR]


def jar_names(lakehouse: LakehouseConfig) -> list[str]:
    """The file names of every jar Spark needs for this lakehouse, as a ``jars`` folder holds them."""
    backend = _catalog_backend(lakehouse)
    names = [] if lakehouse.iceberg_packages else [RUNTIME_JAR]
    if backend is not None:
        names.append(Path(DRIVER_JARS[backend]).name)
    if backend == "sqlite":
        names.append(SQLITE_SHIM_JAR.name)
    names.append(COMMIT_JAR.name)
    if lakehouse.on_s3 and not _packages_bring_aws(lakehouse):
        names.append(AWS_BUNDLE_JAR)
    return names


def jar_locations(lakehouse: LakehouseConfig) -> list[str]:
    """Where the driver and every executor fetch the jars: the ``jars`` folder or prefix, else this install.

    A cluster's executors get each jar from the location given here (the driver serves local files to
    them), so one configured place is enough; nothing is looked up on the executors' hosts.
    """
    if lakehouse.jars is None:
        if lakehouse.on_s3 and not _packages_bring_aws(lakehouse):
            raise ConfigError(
                f"warehouse: Spark needs {AWS_BUNDLE_JAR} for an S3 warehouse, and it is not on PyPI. Download it "
                f"from Maven Central into a folder with the other jars (`make jars` fills one) and set jars "
                f"(ICEGROUP_JARS) to it, or add {AWS_BUNDLE_PACKAGE} to iceberg_packages"
            )
        jars = [] if lakehouse.iceberg_packages else [runtime_jar()]
        return [str(jar) for jar in [*jars, *driver_jars(lakehouse)]]
    prefix = lakehouse.jars.rstrip("/")
    names = jar_names(lakehouse)
    if "://" in prefix and not prefix.startswith("file://"):
        return [f"{prefix}/{name}" for name in names]
    folder = Path(prefix.removeprefix("file://"))
    missing = [name for name in names if not (folder / name).is_file()]
    if missing:
        fetch = f"; {AWS_BUNDLE_JAR} comes from Maven Central" if AWS_BUNDLE_JAR in missing else ""
        raise ConfigError(f"jars: {folder} has no {', '.join(missing)}; fill it with `make jars`{fetch}")
    return [str(folder / name) for name in names]


def _packages_bring_aws(lakehouse: LakehouseConfig) -> bool:
    return "iceberg-aws-bundle" in (lakehouse.iceberg_packages or "")


def spark_jdbc_url(lakehouse: LakehouseConfig) -> str:
    """The catalog's JDBC URL as Spark opens it; SQLite goes through the shim driver."""
    url, _ = lakehouse.jdbc()
    return url.replace("jdbc:sqlite:", "jdbc:icegroup-sqlite:", 1)


def spark_conf(lakehouse: LakehouseConfig, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """Every Spark setting icegroup needs; pure but for a REST catalog's secrets, read from ``env``, so unit-tested."""
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
    if lakehouse.iceberg_packages:
        conf["spark.jars.packages"] = lakehouse.iceberg_packages
    conf["spark.jars"] = ",".join(jar_locations(lakehouse))
    conf.update(lakehouse.spark_conf)
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
        if session is not None and conf == _Started.conf and SparkContext._active_spark_context is session.sparkContext:
            return session
        builder = SparkSession.builder
        for key, value in conf.items():
            builder = builder.config(key, value)
        with executors_python(lakehouse.spark.python):
            session = builder.getOrCreate()
        session.sparkContext.setLogLevel("ERROR")
        _Started.conf, _Started.session = conf, session
        return session


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
