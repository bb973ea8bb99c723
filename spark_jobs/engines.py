"""The Spark and Iceberg pairs icegroup supports, and the Maven coordinates each pair needs.

Pure, so unit-tested without a JVM. Spark users get Iceberg by coordinates
(``spark.jars.packages``) or from their cluster's ``$SPARK_HOME/jars``; either way icegroup checks the
pair it really has before it reads or writes anything, because a runtime built for another Spark
fails late and obscurely (``NoSuchMethodError`` in the middle of a commit).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from icegroup.iceberg.errors import ConfigError

# Spark minor -> the Iceberg minors tested with it (CI runs each pair; docs/reference/matrix.md says what).
SUPPORTED: dict[str, tuple[str, ...]] = {"3.5": ("1.9", "1.10"), "4.0": ("1.10",)}
# The Iceberg release a Spark minor gets when nothing is configured: the newest patch of the newest tested minor.
DEFAULT_ICEBERG: dict[str, str] = {"3.5": "1.10.1", "4.0": "1.10.1"}
# Each Spark minor's Scala: pyspark 3.5 is built for 2.12, Spark 4 for 2.13 only.
SCALA: dict[str, str] = {"3.5": "2.12", "4.0": "2.13"}
DRIVERS: dict[str, str] = {
    "sqlite": "org.xerial:sqlite-jdbc:3.46.1.3",
    "postgresql": "org.postgresql:postgresql:42.7.4",
}
# The first Iceberg release whose Spark reader gives ``_row_id`` and whose compaction keeps it (v3 row lineage).
ROW_LINEAGE_SINCE = (1, 10)
_RUNTIME_FILE = re.compile(r"iceberg-spark-runtime-(\d+\.\d+)_(\d+\.\d+)-(\d+\.\d+\.\d+)\.jar$")


@dataclass(frozen=True)
class Runtime:
    """An Iceberg Spark runtime: the Spark minor and Scala it is built for, and its Iceberg release."""

    spark: str
    scala: str
    iceberg: str

    @property
    def coordinate(self) -> str:
        """Its Maven coordinate, as ``spark.jars.packages`` takes it."""
        return f"org.apache.iceberg:iceberg-spark-runtime-{self.spark}_{self.scala}:{self.iceberg}"


def minor(version: str) -> str:
    """``3.5.8`` -> ``3.5``; a version that does not start with two numbers is its own minor."""
    match = re.match(r"(\d+)\.(\d+)", version)
    return f"{match.group(1)}.{match.group(2)}" if match else version


def supported_pairs() -> str:
    """The supported pairs in words, for error messages and docs."""
    return "; ".join(f"Spark {spark} with Iceberg {' or '.join(ice)}" for spark, ice in SUPPORTED.items())


def check_pair(spark_version: str, iceberg_version: str) -> None:
    """Refuse a Spark and Iceberg pair icegroup was not tested with, naming both and the supported ones."""
    spark = minor(spark_version)
    if minor(iceberg_version) in SUPPORTED.get(spark, ()):
        return
    raise ConfigError(
        f"iceberg_version: Spark {spark_version} with Iceberg {iceberg_version} is not a supported pair; "
        f"icegroup supports {supported_pairs()}. Set iceberg_version (ICEGROUP_ICEBERG_VERSION) to a supported "
        f"release, or install a supported pyspark (pip install 'pyspark==3.5.*' or 'pyspark==4.0.*')"
    )


def reads_row_lineage(iceberg_version: str) -> bool:
    """Whether an Iceberg release's Spark reader gives format-v3 ``_row_id`` and its compaction keeps it: 1.10 on.

    A release string that does not start with two numbers is taken as one without it.
    """
    match = re.match(r"(\d+)\.(\d+)", iceberg_version)
    return match is not None and (int(match.group(1)), int(match.group(2))) >= ROW_LINEAGE_SINCE


def runtime_for(spark_version: str, iceberg_version: str | None) -> Runtime:
    """The runtime to fetch for this Spark: the configured Iceberg release, else the Spark minor's default."""
    spark = minor(spark_version)
    if spark not in SUPPORTED:
        check_pair(spark_version, iceberg_version or "none")
    iceberg = iceberg_version or DEFAULT_ICEBERG[spark]
    check_pair(spark_version, iceberg)
    return Runtime(spark=spark, scala=SCALA[spark], iceberg=iceberg)


def runtime_from_file(name: str) -> Runtime | None:
    """The runtime a jar's file name declares (``iceberg-spark-runtime-3.5_2.12-1.10.1.jar``), else None."""
    match = _RUNTIME_FILE.search(name)
    return Runtime(*match.groups()) if match else None


def runtime_from_coordinate(coordinate: str) -> Runtime | None:
    """The runtime a coordinate names (``org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.9.2``), else None."""
    group, _, rest = coordinate.partition(":")
    artifact, _, version = rest.partition(":")
    return runtime_from_file(f"{artifact}-{version}.jar") if group == "org.apache.iceberg" else None


def aws_bundle(iceberg_version: str) -> str:
    """The coordinate of S3FileIO and the AWS SDK for Spark's side of an S3 warehouse, matching the runtime."""
    return f"org.apache.iceberg:iceberg-aws-bundle:{iceberg_version}"


def jar_file(coordinate: str) -> str:
    """The file name Maven gives a coordinate's jar: ``artifact-version.jar``."""
    _, artifact, version = coordinate.split(":")
    return f"{artifact}-{version}.jar"


def ivy_file(coordinate: str) -> str:
    """The file name Spark's package resolution gives a coordinate's jar: ``group_artifact-version.jar``."""
    group, artifact, version = coordinate.split(":")
    return f"{group}_{artifact}-{version}.jar"
