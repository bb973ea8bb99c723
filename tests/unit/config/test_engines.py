"""The supported Spark and Iceberg pairs, the coordinates each needs, and how a cached resolution is reused."""

from __future__ import annotations

from pathlib import Path

import pytest

from icegroup.iceberg.config.lakehouse import LakehouseConfig
from icegroup.iceberg.errors import ConfigError
from icegroup.spark_jobs.engines import (
    Runtime,
    check_pair,
    jar_file,
    minor,
    reads_row_lineage,
    runtime_for,
    runtime_from_file,
)
from icegroup.spark_jobs.jars import coordinates, installed_runtime, remember, resolved


@pytest.mark.parametrize(
    ("spark", "release"), [("3.5.8", "1.9.2"), ("3.5.3", "1.10.1"), ("4.0.1", "1.10.0"), ("3.5.8", "1.10.1 (commit)")]
)
def test_supported_pairs_pass(spark: str, release: str) -> None:
    check_pair(spark, release.split()[0])


@pytest.mark.parametrize(("spark", "iceberg"), [("3.4.1", "1.9.2"), ("4.0.1", "1.9.2"), ("3.5.8", "1.6.1")])
def test_an_unsupported_pair_names_both_versions_and_the_supported_pairs(spark: str, iceberg: str) -> None:
    with pytest.raises(ConfigError) as caught:
        check_pair(spark, iceberg)

    message = str(caught.value)
    assert message.startswith(f"iceberg_version: Spark {spark} with Iceberg {iceberg} is not a supported pair")
    assert "Spark 3.5 with Iceberg 1.9 or 1.10; Spark 4.0 with Iceberg 1.10" in message
    assert "ICEGROUP_ICEBERG_VERSION" in message


def test_each_spark_gets_the_runtime_built_for_its_scala() -> None:
    assert runtime_for("3.5.8", None).coordinate == "org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.10.1"
    assert runtime_for("4.0.1", None).coordinate == "org.apache.iceberg:iceberg-spark-runtime-4.0_2.13:1.10.1"
    assert runtime_for("3.5.8", "1.9.2").coordinate == "org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.9.2"


def test_an_unsupported_spark_is_refused_before_anything_is_fetched() -> None:
    with pytest.raises(ConfigError, match=r"^iceberg_version: Spark 3\.3\.0 with Iceberg none is not a supported"):
        runtime_for("3.3.0", None)


def test_versions_and_file_names() -> None:
    assert minor("3.5.8") == "3.5"
    assert minor("4.0.0.dev1") == "4.0"
    jar = "/opt/spark/jars/iceberg-spark-runtime-3.5_2.12-1.9.2.jar"
    assert runtime_from_file(jar) == Runtime("3.5", "2.12", "1.9.2")
    assert runtime_from_file("iceberg-core-1.9.2.jar") is None
    assert jar_file("org.xerial:sqlite-jdbc:3.46.1.3") == "sqlite-jdbc-3.46.1.3.jar"


def test_a_runtime_already_in_the_clusters_jars_is_used_and_not_fetched_again(tmp_path: Path) -> None:
    (tmp_path / "iceberg-spark-runtime-3.5_2.12-1.9.2.jar").write_bytes(b"PK")
    lakehouse = LakehouseConfig(catalog_uri=f"sqlite:///{tmp_path / 'c.db'}", warehouse=str(tmp_path / "w"))

    preinstalled = installed_runtime(tmp_path)

    assert preinstalled == Runtime("3.5", "2.12", "1.9.2")
    assert coordinates(lakehouse, "3.5.8", preinstalled) == ["org.xerial:sqlite-jdbc:3.46.1.3"]


def test_a_clusters_runtime_of_an_unsupported_pair_is_refused(tmp_path: Path) -> None:
    lakehouse = LakehouseConfig(catalog_uri=f"sqlite:///{tmp_path / 'c.db'}", warehouse=str(tmp_path / "w"))

    with pytest.raises(ConfigError, match=r"Spark 4\.0\.1 with Iceberg 1\.9\.2 is not a supported pair"):
        coordinates(lakehouse, "4.0.1", Runtime("3.5", "2.12", "1.9.2"))


def test_a_resolution_is_reused_only_while_every_file_it_named_is_there(tmp_path: Path) -> None:
    ivy = tmp_path / "ivy"
    (ivy / "jars").mkdir(parents=True)
    runtime = ivy / "jars" / "org.apache.iceberg_iceberg-spark-runtime-3.5_2.12-1.10.1.jar"
    runtime.write_bytes(b"PK")
    packages = ("org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.10.1",)

    assert resolved(ivy, packages) is None
    remember(ivy, packages, f"file://{runtime},/checkout/spark_jobs/sink/jvm/icegroup-spark.jar")

    assert resolved(ivy, packages) == [str(runtime)]
    assert resolved(ivy, ("org.xerial:sqlite-jdbc:3.46.1.3",)) is None
    runtime.unlink()
    assert resolved(ivy, packages) is None


def s3_lakehouse(tmp_path: Path, **fields: object) -> LakehouseConfig:
    values: dict[str, object] = {"catalog_uri": f"sqlite:///{tmp_path / 'c.db'}", "warehouse": "s3://b/w"}
    return LakehouseConfig.model_validate({**values, **fields})


def test_a_users_own_runtime_on_s3_gets_the_aws_bundle_of_its_own_release(tmp_path: Path) -> None:
    own = "org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.9.2"

    coords = coordinates(s3_lakehouse(tmp_path, iceberg_packages=own), "3.5.8", None)

    assert coords == [own, "org.xerial:sqlite-jdbc:3.46.1.3", "org.apache.iceberg:iceberg-aws-bundle:1.9.2"]


def test_packages_in_spark_conf_join_icegroups_and_a_users_driver_version_wins(tmp_path: Path) -> None:
    theirs = "org.xerial:sqlite-jdbc:3.49.1.0,com.example:udfs:1.0"
    lakehouse = s3_lakehouse(tmp_path, spark_conf={"spark.jars.packages": theirs})

    coords = coordinates(lakehouse, "3.5.8", None, aws_preinstalled=True)

    assert coords == [
        "org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.10.1",
        "org.xerial:sqlite-jdbc:3.49.1.0",
        "com.example:udfs:1.0",
    ]


def test_a_jar_list_missing_a_coordinate_is_not_remembered(tmp_path: Path) -> None:
    ivy = tmp_path / "ivy"
    (ivy / "jars").mkdir(parents=True)
    runtime = ivy / "jars" / "org.apache.iceberg_iceberg-spark-runtime-3.5_2.12-1.10.1.jar"
    runtime.write_bytes(b"PK")
    packages = ("org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.10.1", "org.xerial:sqlite-jdbc:3.46.1.3")

    remember(ivy, packages, f"file://{runtime}")

    assert resolved(ivy, packages) is None, "a JVM that resolved only the runtime does not stand for the driver"


@pytest.mark.parametrize(
    ("release", "reads"),
    [("1.10.1", True), ("1.10.0 (commit abc)", True), ("2.0.0", True), ("1.9.2", False), ("unknown", False)],
)
def test_row_lineage_is_read_from_iceberg_1_10_and_an_unknown_release_has_none(release: str, reads: bool) -> None:
    assert reads_row_lineage(release) is reads
