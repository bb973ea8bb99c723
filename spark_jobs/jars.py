"""Which jars a Borrower's Spark needs, and where Spark gets them: by Maven coordinates, resolved once.

Spark users get the Iceberg runtime by coordinates (``spark.jars.packages``) or have it in their
cluster's ``$SPARK_HOME/jars``; icegroup does the same, and adds no second copy of a runtime the
cluster already has. Spark's own resolution downloads each jar once into its Ivy folder. It still
spends about 0.4 s resolving on every start, so after the first start icegroup records which files
the coordinates resolved to, and later starts hand Spark those files directly: a second start
resolves and downloads nothing. The one jar icegroup ships is its own (``icegroup-spark.jar``).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.engine import make_url

from icegroup.iceberg.config.lakehouse import LakehouseConfig
from icegroup.iceberg.errors import ConfigError
from icegroup.spark_jobs.engines import (
    DRIVERS,
    Runtime,
    aws_bundle,
    check_pair,
    ivy_file,
    jar_file,
    minor,
    runtime_for,
    runtime_from_coordinate,
    runtime_from_file,
)

ICEGROUP_JAR = Path(__file__).parent / "sink" / "jvm" / "icegroup-spark.jar"
IVY_CONF = "spark.jars.ivy"
JARS_CONF = "spark.jars"
PACKAGES_CONF = "spark.jars.packages"


@dataclass(frozen=True)
class SparkJars:
    """What Spark is given: coordinates it resolves, and files it loads as they are."""

    packages: tuple[str, ...]
    files: tuple[str, ...]
    ivy: Path


def spark_jars_dir() -> Path:
    """The jars folder of the Spark this process runs: ``$SPARK_HOME/jars``, else the pyspark install's."""
    home = os.environ.get("SPARK_HOME")
    if home:
        return Path(home) / "jars"
    import pyspark

    return Path(pyspark.__file__).parent / "jars"


def installed_runtime(folder: Path) -> Runtime | None:
    """The Iceberg runtime already on Spark's classpath in ``folder``, if a cluster put one there."""
    for jar in sorted(folder.glob("iceberg-spark-runtime-*.jar")):
        runtime = runtime_from_file(jar.name)
        if runtime is not None:
            return runtime
    return None


def installed_aws_bundle(folder: Path) -> bool:
    """Whether the cluster put an ``iceberg-aws-bundle`` on Spark's classpath in ``folder`` too."""
    return any(folder.glob("iceberg-aws-bundle-*.jar"))


def catalog_backend(lakehouse: LakehouseConfig) -> str | None:
    """The SQL catalog's database backend (``sqlite``, ``postgresql``); None for a REST catalog: no driver."""
    return None if lakehouse.catalog_uri is None else make_url(lakehouse.catalog_uri).get_backend_name()


def coordinates(
    lakehouse: LakehouseConfig, spark_version: str, preinstalled: Runtime | None, aws_preinstalled: bool = False
) -> list[str]:
    """Every Maven coordinate this lakehouse needs on this Spark; pure, so unit-tested.

    The runtime is left out when the cluster has one (``preinstalled``) or the user names their own
    (``iceberg_packages``, or ``spark.jars.packages`` in ``spark_conf``); the JDBC driver comes with a
    SQL catalog; the AWS bundle of the runtime's own release with an S3 warehouse. Nothing is listed
    twice (a user's own version of an artifact wins), and nothing the cluster already has is added.
    """
    if preinstalled is not None:
        check_pair(spark_version, preinstalled.iceberg)
    listed = ",".join(filter(None, (lakehouse.iceberg_packages, lakehouse.spark_conf.get(PACKAGES_CONF))))
    own = [c.strip() for c in listed.split(",") if c.strip()]
    theirs = next((r for r in map(runtime_from_coordinate, own) if r is not None), None)
    runtime = preinstalled or theirs or runtime_for(spark_version, lakehouse.iceberg_version)
    coords = own if preinstalled or theirs else [runtime.coordinate, *own]
    backend = catalog_backend(lakehouse)
    if backend is not None:
        coords.append(DRIVERS[backend])
    if lakehouse.on_s3 and not aws_preinstalled:
        coords.append(aws_bundle(runtime.iceberg))
    return _first_of_each_artifact(coords)


