"""load_lakehouse and LakehouseConfig, plus the Spark settings derived from them (no JVM started)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pyiceberg.catalog.sql import SqlCatalog

from icegroup.iceberg.config.lakehouse import LakehouseConfig, load_lakehouse
from icegroup.iceberg.errors import ConfigError
from icegroup.spark_jobs.engines import DEFAULT_ICEBERG, DRIVERS, aws_bundle
from icegroup.spark_jobs.jars import ICEGROUP_JAR
from icegroup.spark_jobs.session import executors_python, spark_conf, spark_jdbc_url

PG_URI = "postgresql+psycopg2://user:pw@host:5433/db"
RUNTIME = f"org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:{DEFAULT_ICEBERG['3.5']}"
RUNTIME_JAR = f"iceberg-spark-runtime-3.5_2.12-{DEFAULT_ICEBERG['3.5']}.jar"


@pytest.fixture(autouse=True)
def _no_resolved_jars(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An empty home (no earlier resolution in ~/.ivy2) and no cluster runtime, so the jars are decided afresh."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("SPARK_HOME", raising=False)


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def sqlite_lakehouse(tmp_path: Path, **fields: object) -> LakehouseConfig:
    values: dict[str, object] = {
        "catalog_uri": f"sqlite:///{tmp_path / 'catalog.db'}",
        "warehouse": str(tmp_path / "warehouse"),
    }
    values.update(fields)
    return LakehouseConfig.model_validate(values)


# load_lakehouse


def test_embedded_default_lives_under_icegroup_home(tmp_path: Path) -> None:
    lakehouse = load_lakehouse(env={"ICEGROUP_HOME": str(tmp_path)})

    lake = tmp_path.resolve() / ".lake"
    assert lakehouse.catalog_name == "lake"
    assert lakehouse.catalog_uri == f"sqlite:///{lake / 'catalog.db'}"
    assert lakehouse.warehouse == str(lake / "warehouse")
    assert lakehouse.spark_master == "local[*]"
    assert lakehouse.iceberg_packages is None
    assert lakehouse.spark_conf == {}


def test_embedded_default_resolves_a_relative_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)

    lakehouse = load_lakehouse(env={"ICEGROUP_HOME": "."})

    assert lakehouse.catalog_uri == f"sqlite:///{tmp_path.resolve() / '.lake' / 'catalog.db'}"


def test_yaml_file_overrides_the_default(tmp_path: Path) -> None:
    path = write(
        tmp_path / "lakehouse.yaml",
        f"catalog_name: shared\ncatalog_uri: {PG_URI}\nwarehouse: s3://bucket/wh\n"
        "spark_master: spark://master:7077\nspark_conf: {spark.executor.memory: 2g}\n",
    )

    lakehouse = load_lakehouse(path, env={"ICEGROUP_HOME": str(tmp_path)})

    assert lakehouse.catalog_name == "shared"
    assert lakehouse.catalog_uri == PG_URI
    assert lakehouse.warehouse == "s3://bucket/wh"
    assert lakehouse.spark_master == "spark://master:7077"
    assert lakehouse.spark_conf == {"spark.executor.memory": "2g"}


def test_yaml_file_keeps_defaults_for_fields_it_does_not_set(tmp_path: Path) -> None:
    path = write(tmp_path / "lakehouse.yaml", "spark_master: local[2]\n")

    lakehouse = load_lakehouse(path, env={"ICEGROUP_HOME": str(tmp_path)})

    assert lakehouse.spark_master == "local[2]"
    assert lakehouse.catalog_uri == f"sqlite:///{tmp_path.resolve() / '.lake' / 'catalog.db'}"


def test_yaml_file_is_found_through_icegroup_lakehouse(tmp_path: Path) -> None:
    path = write(tmp_path / "lakehouse.yaml", "catalog_name: from_env_file\n")

    lakehouse = load_lakehouse(env={"ICEGROUP_HOME": str(tmp_path), "ICEGROUP_LAKEHOUSE": str(path)})

    assert lakehouse.catalog_name == "from_env_file"


def test_environment_overrides_the_file(tmp_path: Path) -> None:
    path = write(tmp_path / "lakehouse.yaml", "catalog_uri: sqlite:////file/catalog.db\nwarehouse: /file/wh\n")
    env = {
        "ICEGROUP_HOME": str(tmp_path),
        "ICEGROUP_CATALOG_URI": PG_URI,
        "ICEGROUP_WAREHOUSE": "s3://bucket/env",
        "ICEGROUP_SPARK_MASTER": "spark://env:7077",
        "ICEGROUP_ICEBERG_PACKAGES": "org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.9.2",
    }

    lakehouse = load_lakehouse(path, env=env)

    assert lakehouse.catalog_uri == PG_URI
    assert lakehouse.warehouse == "s3://bucket/env"
    assert lakehouse.spark_master == "spark://env:7077"
    assert lakehouse.iceberg_packages == "org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.9.2"


def test_empty_environment_variable_does_not_override(tmp_path: Path) -> None:
    path = write(tmp_path / "lakehouse.yaml", "warehouse: /file/wh\n")

    lakehouse = load_lakehouse(path, env={"ICEGROUP_HOME": str(tmp_path), "ICEGROUP_WAREHOUSE": ""})

    assert lakehouse.warehouse == "/file/wh"


@pytest.mark.parametrize(
    ("uri", "allowed"),
    [
        pytest.param("not a url", "is not a SQLAlchemy URL", id="not-a-url"),
        pytest.param("mysql://user:pw@host/db", "use sqlite or postgresql", id="mysql"),
    ],
)
def test_bad_catalog_uri_in_file_names_catalog_uri(tmp_path: Path, uri: str, allowed: str) -> None:
    path = write(tmp_path / "lakehouse.yaml", f"catalog_uri: {uri}\n")

    with pytest.raises(ConfigError) as info:
        load_lakehouse(path, env={"ICEGROUP_HOME": str(tmp_path)})

    assert str(info.value).startswith(f"{path}: catalog_uri: ")
    assert allowed in str(info.value)


def test_bad_catalog_uri_in_environment_names_catalog_uri(tmp_path: Path) -> None:
    env = {"ICEGROUP_HOME": str(tmp_path), "ICEGROUP_CATALOG_URI": "mysql://host/db"}

    with pytest.raises(ConfigError, match=r"^ICEGROUP_CATALOG_URI: catalog_uri: backend 'mysql' is not supported"):
        load_lakehouse(env=env)


def test_bad_environment_value_is_not_blamed_on_the_file(tmp_path: Path) -> None:
    path = write(tmp_path / "lakehouse.yaml", "spark_master: local[2]\n")
    env = {"ICEGROUP_HOME": str(tmp_path), "ICEGROUP_CATALOG_URI": "mysql://host/db"}

    with pytest.raises(ConfigError) as info:
        load_lakehouse(path, env=env)

    assert "ICEGROUP_CATALOG_URI" in str(info.value)


def test_unknown_field_in_yaml_is_rejected(tmp_path: Path) -> None:
    path = write(tmp_path / "lakehouse.yaml", "warehous: /data/wh\n")

    with pytest.raises(ConfigError, match=r"warehous: unknown field; remove it or check its spelling"):
        load_lakehouse(path, env={"ICEGROUP_HOME": str(tmp_path)})


def test_missing_yaml_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_lakehouse(tmp_path / "nope.yaml", env={"ICEGROUP_HOME": str(tmp_path)})


def test_yaml_top_level_must_be_a_mapping(tmp_path: Path) -> None:
    path = write(tmp_path / "lakehouse.yaml", "- catalog_uri\n")

    with pytest.raises(ConfigError, match="top level must be a mapping"):
        load_lakehouse(path, env={"ICEGROUP_HOME": str(tmp_path)})


def test_malformed_yaml_is_a_config_error(tmp_path: Path) -> None:
    path = write(tmp_path / "lakehouse.yaml", "catalog_uri: [sqlite\n")

    with pytest.raises(ConfigError):
        load_lakehouse(path, env={"ICEGROUP_HOME": str(tmp_path)})


# LakehouseConfig


def test_jdbc_for_sqlite_points_at_the_same_file(tmp_path: Path) -> None:
    url, props = sqlite_lakehouse(tmp_path).jdbc()

    assert url == f"jdbc:sqlite:{tmp_path / 'catalog.db'}"
    assert props == {"busy_timeout": "30000", "journal_mode": "WAL"}


def test_jdbc_for_postgresql_carries_host_port_database_and_credentials(tmp_path: Path) -> None:
    url, props = sqlite_lakehouse(tmp_path, catalog_uri=PG_URI).jdbc()

    assert url == "jdbc:postgresql://host:5433/db"
    assert props == {"user": "user", "password": "pw"}


def test_jdbc_for_postgresql_defaults_port_and_omits_missing_credentials(tmp_path: Path) -> None:
    url, props = sqlite_lakehouse(tmp_path, catalog_uri="postgresql://host/db").jdbc()

    assert url == "jdbc:postgresql://host:5432/db"
    assert props == {}


def test_jdbc_password_is_url_decoded(tmp_path: Path) -> None:
    _, props = sqlite_lakehouse(tmp_path, catalog_uri="postgresql://user:p%40ss@host/db").jdbc()

    assert props["password"] == "p@ss"


def test_jdbc_for_postgresql_keeps_connection_options(tmp_path: Path) -> None:
    url, props = sqlite_lakehouse(tmp_path, catalog_uri="postgresql://host/db?sslmode=require").jdbc()

    assert "sslmode=require" in url or props.get("sslmode") == "require"


def test_pyiceberg_properties_add_a_busy_timeout_for_sqlite(tmp_path: Path) -> None:
    lakehouse = sqlite_lakehouse(tmp_path)

    props = lakehouse.pyiceberg_properties()

    assert props == {
        "uri": f"{lakehouse.catalog_uri}?timeout=30",
        "warehouse": lakehouse.warehouse_uri,
        "pool_pre_ping": "true",
    }


def test_one_catalog_per_process_and_config(tmp_path: Path) -> None:
    lakehouse = sqlite_lakehouse(tmp_path)

    first = lakehouse.catalog()

    assert lakehouse.catalog() is first
    assert sqlite_lakehouse(tmp_path).catalog() is first, "an equal config shares the catalog"
    other = sqlite_lakehouse(tmp_path, catalog_uri=f"sqlite:///{tmp_path / 'other.db'}").catalog()
    assert other is not first
    assert lakehouse.model_copy(update={"spark_master": "local[1]"}).catalog() is not first


def test_the_cached_catalog_checks_a_pooled_connection_before_using_it(tmp_path: Path) -> None:
    catalog = sqlite_lakehouse(tmp_path).catalog()

    assert isinstance(catalog, SqlCatalog)
    assert catalog.engine.pool._pre_ping


def test_pyiceberg_properties_append_timeout_to_an_existing_query(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'catalog.db'}?check_same_thread=false"

    props = sqlite_lakehouse(tmp_path, catalog_uri=uri).pyiceberg_properties()

    assert props["uri"] == f"{uri}&timeout=30"


def test_pyiceberg_properties_keep_an_explicit_timeout(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'catalog.db'}?timeout=5"

    assert sqlite_lakehouse(tmp_path, catalog_uri=uri).pyiceberg_properties()["uri"] == uri


def test_pyiceberg_properties_leave_postgresql_untouched(tmp_path: Path) -> None:
    assert sqlite_lakehouse(tmp_path, catalog_uri=PG_URI).pyiceberg_properties()["uri"] == PG_URI


def test_warehouse_uri_of_a_plain_path_is_a_file_uri(tmp_path: Path) -> None:
    lakehouse = sqlite_lakehouse(tmp_path, warehouse=str(tmp_path / "wh"))

    assert lakehouse.warehouse_uri == (tmp_path / "wh").resolve().as_uri()
    assert lakehouse.warehouse_uri.startswith("file:///")


def test_warehouse_uri_resolves_a_relative_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)

    assert sqlite_lakehouse(tmp_path, warehouse="wh").warehouse_uri == (tmp_path.resolve() / "wh").as_uri()


@pytest.mark.parametrize("warehouse", ["s3://bucket/wh", "file:///data/wh"])
def test_warehouse_uri_keeps_a_uri(tmp_path: Path, warehouse: str) -> None:
    assert sqlite_lakehouse(tmp_path, warehouse=warehouse).warehouse_uri == warehouse


# spark_conf


def test_spark_conf_for_sqlite_points_the_catalog_at_the_shim(tmp_path: Path) -> None:
    lakehouse = sqlite_lakehouse(tmp_path)

    conf = spark_conf(lakehouse)

    prefix = "spark.sql.catalog.lake"
    assert conf[prefix] == "org.apache.iceberg.spark.SparkCatalog"
    assert conf[f"{prefix}.type"] == "jdbc"
    assert conf[f"{prefix}.uri"] == f"jdbc:icegroup-sqlite:{tmp_path / 'catalog.db'}"
    assert conf[f"{prefix}.warehouse"] == lakehouse.warehouse_uri
    assert conf[f"{prefix}.jdbc.schema-version"] == "V1"
    assert conf[f"{prefix}.cache-enabled"] == "false"
    assert conf[f"{prefix}.jdbc.busy_timeout"] == "30000"
    assert conf[f"{prefix}.jdbc.journal_mode"] == "WAL"
    assert conf["spark.sql.session.timeZone"] == "UTC"
    assert "IcebergSparkSessionExtensions" in conf["spark.sql.extensions"]


def test_spark_conf_for_sqlite_resolves_runtime_and_driver_by_coordinates(tmp_path: Path) -> None:
    conf = spark_conf(sqlite_lakehouse(tmp_path))

    assert conf["spark.jars.packages"].split(",") == [RUNTIME, DRIVERS["sqlite"]]
    assert conf["spark.jars"] == str(ICEGROUP_JAR)
    assert conf["spark.jars.ivy"] == str(tmp_path / "home" / ".ivy2")


def test_spark_conf_with_packages_uses_them_instead_of_the_runtime(tmp_path: Path) -> None:
    coords = "org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.9.2"

    conf = spark_conf(sqlite_lakehouse(tmp_path, iceberg_packages=coords))

    assert conf["spark.jars.packages"].split(",") == [coords, DRIVERS["sqlite"]]


def test_spark_conf_with_an_iceberg_version_fetches_that_runtime(tmp_path: Path) -> None:
    conf = spark_conf(sqlite_lakehouse(tmp_path, iceberg_version="1.9.2"))

    assert conf["spark.jars.packages"].startswith("org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.9.2,")


def test_spark_conf_keys_follow_the_catalog_name(tmp_path: Path) -> None:
    conf = spark_conf(sqlite_lakehouse(tmp_path, catalog_name="shared"))

    assert conf["spark.sql.catalog.shared.type"] == "jdbc"
    assert not any(key.startswith("spark.sql.catalog.lake") for key in conf)


def test_spark_conf_for_postgresql_passes_credentials(tmp_path: Path) -> None:
    conf = spark_conf(sqlite_lakehouse(tmp_path, catalog_uri=PG_URI))

    prefix = "spark.sql.catalog.lake"
    assert conf[f"{prefix}.uri"] == "jdbc:postgresql://host:5433/db"
    assert conf[f"{prefix}.jdbc.user"] == "user"
    assert conf[f"{prefix}.jdbc.password"] == "pw"
    assert f"{prefix}.jdbc.busy_timeout" not in conf
    assert conf["spark.jars.packages"].split(",") == [RUNTIME, DRIVERS["postgresql"]]


def test_spark_conf_extra_settings_are_applied_last(tmp_path: Path) -> None:
    extra = {"spark.sql.shuffle.partitions": "64", "spark.executor.memory": "2g"}

    conf = spark_conf(sqlite_lakehouse(tmp_path, spark_conf=extra))

    assert conf["spark.sql.shuffle.partitions"] == "64"
    assert conf["spark.executor.memory"] == "2g"


def test_spark_conf_uses_the_configured_master(tmp_path: Path) -> None:
    assert spark_conf(sqlite_lakehouse(tmp_path, spark_master="local[2]"))["spark.master"] == "local[2]"


def test_spark_jdbc_url_rewrites_only_sqlite(tmp_path: Path) -> None:
    assert spark_jdbc_url(sqlite_lakehouse(tmp_path)) == f"jdbc:icegroup-sqlite:{tmp_path / 'catalog.db'}"
    assert spark_jdbc_url(sqlite_lakehouse(tmp_path, catalog_uri=PG_URI)) == "jdbc:postgresql://host:5433/db"


# Beyond one machine: catalog name, sizing, one jars folder, S3


def test_catalog_name_and_jars_come_from_the_environment(tmp_path: Path) -> None:
    env = {"ICEGROUP_HOME": str(tmp_path), "ICEGROUP_CATALOG_NAME": "staging", "ICEGROUP_JARS": "/opt/jars"}

    lakehouse = load_lakehouse(env=env)

    assert (lakehouse.catalog_name, lakehouse.jars) == ("staging", "/opt/jars")


def test_spark_sizing_defaults_fit_one_machine_and_leave_the_rest_to_spark(tmp_path: Path) -> None:
    conf = spark_conf(sqlite_lakehouse(tmp_path))

    assert conf["spark.sql.shuffle.partitions"] == "4"
    assert not {"spark.executor.memory", "spark.executor.cores", "spark.cores.max", "spark.driver.memory"} & set(conf)


def test_spark_sizing_from_the_config_file(tmp_path: Path) -> None:
    path = write(
        tmp_path / "lakehouse.yaml",
        "spark: {shuffle_partitions: 16, executor_memory: 2g, executor_cores: 2, cores_max: 4, driver_memory: 3g}\n",
    )

    conf = spark_conf(load_lakehouse(path, env={"ICEGROUP_HOME": str(tmp_path)}))

    assert conf["spark.sql.shuffle.partitions"] == "16"
    assert conf["spark.executor.memory"] == "2g"
    assert conf["spark.executor.cores"] == "2"
    assert conf["spark.cores.max"] == "4"
    assert conf["spark.driver.memory"] == "3g"


def test_a_bad_spark_size_names_the_field(tmp_path: Path) -> None:
    path = write(tmp_path / "lakehouse.yaml", "spark: {cores_max: 0}\n")

    with pytest.raises(ConfigError, match=r"spark\.cores_max"):
        load_lakehouse(path, env={"ICEGROUP_HOME": str(tmp_path)})


def jars_folder(tmp_path: Path, names: list[str]) -> Path:
    folder = tmp_path / "jars"
    folder.mkdir()
    for name in names:
        (folder / name).write_bytes(b"PK")
    return folder


def test_a_jars_folder_is_the_one_place_spark_gets_its_jars(tmp_path: Path) -> None:
    names = [RUNTIME_JAR, "sqlite-jdbc-3.46.1.3.jar"]
    folder = jars_folder(tmp_path, names)

    conf = spark_conf(sqlite_lakehouse(tmp_path, jars=str(folder)))

    assert conf["spark.jars"].split(",") == [*(str(folder / name) for name in names), str(ICEGROUP_JAR)]
    assert "spark.jars.packages" not in conf


def test_a_jars_url_prefix_is_used_as_it_is(tmp_path: Path) -> None:
    lakehouse = sqlite_lakehouse(tmp_path, catalog_uri=PG_URI, jars="https://repo.example/icegroup/")

    jars = spark_conf(lakehouse)["spark.jars"].split(",")

    assert jars == [
        *(f"https://repo.example/icegroup/{name}" for name in (RUNTIME_JAR, "postgresql-42.7.4.jar")),
        str(ICEGROUP_JAR),
    ]


def test_a_jars_folder_missing_a_jar_names_it_and_the_fix(tmp_path: Path) -> None:
    folder = jars_folder(tmp_path, [RUNTIME_JAR])

    with pytest.raises(ConfigError, match=rf"^jars: {folder} has no postgresql-42.7.4.jar; fill it with `make jars`$"):
        spark_conf(sqlite_lakehouse(tmp_path, catalog_uri=PG_URI, jars=str(folder)))


def s3_lakehouse(tmp_path: Path, **fields: object) -> LakehouseConfig:
    values: dict[str, object] = {
        "warehouse": "s3://lake/warehouse",
        "s3": {"endpoint": "http://127.0.0.1:9000", "region": "eu-west-1", "path_style_access": True},
    }
    values.update(fields)
    return sqlite_lakehouse(tmp_path, **values)


def test_s3_settings_reach_pyiceberg(tmp_path: Path) -> None:
    props = s3_lakehouse(tmp_path).pyiceberg_properties()

    assert props["warehouse"] == "s3://lake/warehouse"
    assert props["s3.endpoint"] == "http://127.0.0.1:9000"
    assert props["s3.region"] == "eu-west-1"
    assert props["s3.force-virtual-addressing"] == "false"


def test_s3_settings_reach_spark_with_the_aws_bundle_of_the_runtime_release(tmp_path: Path) -> None:
    conf = spark_conf(s3_lakehouse(tmp_path))

    assert conf["spark.sql.catalog.lake.io-impl"] == "org.apache.iceberg.aws.s3.S3FileIO"
    assert conf["spark.sql.catalog.lake.s3.endpoint"] == "http://127.0.0.1:9000"
    assert conf["spark.sql.catalog.lake.s3.path-style-access"] == "true"
    assert conf["spark.sql.catalog.lake.client.region"] == "eu-west-1"
    assert conf["spark.jars.packages"].split(",")[-1] == aws_bundle(DEFAULT_ICEBERG["3.5"])


def test_an_s3_warehouse_on_an_older_release_gets_the_bundle_of_that_release(tmp_path: Path) -> None:
    conf = spark_conf(s3_lakehouse(tmp_path, iceberg_version="1.9.2"))

    assert conf["spark.jars.packages"].split(",")[-1] == "org.apache.iceberg:iceberg-aws-bundle:1.9.2"


def test_aws_bundle_coordinates_in_iceberg_packages_are_not_added_twice(tmp_path: Path) -> None:
    packages = f"org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.9.2,{aws_bundle('1.9.2')}"

    conf = spark_conf(s3_lakehouse(tmp_path, iceberg_packages=packages))

    assert conf["spark.jars.packages"] == f"{packages},{DRIVERS['sqlite']}"


def test_s3_settings_on_a_local_warehouse_are_refused(tmp_path: Path) -> None:
    path = write(tmp_path / "lakehouse.yaml", "s3: {endpoint: 'http://127.0.0.1:9000'}\n")

    with pytest.raises(ConfigError, match=rf"^{path}: s3: set, but the warehouse .* is not in S3"):
        load_lakehouse(path, env={"ICEGROUP_HOME": str(tmp_path)})


def test_an_s3_endpoint_must_be_a_url(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"write it as http://host:port"):
        s3_lakehouse(tmp_path, s3={"endpoint": "127.0.0.1:9000"})


def test_an_unset_s3_region_is_left_to_the_aws_chain_on_both_engines(tmp_path: Path) -> None:
    lakehouse = s3_lakehouse(tmp_path, s3={"endpoint": "http://127.0.0.1:9000"})

    assert "s3.region" not in lakehouse.pyiceberg_properties()
    assert "spark.sql.catalog.lake.client.region" not in spark_conf(lakehouse)


def test_the_executors_python_is_set_only_while_spark_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYSPARK_PYTHON", "python3")

    with executors_python("/opt/venv/bin/python"):
        inside = os.environ["PYSPARK_PYTHON"]

    assert inside == "/opt/venv/bin/python"
    assert os.environ["PYSPARK_PYTHON"] == "python3"
