"""A REST catalog in the lakehouse config: one set of properties for both engines, and no secret in any file or dump."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from icegroup.iceberg.config.lakehouse import LakehouseConfig, load_lakehouse
from icegroup.iceberg.config.rest import RestCatalogSettings
from icegroup.iceberg.errors import ConfigError
from icegroup.spark_jobs.engines import DEFAULT_ICEBERG
from icegroup.spark_jobs.jars import coordinates
from icegroup.spark_jobs.session import SPARK_REDACTION, spark_conf

SECRET = "client-7:s3cr3t-value"
HEARTBEATS = "postgresql+psycopg2://dagster@db:5432/dagster"


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def rest_lakehouse(**rest: object) -> LakehouseConfig:
    return LakehouseConfig.model_validate(
        {"rest": {"uri": "https://catalog.example.com/api/catalog", **rest}, "heartbeats_uri": HEARTBEATS}
    )


def test_a_file_naming_a_rest_catalog_replaces_the_embedded_sql_catalog(tmp_path: Path) -> None:
    path = write(
        tmp_path / "lakehouse.yaml",
        f"rest:\n  uri: https://catalog.example.com/api/catalog\n  warehouse: prod\nheartbeats_uri: {HEARTBEATS}\n",
    )

    lakehouse = load_lakehouse(path, env={"ICEGROUP_HOME": str(tmp_path)})

    assert lakehouse.catalog_uri is None
    assert lakehouse.warehouse is None
    assert lakehouse.rest == RestCatalogSettings(uri="https://catalog.example.com/api/catalog", warehouse="prod")


def test_a_rest_catalog_without_a_heartbeat_database_names_heartbeats_uri(tmp_path: Path) -> None:
    path = write(tmp_path / "lakehouse.yaml", "rest:\n  uri: https://catalog.example.com\n")

    with pytest.raises(ConfigError, match=r"heartbeats_uri: a REST catalog has no database of its own"):
        load_lakehouse(path, env={"ICEGROUP_HOME": str(tmp_path)})


def test_the_heartbeat_database_can_come_from_the_environment(tmp_path: Path) -> None:
    path = write(tmp_path / "lakehouse.yaml", "rest:\n  uri: https://catalog.example.com\n")

    lakehouse = load_lakehouse(path, env={"ICEGROUP_HOME": str(tmp_path), "ICEGROUP_HEARTBEATS_URI": HEARTBEATS})

    assert lakehouse.heartbeats_uri == HEARTBEATS


def test_a_sql_and_a_rest_catalog_at_once_is_refused(tmp_path: Path) -> None:
    text = f"rest:\n  uri: https://catalog.example.com\nheartbeats_uri: {HEARTBEATS}\n"
    path = write(tmp_path / "lakehouse.yaml", text)
    env = {"ICEGROUP_HOME": str(tmp_path), "ICEGROUP_CATALOG_URI": f"sqlite:///{tmp_path / 'c.db'}"}

    with pytest.raises(ConfigError, match=r"catalog_uri and rest: set exactly one"):
        load_lakehouse(path, env=env)


@pytest.mark.parametrize(
    ("rest", "named"),
    [
        pytest.param({"properties": {"credential": SECRET}}, "ICEGROUP_REST_CREDENTIAL", id="credential"),
        pytest.param({"properties": {"token": "abc"}}, "ICEGROUP_REST_TOKEN", id="token"),
        pytest.param({"headers": {"Authorization": "Bearer abc"}}, "ICEGROUP_REST_TOKEN", id="authorization-header"),
    ],
)
def test_a_secret_written_in_the_file_is_refused_naming_where_it_belongs(
    tmp_path: Path, rest: dict[str, object], named: str
) -> None:
    text = "rest:\n  uri: https://catalog.example.com\n"
    for field, values in rest.items():
        assert isinstance(values, dict)
        text += f"  {field}:\n" + "".join(f"    {key}: {value}\n" for key, value in values.items())
    path = write(tmp_path / "lakehouse.yaml", text + f"heartbeats_uri: {HEARTBEATS}\n")

    with pytest.raises(ConfigError) as info:
        load_lakehouse(path, env={"ICEGROUP_HOME": str(tmp_path)})

    assert named in str(info.value)
    assert "s3cr3t" not in str(info.value)
    assert "abc" not in str(info.value)


def test_a_uri_that_is_not_http_names_rest_uri(tmp_path: Path) -> None:
    path = write(tmp_path / "lakehouse.yaml", f"rest:\n  uri: thrift://metastore:9083\nheartbeats_uri: {HEARTBEATS}\n")

    with pytest.raises(ConfigError, match=r"rest\.uri: .*is not an http\(s\) URL"):
        load_lakehouse(path, env={"ICEGROUP_HOME": str(tmp_path)})


def test_the_credential_comes_from_the_environment_and_never_into_a_dump() -> None:
    lakehouse = rest_lakehouse(warehouse="prod", scope="PRINCIPAL_ROLE:ALL")

    properties = lakehouse.rest_properties({"ICEGROUP_REST_CREDENTIAL": SECRET})

    assert properties["credential"] == SECRET
    assert properties["oauth2-server-uri"] == "https://catalog.example.com/api/catalog/v1/oauth/tokens"
    assert (properties["type"], properties["warehouse"], properties["scope"]) == ("rest", "prod", "PRINCIPAL_ROLE:ALL")
    assert "s3cr3t" not in lakehouse.model_dump_json()


def test_a_catalog_of_pyicebergs_own_configuration_is_taken_with_its_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYICEBERG_CATALOG__PROD__URI", "https://polaris.example.com/api/catalog")
    monkeypatch.setenv("PYICEBERG_CATALOG__PROD__CREDENTIAL", SECRET)
    monkeypatch.setenv("PYICEBERG_CATALOG__PROD__HEADER__X_ICEBERG_ACCESS_DELEGATION", "vended-credentials")
    lakehouse = LakehouseConfig.model_validate(
        {"rest": {"pyiceberg_catalog": "prod", "warehouse": "analytics"}, "heartbeats_uri": HEARTBEATS}
    )

    properties = lakehouse.rest_properties({})

    assert properties["uri"] == "https://polaris.example.com/api/catalog"
    assert properties["credential"] == SECRET
    assert properties["warehouse"] == "analytics", "a setting in the lakehouse config wins over pyiceberg's"
    assert properties["header.x-iceberg-access-delegation"] == "vended-credentials"


def test_an_unknown_pyiceberg_catalog_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PYICEBERG_HOME", str(tmp_path))
    lakehouse = LakehouseConfig.model_validate({"rest": {"pyiceberg_catalog": "nope"}, "heartbeats_uri": HEARTBEATS})

    with pytest.raises(ConfigError, match=r"pyiceberg_catalog: no catalog 'nope' in pyiceberg's configuration"):
        lakehouse.rest_properties({})


def test_spark_gets_the_same_rest_catalog_with_oauth2_said_and_the_credential_redacted() -> None:
    lakehouse = rest_lakehouse(warehouse="prod", headers={"X-Iceberg-Access-Delegation": "vended-credentials"})

    conf = spark_conf(lakehouse, env={"ICEGROUP_REST_CREDENTIAL": SECRET})

    prefix = "spark.sql.catalog.lake"
    assert conf[prefix] == "org.apache.iceberg.spark.SparkCatalog"
    assert conf[f"{prefix}.type"] == "rest"
    assert conf[f"{prefix}.uri"] == "https://catalog.example.com/api/catalog"
    assert conf[f"{prefix}.warehouse"] == "prod"
    assert conf[f"{prefix}.credential"] == SECRET
    assert conf[f"{prefix}.rest.auth.type"] == "oauth2"
    assert conf[f"{prefix}.header.X-Iceberg-Access-Delegation"] == "vended-credentials"
    assert not any(key.startswith(f"{prefix}.jdbc") for key in conf)
    assert conf["spark.redaction.regex"] == SPARK_REDACTION
    assert re.search(SPARK_REDACTION, f"{prefix}.credential")
    assert re.search(SPARK_REDACTION, f"{prefix}.token")


def test_a_rest_catalog_needs_no_jdbc_driver_jar() -> None:
    assert coordinates(rest_lakehouse(), "3.5.8", None) == [
        f"org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:{DEFAULT_ICEBERG['3.5']}"
    ]
