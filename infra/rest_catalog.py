"""A local Iceberg REST catalog server: its classpath, its command line, and start, readiness and stop.

icegroup's fences must hold against a REST catalog, where the server checks a commit's requirements
against the latest metadata. Iceberg's own REST test server is a test fixture (Jetty, a Docker image)
that needs a classpath of its own, so ``infra/rest_catalog/`` holds a small server over Iceberg's
reference ``CatalogHandlers`` and a ``JdbcCatalog`` (SQLite or PostgreSQL). ``make jvm`` builds it
with Maven, which copies the Iceberg runtime and the JDBC drivers it runs with into
``infra/rest_catalog/lib``; Hadoop's client comes from the pyspark install.

The server requires a credential, so that clients go through their real credential configuration:
OAuth2 client credentials at ``/v1/oauth/tokens`` (pyiceberg and Spark: ``credential=id:secret`` and
``oauth2-server-uri=<uri>/v1/oauth/tokens``) and/or a static bearer token. Secrets reach it through its
environment, never its command line (``ps`` shows that). For manual use::

    export ICEGROUP_REST_CLIENT_ID=icegroup ICEGROUP_REST_CLIENT_SECRET=...
    python -m icegroup.infra.rest_catalog --port 8181 --jdbc-url jdbc:sqlite:/tmp/rest.db --warehouse /tmp/wh
"""

from __future__ import annotations

import argparse
import os
import subprocess
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from icegroup.infra.processes import wait_for
from icegroup.spark_jobs.jars import ICEGROUP_JAR

SERVER_DIR = Path(__file__).resolve().parent / "rest_catalog"
SERVER_JAR = SERVER_DIR / "target" / "icegroup-rest-catalog.jar"
MAIN_CLASS = "icegroup.rest.RestCatalogServer"
# What a credentials mapping may hold, and the server's environment variable for each.
CREDENTIAL_ENV = {
    "client_id": "ICEGROUP_REST_CLIENT_ID",
    "client_secret": "ICEGROUP_REST_CLIENT_SECRET",
    "token": "ICEGROUP_REST_TOKEN",
}
JDBC_PASSWORD_ENV = "ICEGROUP_REST_JDBC_PASSWORD"
TOKENS_PATH = "/v1/oauth/tokens"
# pyspark's jars the server needs: Hadoop's client (JdbcCatalog's Configuration, HadoopFileIO), the
# commons-logging API Hadoop's FileSystem logs through (jcl-over-slf4j), and SLF4J with the Log4j 2
# binding pyspark ships, so Iceberg's warnings reach the log instead of a "no provider" notice.
PYSPARK_JARS = (
    "hadoop-client-api-*.jar",
    "hadoop-client-runtime-*.jar",
    "jcl-over-slf4j-*.jar",
    "slf4j-api-*.jar",
    "log4j-slf4j2-impl-*.jar",
    "log4j-api-*.jar",
    "log4j-core-*.jar",
)


def pyspark_jars_dir() -> Path:
    """The jars folder of the pyspark install (Hadoop, SLF4J, Log4j)."""
    import pyspark

    return Path(pyspark.__file__).parent / "jars"


def _one(folder: Path, pattern: str) -> Path:
    found = sorted(folder.glob(pattern))
    if not found:
        raise FileNotFoundError(f"no {pattern} in {folder}; reinstall the venv with `make venv`")
    return found[-1]


def classpath() -> list[Path]:
    """Every jar the server runs with, checked to exist: its own, Maven's copies, pyspark's.

    icegroup's SQLite shim (in ``icegroup-spark.jar``) is on it too: with ``jdbc:icegroup-sqlite:<path>``
    the server can share a SQLite catalog file with other processes (pyiceberg's SqlCatalog, Spark)
    without holding a read transaction open on it; a file only the server uses can stay ``jdbc:sqlite:``.
    """
    lib = sorted((SERVER_DIR / "lib").glob("*.jar"))
    for own in (SERVER_JAR, ICEGROUP_JAR):
        if not own.is_file() or not lib:
            raise FileNotFoundError(f"{own} or {SERVER_DIR / 'lib'} is not built; run `make jvm`")
    return [SERVER_JAR, ICEGROUP_JAR, *lib, *(_one(pyspark_jars_dir(), pattern) for pattern in PYSPARK_JARS)]


@dataclass(frozen=True)
class RestServer:
    """Where a server listens and what it serves; secrets are not part of it but passed to ``start``.

    ``jdbc_password`` is the one secret kept here, because it belongs to the catalog database; it
    reaches the server through its environment, like the credentials, and is never shown by ``repr``.
    """

    jdbc_url: str
    warehouse: str
    host: str = "127.0.0.1"
    port: int = 8181
    jdbc_user: str | None = None
    jdbc_password: str | None = field(default=None, repr=False)
    token_ttl_s: int = 3600
    catalog_name: str = "lake"
    threads: int = 8

    @property
    def url(self) -> str:
        """The catalog's base URI, as clients take it (``uri``)."""
        return f"http://{self.host}:{self.port}"

    @property
    def tokens_url(self) -> str:
        """The OAuth2 token endpoint, as clients take it (``oauth2-server-uri``)."""
        return self.url + TOKENS_PATH

    @property
    def warehouse_uri(self) -> str:
        """The warehouse as a URI: a plain path becomes an absolute ``file://`` URI."""
        if "://" in self.warehouse:
            return self.warehouse
        return Path(self.warehouse).resolve().as_uri()