def _first_of_each_artifact(coords: list[str]) -> list[str]:
    seen: set[str] = set()
    kept = []
    for coordinate in coords:
        artifact = coordinate.rsplit(":", 1)[0]
        if artifact not in seen:
            seen.add(artifact)
            kept.append(coordinate)
    return kept


def ivy_dir(lakehouse: LakehouseConfig, spark_version: str) -> Path:
    """Spark's Ivy folder for package resolution: the configured ``spark.jars.ivy``, else Spark's own default.

    Spark 3.5 resolves into ``~/.ivy2``; Spark 4.0 into ``~/.ivy2.5.2``, which it keeps apart because
    its newer Ivy lays out the cache differently.
    """
    configured = lakehouse.spark_conf.get(IVY_CONF)
    if configured:
        return Path(configured).expanduser()
    return Path.home() / (".ivy2" if minor(spark_version) == "3.5" else ".ivy2.5.2")


def _manifest(ivy: Path, packages: tuple[str, ...]) -> Path:
    key = hashlib.sha1(",".join(sorted(packages)).encode()).hexdigest()[:16]
    return ivy / "icegroup" / f"{key}.jars"


def resolved(ivy: Path, packages: tuple[str, ...]) -> list[str] | None:
    """The files ``packages`` resolved to at an earlier start, if every one is still there."""
    manifest = _manifest(ivy, packages)
    if not manifest.is_file():
        return None
    files = manifest.read_text().split()
    return files if files and all(Path(f).is_file() for f in files) else None


def remember(ivy: Path, packages: tuple[str, ...], spark_jars: str) -> None:
    """Record the files Spark resolved ``packages`` to (the Ivy-folder entries of its ``spark.jars``).

    Only a list that holds every coordinate's own jar is kept: a JVM that was already running resolved
    nothing for ``packages``, and its list must not stand for them at the next start.
    """
    root = str(ivy / "jars")
    files = [jar.removeprefix("file://").removeprefix("file:") for jar in spark_jars.split(",") if root in jar]
    names = {Path(file).name for file in files}
    if files and all(ivy_file(coordinate) in names for coordinate in packages):
        manifest = _manifest(ivy, packages)
        manifest.parent.mkdir(parents=True, exist_ok=True)
        partial = manifest.with_suffix(f".{os.getpid()}")
        partial.write_text("\n".join(files) + "\n")
        partial.replace(manifest)


@contextmanager
def resolving(ivy: Path) -> Iterator[None]:
    """Hold the Ivy folder's lock while Spark resolves, so processes starting at once never share a download."""
    lock = ivy / "icegroup" / "resolve.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    with lock.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def spark_jars(lakehouse: LakehouseConfig, spark_version: str) -> SparkJars:
    """What to give Spark for this lakehouse: a ``jars`` folder's files, cached resolutions, or coordinates."""
    if not ICEGROUP_JAR.is_file():
        raise ConfigError(f"Spark needs {ICEGROUP_JAR}; build it with `make jvm`")
    ivy = ivy_dir(lakehouse, spark_version)
    folder = spark_jars_dir()
    coords = coordinates(lakehouse, spark_version, installed_runtime(folder), installed_aws_bundle(folder))
    if lakehouse.jars is not None:
        return SparkJars(packages=(), files=(*folder_files(lakehouse.jars, coords), str(ICEGROUP_JAR)), ivy=ivy)
    packages = tuple(coords)
    cached = resolved(ivy, packages) if packages else None
    if cached is not None:
        return SparkJars(packages=(), files=(*cached, str(ICEGROUP_JAR)), ivy=ivy)
    return SparkJars(packages=packages, files=(str(ICEGROUP_JAR),), ivy=ivy)


def folder_files(prefix: str, coords: list[str]) -> list[str]:
    """Each coordinate's jar in one folder or URL prefix (``make jars`` fills one), checked when local.

    A cluster's executors fetch each jar from the location given (the driver serves local files to
    them), so one configured place is enough; nothing is looked up on the executors' hosts.
    """
    prefix = prefix.rstrip("/")
    names = [jar_file(c) for c in coords]
    if "://" in prefix and not prefix.startswith("file://"):
        return [f"{prefix}/{name}" for name in names]
    folder = Path(prefix.removeprefix("file://"))
    missing = [name for name in names if not (folder / name).is_file()]
    if missing:
        raise ConfigError(f"jars: {folder} has no {', '.join(missing)}; fill it with `make jars`")
    return [str(folder / name) for name in names]
