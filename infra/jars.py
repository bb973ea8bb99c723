"""``make jars``: one folder holding every jar Spark needs, for the lakehouse's ``jars`` setting.

A cluster's driver and executors then take their jars from that one place (copy it to shared storage
or a web server for hosts that do not share this disk) instead of from this host's install paths.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from spark_jobs.session import AWS_BUNDLE_JAR, COMMIT_JAR, DRIVER_JARS, SQLITE_SHIM_JAR, runtime_jar

DEFAULT_FOLDER = Path("build/jars")


def collect(folder: Path) -> list[Path]:
    """Copy the Iceberg runtime, both JDBC drivers and icegroup's own jars into ``folder``; returns them.

    A jar already there with the same size is left alone, so re-running is cheap; the AWS bundle is
    never downloaded (Maven Central only) and is kept if someone put it there.
    """
    folder.mkdir(parents=True, exist_ok=True)
    sources = [runtime_jar(), Path(DRIVER_JARS["sqlite"]), Path(DRIVER_JARS["postgresql"]), SQLITE_SHIM_JAR, COMMIT_JAR]
    missing = [str(source) for source in sources if not source.is_file()]
    if missing:
        raise SystemExit(f"missing {', '.join(missing)}; run `make jvm` first")
    copied = []
    for source in sources:
        target = folder / source.name
        if not target.is_file() or target.stat().st_size != source.stat().st_size:
            shutil.copyfile(source, target)
        copied.append(target)
    return copied


def main() -> None:
    """Fill the folder and say what to set, and what an S3 warehouse still needs."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("folder", type=Path, nargs="?", default=DEFAULT_FOLDER)
    folder = parser.parse_args().folder.resolve()
    for jar in collect(folder):
        print(f"  {jar.name}")
    print(f"jars: {folder}   (set jars: in the lakehouse config, or ICEGROUP_JARS)")
    if not (folder / AWS_BUNDLE_JAR).is_file():
        print(f"an s3:// warehouse also needs {AWS_BUNDLE_JAR} here, from Maven Central (not on PyPI)")


if __name__ == "__main__":
    main()
