"""``python -m icegroup.infra.class_archive``: record the class archive new Spark drivers start from (``make jvm``).

A child process runs one small lease on a throw-away embedded lakehouse, with a driver JVM that
writes every class it loaded to an archive as it exits (``spark_jobs/class_archive.py`` says why).
Only once that JVM has exited is the archive moved to where sessions look for it, so a session
never maps in a half-written one. An archive that is already there is kept.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyspark
from pyspark import SparkContext

from icegroup.iceberg.config.lakehouse import ENV_HOME, LakehouseConfig, load_lakehouse
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.liveness import RunState
from icegroup.infra.demo_data import append_batches, create_source
from icegroup.spark_jobs.class_archive import (
    DRIVER_OPTIONS,
    archive_folder,
    archive_loads,
    archive_path,
    keep_newest,
    recording_to,
)
from icegroup.spark_jobs.consume import ConsumeHooks, consume
from icegroup.spark_jobs.java import spark_java
from icegroup.spark_jobs.session import get_session, spark_conf

ENV_ICEBERG_VERSION = "ICEGROUP_ICEBERG_VERSION"
RECORD_TIMEOUT_S = 600
# Archives kept in the cache: the newest for each of a few Spark and Iceberg pairs or rebuilt jars.
KEEP = 3


def lakehouse_in(home: Path) -> LakehouseConfig:
    """The embedded default lakehouse in ``home``, with the Iceberg version a matrix run asks for."""
    env = {ENV_HOME: str(home)}
    if os.environ.get(ENV_ICEBERG_VERSION):
        env[ENV_ICEBERG_VERSION] = os.environ[ENV_ICEBERG_VERSION]
    return load_lakehouse(env=env)


def target(home: Path) -> Path | None:
    """Where the archive for the embedded default's driver goes; None while its jars are not resolved yet."""
    java = spark_java()
    if java is None:
        raise SystemExit("class archive: no java found; run `make system`, or set JAVA_HOME to a JDK 17")
    return archive_path(spark_conf(lakehouse_in(home)), java, pyspark.__version__, archive_folder())


def record(home: Path, dump: Path) -> None:
    """Run one lease with a driver that writes its classes to ``dump``, then wait for that JVM to exit."""
    base = lakehouse_in(home)
    options = recording_to(base.spark_conf, dump)[DRIVER_OPTIONS]
    lakehouse = base.model_copy(update={"spark_conf": {**base.spark_conf, DRIVER_OPTIONS: options}})
    catalog = lakehouse.catalog()
    group = GroupConfig(name="warmup", source="warmup.events", sink="warmup.events_out")
    append_batches(create_source(catalog, group.source), 2, 50)
    spark = get_session(lakehouse)
    hooks = ConsumeHooks(lambda: spark, lambda _lease: RunState.MISSING, progress=lambda _line: None)
    consume(lakehouse, group, "class-archive", hooks)
    gateway = SparkContext._gateway
    spark.stop()
    if gateway is not None:
        gateway.shutdown()
        gateway.proc.stdin.close()  # the driver exits once its standard input closes, writing the archive
        gateway.proc.wait(timeout=RECORD_TIMEOUT_S)


def main(argv: list[str] | None = None) -> int:
    """Record the archive unless it is there; ``--record DUMP --home DIR`` is the child that runs the lease.

    The archive only speeds up a driver's start, so a recording that fails (a Java older than 13,
    a lease that would not run) is reported and ``make`` goes on without it.
    """
    parser = argparse.ArgumentParser(prog="icegroup.infra.class_archive")
    parser.add_argument("--record", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--home", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.record is not None:
        record(args.home, args.record)
        return 0
    folder = archive_folder()
    if any(char.isspace() for char in str(folder)):
        print(f"class archive: not recorded, since Spark would split its path ({folder}) at the whitespace")
        return 0
    with tempfile.TemporaryDirectory(prefix="icegroup-class-archive-") as scratch:
        home = Path(scratch)
        found = target(home)
        if found is not None and found.is_file():
            print(f"class archive: {found} is recorded")
            return 0
        folder.mkdir(parents=True, exist_ok=True)
        drop_abandoned(folder)
        dump = folder / f"recording-{os.getpid()}.part"  # beside the archive, so that moving it is atomic
        started = time.monotonic()
        try:
            problem = run_recording(dump, home)
            found = target(home)
            java = spark_java()
            if problem is None and (
                found is None or java is None or not dump.is_file() or not archive_loads(java, dump)
            ):
                problem = "Spark's jars are unresolved, or Java wrote no archive that a JVM starts from"
            if problem is not None or found is None:
                print(f"class archive: not recorded ({problem}); Spark drivers start without one")
                return 0
            os.replace(dump, found)
            keep_newest(folder, KEEP)
        finally:
            dump.unlink(missing_ok=True)
        took = time.monotonic() - started
        print(f"class archive: {found} ({found.stat().st_size / 2**20:.0f} MB, recorded in {took:.0f} s)")
    return 0


def run_recording(dump: Path, home: Path) -> str | None:
    """Run the recording child and wait for it and its JVM; what went wrong, or None.

    The child runs in a session of its own, so that on a timeout or Ctrl-C its JVM is killed with it
    (``SIGKILL`` writes no archive) instead of writing one after the dump was cleaned up.
    """
    command = [sys.executable, "-m", "icegroup.infra.class_archive", "--record", str(dump), "--home", str(home)]
    child = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        _, errors = child.communicate(timeout=RECORD_TIMEOUT_S)  # the pipe closes once the JVM has exited too
    except BaseException as exc:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
        if isinstance(exc, subprocess.TimeoutExpired):
            return f"the recording lease took over {RECORD_TIMEOUT_S} s"
        raise
    if child.returncode != 0:
        return f"the recording lease failed, exit {child.returncode}: {errors.strip()[-2000:]}"
    return None


def drop_abandoned(folder: Path) -> None:
    """Delete recordings whose recorder is gone (a machine that went down mid-recording leaves one)."""
    for part in folder.glob("recording-*.part"):
        pid = part.stem.removeprefix("recording-")
        if pid.isdigit() and not alive(int(pid)):
            part.unlink(missing_ok=True)


def alive(pid: int) -> bool:
    """Whether a process with this pid runs on this machine."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


if __name__ == "__main__":
    sys.exit(main())
