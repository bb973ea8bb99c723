"""``make jars``: one folder holding every jar Spark needs, for the lakehouse's ``jars`` setting.

A cluster's driver and executors then take their jars from that one place (copy it to shared storage
or a web server for hosts that do not share this disk) instead of resolving coordinates themselves.
Maven copies each coordinate icegroup would hand Spark (for both catalog backends and S3) into it,
so the folder holds exactly the files ``jars:`` expects, under Maven's names.
"""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path

import pyspark

from icegroup.iceberg.config.lakehouse import LakehouseConfig
from icegroup.spark_jobs.jars import ICEGROUP_JAR, coordinates

DEFAULT_FOLDER = Path("build/jars")
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy"


def every_coordinate(iceberg_version: str | None) -> list[str]:
    """The runtime for this pyspark, both JDBC drivers and the AWS bundle: all a ``jars`` folder may be asked for."""
    lakehouses = [
        LakehouseConfig(catalog_uri="sqlite:////tmp/c.db", warehouse="s3://b/w", iceberg_version=iceberg_version),
        LakehouseConfig(catalog_uri="postgresql://h/db", warehouse="/w", iceberg_version=iceberg_version),
    ]
    found: list[str] = []
    for lakehouse in lakehouses:
        found += [c for c in coordinates(lakehouse, pyspark.__version__, None) if c not in found]
    return found


def collect(folder: Path, iceberg_version: str | None = None) -> list[Path]:
    """Copy every coordinate's jar into ``folder``; Maven skips what is already there (icegroup's own jar stays put)."""
    if not ICEGROUP_JAR.is_file():
        raise SystemExit(f"missing {ICEGROUP_JAR}; run `make jvm` first")
    folder.mkdir(parents=True, exist_ok=True)
    for coordinate in every_coordinate(iceberg_version):
        subprocess.run(
            ["mvn", "-q", "-B", DEPENDENCY_PLUGIN, f"-Dartifact={coordinate}", f"-DoutputDirectory={folder}"],
            check=True,
        )
    return sorted(folder.glob("*.jar"))


def main() -> None:
    """Fill the folder and say what to set."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("folder", type=Path, nargs="?", default=DEFAULT_FOLDER)
    parser.add_argument("--iceberg-version", help="Iceberg release; default: the installed Spark's default")
    args = parser.parse_args()
    folder = args.folder.resolve()
    for jar in collect(folder, args.iceberg_version):
        print(f"  {jar.name}")
    print(f"jars: {folder}   (set jars: in the lakehouse config, or ICEGROUP_JARS)")


if __name__ == "__main__":
    main()
