"""A class-data archive of the Spark driver's classes (Java's AppCDS), so that a new session starts warm.

A fresh driver JVM spends seconds loading, parsing and verifying the same classes of Spark, Iceberg
and icegroup before its first lease commits. Java 17 can keep those classes, already parsed, in an
archive that a later JVM maps in (``-XX:SharedArchiveFile``). ``make jvm`` records one
(``icegroup.infra.class_archive``) by running one small lease under ``-XX:ArchiveClassesAtExit``;
a session whose Java, Spark and jars match a recorded archive starts with it. Java checks the
archive itself and ignores one that does not fit (another JDK build, another class path, a changed
jar's classes), so a stale archive costs its disk and nothing else; its warnings are turned off.

The archive is handed to the driver through ``SPARK_SUBMIT_OPTS``, which Spark's launcher puts
before every other driver option, so the user's own ``spark.driver.extraJavaOptions`` (in the
lakehouse config or in ``spark-defaults.conf``) stay as they are and win where they differ.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from icegroup.spark_jobs.jars import JARS_CONF, PACKAGES_CONF, spark_jars_dir

DRIVER_OPTIONS = "spark.driver.extraJavaOptions"
SUBMIT_OPTIONS = "SPARK_SUBMIT_OPTS"
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"
# Driver options that already decide the class archive: a user's choice, or the recorder's own run.
ARCHIVE_FLAGS = ("-Xshare", "SharedArchiveFile", "ArchiveClassesAtExit", "RecordDynamicDumpInfo")


def archive_folder(env: Mapping[str, str] | None = None) -> Path:
    """Where archives are kept: ``$XDG_CACHE_HOME/icegroup/class-archives``, else under ``~/.cache``."""
    env = os.environ if env is None else env
    cache = Path(env["XDG_CACHE_HOME"]) if env.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return cache / "icegroup" / "class-archives"


def archive_path(conf: Mapping[str, str], java: str, spark_version: str, folder: Path) -> Path | None:
    """The archive for a driver started with ``conf`` by ``java``; None while Spark still has packages to resolve.

    The name is a digest of what decides the driver's classes: the Java binary, the Spark version
    and the jars handed to Spark, each with its size and time, so a rebuilt jar gets a new archive.
    A session that resolves packages gets its jars only once it runs, so it has no archive yet; the
    next start finds them resolved and named in ``spark.jars``.
    """
    if conf.get(PACKAGES_CONF):
        return None
    jars = sorted(filter(None, conf.get(JARS_CONF, "").split(",")))
    what = {"java": os.path.realpath(java), "spark": spark_version, "jars": [[jar, *stamp(Path(jar))] for jar in jars]}
    digest = hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:16]
    return folder / f"driver-{digest}.jsa"


def stamp(jar: Path) -> tuple[int, int]:
    """A jar's size and modification time in nanoseconds; zeros for one that is not there."""
    try:
        info = jar.stat()
    except OSError:
        return (0, 0)
    return (info.st_size, info.st_mtime_ns)


def keep_newest(folder: Path, keep: int) -> list[Path]:
    """Delete all but the ``keep`` newest archives in ``folder`` (each is some 140 MB); returns the deleted."""

    def age(path: Path) -> int:
        try:
            return path.stat().st_mtime_ns
        except OSError:  # deleted meanwhile by another recorder
            return 0

    archives = sorted(folder.glob("driver-*.jsa"), key=age, reverse=True)
    for old in archives[keep:]:
        old.unlink(missing_ok=True)
    return archives[keep:]


def archive_options(conf: Mapping[str, str], archive: Path | None) -> str | None:
    """The Java options that map ``archive`` into a new driver; None when there is none to map or it must not be.

    Not when the driver's own options already name a class archive or sharing mode (a user's
    choice, or the recorder, whose JVM cannot both read and write one), and not for a path with
    whitespace, which Spark's launcher would split into two options.
    """
    if archive is None or not archive.is_file() or any(char.isspace() for char in str(archive)):
        return None
    if any(flag in conf.get(DRIVER_OPTIONS, "") for flag in ARCHIVE_FLAGS):
        return None
    return f"-XX:SharedArchiveFile={archive} {QUIET}"


@contextmanager
def submit_options(options: str | None) -> Iterator[None]:
    """Put ``options`` in ``SPARK_SUBMIT_OPTS``, before any the user set there, while a driver starts."""
    if options is None:
        yield
        return
    before = os.environ.get(SUBMIT_OPTIONS)
    os.environ[SUBMIT_OPTIONS] = f"{options} {before or ''}".strip()
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(SUBMIT_OPTIONS, None)
        else:
            os.environ[SUBMIT_OPTIONS] = before


def recording_to(conf: Mapping[str, str], dump: Path) -> dict[str, str]:
    """``conf`` for a driver JVM that writes the classes it loaded to ``dump`` as it exits."""
    given = conf.get(DRIVER_OPTIONS, "").strip()
    return {**conf, DRIVER_OPTIONS: f"{given} -XX:ArchiveClassesAtExit={dump} {QUIET}".strip()}


def archive_loads(java: str, archive: Path, timeout_s: float = 60) -> bool:
    """Whether a JVM with Spark's class path starts from ``archive``: a cut-short archive crashes the JVM that maps it.

    The recorder moves an archive into place only after its JVM exited, and checks it here first, so
    that a file cut short (a full disk) never reaches a session.
    """
    with tempfile.TemporaryDirectory(prefix="icegroup-archive-check-") as scratch:
        crash = [f"-XX:ErrorFile={scratch}/hs_err.log", "-XX:-CreateCoredumpOnCrash"]  # a crash leaves nothing behind
        command = [java, f"-XX:SharedArchiveFile={archive}", *QUIET.split(), *crash, "-cp", f"{spark_jars_dir()}/*"]
        try:
            done = subprocess.run([*command, "-version"], capture_output=True, cwd=scratch, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return False
    return done.returncode == 0