def java() -> str:
    """The ``java`` of ``JAVA_HOME`` when set (as Spark picks it), else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    return str(Path(home) / "bin" / "java") if home else "java"


def command(settings: RestServer) -> list[str]:
    """The server's command line: no secret in it, since ``ps`` shows it to every user."""
    cmd = [
        java(),
        # Without TCP_NODELAY the JDK server's small responses wait on delayed ACKs (~60 ms a request).
        "-Dsun.net.httpserver.nodelay=true",
        # Log4j's default configuration, at WARN: Iceberg's and Hadoop's warnings, nothing chattier.
        "-Dlog4j2.level=WARN",
        "-cp",
        os.pathsep.join(str(jar) for jar in classpath()),
        MAIN_CLASS,
        "--host",
        settings.host,
        "--port",
        str(settings.port),
        "--jdbc-url",
        settings.jdbc_url,
        "--warehouse",
        settings.warehouse_uri,
        "--catalog-name",
        settings.catalog_name,
        "--token-ttl-s",
        str(settings.token_ttl_s),
        "--threads",
        str(settings.threads),
    ]
    if settings.jdbc_user:
        cmd += ["--jdbc-user", settings.jdbc_user]
    return cmd


def server_env(settings: RestServer, credentials: dict[str, str]) -> dict[str, str]:
    """The server's environment: this one's, without inherited server secrets, plus the given ones.

    ``credentials`` maps ``client_id``, ``client_secret`` and ``token`` (each optional; an id and a
    secret, or a token, are required by the server) to their values. An inherited
    ``ICEGROUP_REST_*`` variable is dropped, so a stray token in the caller's shell cannot open a
    server that a test meant to protect with other credentials.
    """
    unknown = set(credentials) - set(CREDENTIAL_ENV)
    if unknown:
        raise ValueError(f"unknown credential keys {sorted(unknown)}; use {sorted(CREDENTIAL_ENV)}")
    env = {key: value for key, value in os.environ.items() if not key.startswith("ICEGROUP_REST_")}
    env.update({CREDENTIAL_ENV[key]: value for key, value in credentials.items()})
    if settings.jdbc_password:
        env[JDBC_PASSWORD_ENV] = settings.jdbc_password
    return env


def start(settings: RestServer, log: Path, credentials: dict[str, str]) -> subprocess.Popen[bytes]:
    """Start the server in its own session, its output appended to ``log``; ``wait_ready`` then waits for it."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        return subprocess.Popen(
            command(settings),
            env=server_env(settings, credentials),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )


def answers(url: str) -> bool:
    """Whether an HTTP server answers at ``url`` at all: any status counts, a 401 included."""
    try:
        with urllib.request.urlopen(url, timeout=2):
            return True
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False


def wait_ready(
    url: str, timeout_s: float = 30.0, process: subprocess.Popen[bytes] | None = None, log: Path | None = None
) -> None:
    """Poll ``<url>/v1/config`` until the server answers (without a token that is a 401, and means up).

    With ``process``, a server that exits while starting (a port in use, a bad JDBC URL) stops the wait
    at once instead of at the timeout; either way the error names the log.
    """
    where = f"; see {log}" if log else ""

    def ready() -> bool:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"the REST catalog server exited with {process.returncode} while starting{where}")
        return answers(url.rstrip("/") + "/v1/config")

    wait_for(f"the REST catalog at {url}", ready, timeout_s, str(log) if log else None)


def stop(process: subprocess.Popen[bytes], grace_s: float = 10.0) -> int:
    """SIGTERM (the server stops listening and closes its catalog), SIGKILL after ``grace_s``; its exit code."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(grace_s)
        except subprocess.TimeoutExpired:
            process.kill()
    return process.wait()


def main() -> None:
    """Run a server in the foreground (Ctrl-C stops it), credentials from this shell's environment."""
    parser = argparse.ArgumentParser(
        description="A local Iceberg REST catalog over a JDBC catalog. Credentials come from the environment: "
        + ", ".join(CREDENTIAL_ENV.values())
        + f" and, for the database, {JDBC_PASSWORD_ENV}."
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8181)
    parser.add_argument("--jdbc-url", help="jdbc:sqlite:/path/catalog.db or jdbc:postgresql://host:port/db")
    parser.add_argument("--jdbc-user")
    parser.add_argument("--warehouse", help="a local folder or a file:// URI")
    parser.add_argument("--catalog-name", default="lake")
    parser.add_argument("--token-ttl-s", type=int, default=3600)
    parser.add_argument("--threads", type=int, default=8)
    args = parser.parse_args()
    if not args.jdbc_url or not args.warehouse:
        parser.error("--jdbc-url and --warehouse are required")
    settings = RestServer(
        jdbc_url=args.jdbc_url,
        warehouse=args.warehouse,
        host=args.host,
        port=args.port,
        jdbc_user=args.jdbc_user,
        token_ttl_s=args.token_ttl_s,
        catalog_name=args.catalog_name,
        threads=args.threads,
    )
    cmd = command(settings)
    # The JVM replaces this process, so Ctrl-C and SIGTERM reach the server directly.
    os.execvp(cmd[0], cmd)


if __name__ == "__main__":
    main()
