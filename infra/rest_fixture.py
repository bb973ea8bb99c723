"""Iceberg's own REST test fixture (``org.apache.iceberg.rest.RESTCatalogServer``): settings, command, environment.

The fixture is the server Iceberg's project tests its REST clients against: Iceberg's reference
``CatalogHandlers`` over a ``JdbcCatalog``, with no credential checks and a single catalog (a client's
``warehouse`` is ignored). ``make jvm`` copies its classpath from Maven Central into
``infra/rest_fixture/lib`` (``infra/rest_fixture/pom.xml``).

It takes no arguments and no ``-D`` properties: every catalog property comes from an environment
variable ``CATALOG_<key>`` (``__`` for ``-``, ``_`` for ``.``), and any ``CATALOG_*`` variable it
inherits becomes a property too, so ``server_env`` drops inherited ones. It binds every interface;
clients reach it on the loopback address.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from icegroup.infra.rest_catalog import java
from icegroup.spark_jobs.jars import ICEGROUP_JAR

FIXTURE_DIR = Path(__file__).resolve().parent / "rest_fixture"
FIXTURE_LIB = FIXTURE_DIR / "lib"
MAIN_CLASS = "org.apache.iceberg.rest.RESTCatalogServer"
ENV_PREFIX = "CATALOG_"


@dataclass(frozen=True)
class FixtureServer:
    """Where the fixture listens, its catalog database and its warehouse (a folder or an ``s3://`` URI).

    An ``s3://`` warehouse is written through ``S3FileIO`` at ``s3_endpoint`` with path-style access,
    its keys taken from the server's environment (``AWS_ACCESS_KEY_ID`` and so on), as the AWS SDK does.
    """

    jdbc_url: str
    warehouse: str
    port: int = 8181
    jdbc_user: str | None = None
    jdbc_password: str | None = field(default=None, repr=False)
    s3_endpoint: str | None = None
    s3_region: str = "us-east-1"

    @property
    def url(self) -> str:
        """The catalog's base URI, as clients take it (``uri``)."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def jdbc_uri(self) -> str:
        """The catalog database's JDBC URL; a SQLite file's goes through icegroup's shim, waits for a lock, keeps a WAL.

        The fixture's Jetty threads share the file through a pool of connections, and SQLite fails a
        writer that finds it locked at once unless told to wait (``busy_timeout``). Iceberg's
        ``JdbcCatalog`` leaves the metadata results it reads at start open; on a catalog file that
        already holds tables (a fixture started again) that pins a read transaction, and in WAL mode
        that pooled connection then serves every later read of it as the file was at start: a table
        loaded there lacks the snapshots committed since. The shim (``jdbc:icegroup-sqlite:``, in
        ``icegroup-spark.jar``) closes those results at once; it is only a JDBC driver, and the
        fixture's handlers and catalog stay Iceberg's own.
        """
        if not self.jdbc_url.startswith("jdbc:sqlite:") or "?" in self.jdbc_url:
            return self.jdbc_url
        path = self.jdbc_url.removeprefix("jdbc:sqlite:")
        return f"jdbc:icegroup-sqlite:{path}?busy_timeout=30000&journal_mode=WAL"

    def properties(self) -> dict[str, str]:
        """The catalog properties the fixture is started with."""
        warehouse = self.warehouse if "://" in self.warehouse else Path(self.warehouse).resolve().as_uri()
        props = {
            "rest.port": str(self.port),
            "uri": self.jdbc_uri,
            "warehouse": warehouse,
            "catalog-impl": "org.apache.iceberg.jdbc.JdbcCatalog",
            "jdbc.schema-version": "V1",
        }
        if self.jdbc_user:
            props["jdbc.user"] = self.jdbc_user
        if self.jdbc_password:
            props["jdbc.password"] = self.jdbc_password
        if warehouse.startswith("s3://"):
            props.update(
                {
                    "io-impl": "org.apache.iceberg.aws.s3.S3FileIO",
                    "s3.path-style-access": "true",
                    "client.region": self.s3_region,
                }
            )
            if self.s3_endpoint:
                props["s3.endpoint"] = self.s3_endpoint
        return props


def env_name(key: str) -> str:
    """The variable the fixture reads ``key`` from: ``CATALOG_S3_PATH__STYLE__ACCESS`` for ``s3.path-style-access``."""
    return ENV_PREFIX + key.replace("-", "__").replace(".", "_").upper()


def server_env(settings: FixtureServer, base: dict[str, str] | None = None) -> dict[str, str]:
    """``base`` (this process's environment by default) without ``CATALOG_*`` variables, plus the fixture's own."""
    inherited = os.environ if base is None else base
    env = {key: value for key, value in inherited.items() if not key.startswith(ENV_PREFIX)}
    env.update({env_name(key): value for key, value in settings.properties().items()})
    return env


def command() -> list[str]:
    """The fixture's command line: a small heap, every jar ``make jvm`` copied, and icegroup's (the SQLite shim)."""
    if not any(FIXTURE_LIB.glob("iceberg-open-api-*-test-fixtures.jar")):
        raise FileNotFoundError(f"{FIXTURE_LIB} holds no Iceberg REST fixture; run `make jvm`")
    if not ICEGROUP_JAR.is_file():
        raise FileNotFoundError(f"{ICEGROUP_JAR} is not built; run `make jvm`")
    return [java(), "-Xmx256m", "-XX:+UseSerialGC", "-cp", f"{FIXTURE_LIB}/*:{ICEGROUP_JAR}", MAIN_CLASS]
