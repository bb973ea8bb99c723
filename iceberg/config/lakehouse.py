"""One lakehouse config that both pyiceberg and Spark are built from.

The catalog is either a SQL catalog icegroup reaches directly (``catalog_uri``: pyiceberg's
``SqlCatalog`` and Spark's ``JdbcCatalog`` run the same compare-and-swap on one row, provided both
use the same catalog name) or an Iceberg REST catalog (``rest``: both engines talk to one server).
Keeping a single ``LakehouseConfig`` as the source of both sides is what keeps them pointed at the
same tables.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError

from icegroup.iceberg.config.files import format_validation_error, read_yaml_mapping
from icegroup.iceberg.config.nearby import nearby_lakes
from icegroup.iceberg.config.rest import RestCatalogSettings, first_line
from icegroup.iceberg.config.sections import OpenLineageSettings, S3Settings, SparkSettings
from icegroup.iceberg.errors import CatalogUnavailable, ConfigError

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog

_CATALOGS: dict[str, Catalog] = {}
_CATALOGS_LOCK = threading.Lock()

S3_SCHEMES = ("s3://", "s3a://")
ENV_CONFIG = "ICEGROUP_LAKEHOUSE"
ENV_HOME = "ICEGROUP_HOME"
ENV_OPENLINEAGE_FILE = "ICEGROUP_OPENLINEAGE_FILE"
ENV_OVERRIDES = {
    "ICEGROUP_CATALOG_NAME": "catalog_name",
    "ICEGROUP_CATALOG_URI": "catalog_uri",
    "ICEGROUP_WAREHOUSE": "warehouse",
    "ICEGROUP_SPARK_MASTER": "spark_master",
    "ICEGROUP_ICEBERG_VERSION": "iceberg_version",
    "ICEGROUP_ICEBERG_PACKAGES": "iceberg_packages",
    "ICEGROUP_JARS": "jars",
    "ICEGROUP_HEARTBEATS_URI": "heartbeats_uri",
    "ICEGROUP_REST_WAREHOUSE": "rest.warehouse",
}


class LakehouseConfig(BaseModel):
    """Where the catalog and the warehouse are, and how Spark reaches them."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    catalog_name: str = Field(
        default="lake",
        description="Catalog name; must be the same for pyiceberg and Spark or they see different tables.",
    )
    catalog_uri: str | None = Field(
        default=None,
        description="SQLAlchemy URL of a SQL catalog's database, e.g. sqlite:////abs/catalog.db or "
        "postgresql+psycopg2://user:pw@host:5432/db. Set this or rest, not both.",
    )
    rest: RestCatalogSettings | None = Field(
        default=None,
        description="An Iceberg REST catalog (Polaris, Unity Catalog, Glue, S3 Tables, Nessie, Lakekeeper) instead "
        "of catalog_uri; its credential comes from the environment or pyiceberg's configuration.",
    )
    warehouse: str | None = Field(
        default=None,
        description="Warehouse root of a SQL catalog: an absolute path, a file:// URI, or s3://bucket/prefix (see "
        "s3). A REST catalog's server keeps its own; name it with rest.warehouse.",
    )
    heartbeats_uri: str | None = Field(
        default=None,
        description="SQLAlchemy URL of the database Borrowers' heartbeats are kept in, reached by every Leader and "
        "Borrower; unset on a SQL catalog: its own database. A REST catalog needs one, e.g. the Dagster instance's "
        "PostgreSQL database.",
    )
    spark_master: str = Field(
        default="local[*]", description="Spark master URL for Borrowers, e.g. spark://host:7077 for a cluster."
    )
    iceberg_version: str | None = Field(
        default=None,
        description="Iceberg release whose Spark runtime Spark fetches from Maven Central, e.g. 1.9.2; unset: the "
        "default for the installed Spark (docs/reference/matrix.md). Ignored when the cluster's $SPARK_HOME/jars "
        "already holds a runtime, which is used as it is.",
    )
    iceberg_packages: str | None = Field(
        default=None,
        description="Maven coordinates (spark.jars.packages) that replace icegroup's choice of the Iceberg runtime "
        "and, for S3, the AWS bundle; the pair they bring is still checked at start.",
    )
    jars: str | None = Field(
        default=None,
        description="One folder or URL prefix (/opt/jars, hdfs://..., https://...) holding every jar Spark needs, "
        "as Maven names them: the Iceberg runtime, the catalog's JDBC driver and iceberg-aws-bundle for S3. "
        "`make jars` fills one. Unset: Spark resolves their coordinates once, then reuses the download.",
    )
    spark: SparkSettings = Field(default_factory=SparkSettings, description="Sizing of a Borrower's Spark application.")
    s3: S3Settings | None = Field(
        default=None,
        description="Endpoint, region and addressing of an s3:// warehouse, or of a REST catalog's S3 warehouse (set "
        "it when the server does not hand them out). Credentials come only from the "
        "environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY) or the AWS credential chain, never from this file.",
    )
    spark_conf: dict[str, str] = Field(default_factory=dict, description="Extra Spark settings, applied last.")
    openlineage: OpenLineageSettings | None = Field(
        default=None,
        description="Emit OpenLineage run events for lease, replay, reset and expiry runs; off when unset "
        "(ICEGROUP_OPENLINEAGE_FILE also turns it on).",
    )

    @field_validator("catalog_uri", "heartbeats_uri")
    @classmethod
    def _uri_parses(cls, value: str | None) -> str | None:
        if value is None:
            return None
        try:
            url = make_url(value)
        except ArgumentError as exc:
            raise ValueError(
                f"{value!r} is not a SQLAlchemy URL; use sqlite:////abs/path.db or "
                "postgresql+psycopg2://user:pw@host:5432/db"
            ) from exc
        if url.get_backend_name() not in ("sqlite", "postgresql"):
            raise ValueError(f"backend {url.get_backend_name()!r} is not supported; use sqlite or postgresql")
        if url.get_backend_name() == "sqlite" and url.database in (None, "", ":memory:"):
            raise ValueError("an in-memory SQLite database cannot be shared between processes; name a file")
        return value

    @model_validator(mode="after")
    def _one_catalog(self) -> LakehouseConfig:
        if (self.catalog_uri is None) == (self.rest is None):
            raise ValueError(
                "catalog_uri and rest: set exactly one, catalog_uri for a SQL catalog or rest for an Iceberg REST "
                "catalog"
            )
        if self.catalog_uri is not None and self.warehouse is None:
            raise ValueError("warehouse: a SQL catalog needs its warehouse root; set warehouse (ICEGROUP_WAREHOUSE)")
        if self.rest is not None and self.heartbeats_uri is None:
            raise ValueError(
                "heartbeats_uri: a REST catalog has no database of its own for heartbeats; set heartbeats_uri "
                "(ICEGROUP_HEARTBEATS_URI) to a database every Leader and Borrower reaches, e.g. "
                "postgresql+psycopg2://user@host/dagster, or sqlite:////abs/heartbeats.db on one machine"
            )
        return self

    @field_validator("s3")
    @classmethod
    def _s3_only_for_an_s3_warehouse(cls, value: S3Settings | None, info: ValidationInfo) -> S3Settings | None:
        warehouse = str(info.data.get("warehouse") or "")
        if value is not None and info.data.get("rest") is None and not warehouse.startswith(S3_SCHEMES):
            raise ValueError(
                f"set, but the warehouse {warehouse!r} is not in S3; write the warehouse as s3://bucket/prefix, "
                "or remove s3"
            )
        return value

    @property
    def on_s3(self) -> bool:
        """Whether the tables are in object storage.

        That is an ``s3://`` (or ``s3a://``) SQL warehouse, or a REST catalog given ``s3`` settings: its
        server keeps the warehouse, and the engines reach its files with these.
        """
        return (self.warehouse or "").startswith(S3_SCHEMES) or (self.rest is not None and self.s3 is not None)

    @property
    def warehouse_uri(self) -> str:
        """The SQL catalog's warehouse as a URI, the form Spark's catalog expects."""
        if self.warehouse is None:
            raise ConfigError("warehouse: unset; a SQL catalog needs its warehouse root")
        if "://" in self.warehouse:
            return self.warehouse
        return Path(self.warehouse).resolve().as_uri()

    @property
    def tables_namespace(self) -> str:
        """Where this lake's tables are, as an OpenLineage dataset namespace: the warehouse, or the REST catalog."""
        if self.rest is None:
            return self.warehouse_uri.rstrip("/")
        where = self.rest.uri or f"pyiceberg:{self.rest.pyiceberg_catalog}"
        return f"{where}/{self.rest.warehouse}" if self.rest.warehouse else where

    def rest_properties(self, env: Mapping[str, str] | None = None) -> dict[str, str]:
        """The REST catalog's properties, secrets included, for a catalog client; never for printing."""
        if self.rest is None:
            raise ConfigError("rest: unset; this lakehouse has a SQL catalog")
        try:
            return self.rest.catalog_properties(self.catalog_name, os.environ if env is None else env)
        except ValueError as exc:
            raise ConfigError(str(exc)) from exc

    def pyiceberg_properties(self) -> dict[str, str]:
        """Properties for ``SqlCatalog``.

        WAL plus a busy timeout keep SQLite usable by two engines. The catalog is opened once per
        process and its connection pool lives as long as a Dagster daemon does, so a pooled
        connection is checked before use: one dropped by a database restart is replaced, not failed.
        """
        uri = self.catalog_uri
        if uri is None:
            raise ConfigError("catalog_uri: unset; this lakehouse has a REST catalog")
        if make_url(uri).get_backend_name() == "sqlite" and "timeout=" not in uri:
            uri = f"{uri}{'&' if '?' in uri else '?'}timeout=30"
        properties = {"uri": uri, "warehouse": self.warehouse_uri, "pool_pre_ping": "true"}
        if self.on_s3:
            properties.update(self.pyiceberg_s3_properties())
        return properties

    def pyiceberg_s3_properties(self) -> dict[str, str]:
        """The S3 settings of pyiceberg's FileIO; without keys it uses the AWS credential chain (env, profile, role)."""
        s3 = self.s3 or S3Settings()
        properties = {"s3.force-virtual-addressing": str(not s3.path_style_access).lower()}
        if s3.region:
            properties["s3.region"] = s3.region
        if s3.endpoint:
            properties["s3.endpoint"] = s3.endpoint
        return properties

    def jdbc(self) -> tuple[str, dict[str, str]]:
        """The same catalog database as a JDBC URL plus driver properties, for Spark's JdbcCatalog."""
        if self.catalog_uri is None:
            raise ConfigError("catalog_uri: unset; this lakehouse has a REST catalog")
        url = make_url(self.catalog_uri)
        if url.get_backend_name() == "sqlite":
            return f"jdbc:sqlite:{url.database}", {"busy_timeout": "30000", "journal_mode": "WAL"}
        props = {key: str(value) for key, value in url.query.items()}
        if url.username:
            props["user"] = url.username
        if url.password:
            props["password"] = str(url.password)
        return f"jdbc:postgresql://{url.host or 'localhost'}:{url.port or 5432}/{url.database}", props

    def catalog(self) -> Catalog:
        """The process's pyiceberg catalog for this config: opened once, then shared.

        The config is frozen, so equal configs mean the same catalog. Opening one builds a SQL
        engine with its own connection pool; doing that per call would cost a pool per tick and
        per lease. A SQLite file is created in WAL mode: WAL lets Spark's pooled JDBC connections
        read while pyiceberg writes; in the default rollback journal an idle JDBC read transaction
        makes every pyiceberg commit fail with "database is locked".
        """
        key = self.model_dump_json()
        with _CATALOGS_LOCK:
            catalog = _CATALOGS.get(key)
            if catalog is None:
                catalog = _CATALOGS[key] = self._open_catalog()
        return catalog

    def missing_lake(self) -> str | None:
        """Why this config's lake does not exist yet, or ``None``: a local SQLite catalog file that is absent.

        Opening a SQL catalog creates its database, so a command that only reads must ask first;
        otherwise a typo in a path, or a command run in the wrong folder, leaves an empty lake behind.
        """
        if self.catalog_uri is None:
            return None
        url = make_url(self.catalog_uri)
        if url.get_backend_name() != "sqlite" or not url.database or Path(url.database).is_file():
            return None
        near = nearby_lakes(Path(url.database))
        found = f"; lakes that do exist near it: {', '.join(map(str, near))}" if near else ""
        return (
            f"catalog_uri: no lake at {url.database} (the catalog database does not exist){found}. Fix catalog_uri "
            "(a typo in the path?), or point --lakehouse, $ICEGROUP_LAKEHOUSE or $ICEGROUP_CATALOG_URI at your lake; "
            "only to start a new, empty lake there, run `icegroup init`"
        )

    def _open_catalog(self) -> Catalog:
        """Open the catalog; pyiceberg's catalogs are imported here, so building Spark's settings does not load them.

        (A REST catalog named by ``rest.pyiceberg_catalog`` reads pyiceberg's configuration for Spark's
        settings too: ``RestCatalogSettings.catalog_properties``.)
        """
        if self.rest is not None:
            return self._open_rest_catalog()
        from pyiceberg.catalog.sql import SqlCatalog

        from icegroup.iceberg.protocol.liveness import HEARTBEATS_URI

        assert self.catalog_uri is not None  # one catalog: checked by _one_catalog
        assert self.warehouse is not None
        url = make_url(self.catalog_uri)
        if "://" not in self.warehouse:
            Path(self.warehouse).mkdir(parents=True, exist_ok=True)
        heartbeats = {HEARTBEATS_URI: self.heartbeats_uri} if self.heartbeats_uri else {}
        try:
            if url.get_backend_name() == "sqlite" and url.database:
                Path(url.database).parent.mkdir(parents=True, exist_ok=True)
                with sqlite3.connect(url.database, timeout=30) as connection:
                    connection.execute("PRAGMA journal_mode=WAL")
            try:
                return SqlCatalog(self.catalog_name, **self.pyiceberg_properties(), **heartbeats)
            except SQLAlchemyError:
                # Another process created the catalog's tables at the same moment; they exist now.
                return SqlCatalog(self.catalog_name, **self.pyiceberg_properties(), **heartbeats)
        except (SQLAlchemyError, sqlite3.Error) as exc:
            raise CatalogUnavailable(self._unavailable(exc)) from exc

    def _open_rest_catalog(self) -> Catalog:
        """Sign in to the REST server and read its ``/v1/config``; a refused credential is a ``ConfigError``."""
        from icegroup.iceberg.config.rest_catalog import open_rest_catalog
        from icegroup.iceberg.protocol.liveness import HEARTBEATS_URI

        assert self.rest is not None  # checked by _one_catalog
        assert self.heartbeats_uri is not None
        properties = self.rest_properties()
        if self.on_s3:
            properties.update(self.pyiceberg_s3_properties())
        properties[HEARTBEATS_URI] = self.heartbeats_uri
        return open_rest_catalog(self.catalog_name, properties)

    def _unavailable(self, exc: Exception) -> str:
        url = make_url(self.catalog_uri or "")
        cause = first_line(getattr(exc, "orig", None) or exc)
        where = url.render_as_string(hide_password=True)
        if url.get_backend_name() == "sqlite":
            remedy = (
                "Check that the file is an icegroup catalog (a SQLite database) and readable; restore it from a "
                "backup, or point catalog_uri (ICEGROUP_CATALOG_URI) at the right file"
            )
        else:
            remedy = (
                "Check that the database server is up and reachable, and that the user, password and database in "
                "catalog_uri (ICEGROUP_CATALOG_URI) are right"
            )
        return f"catalog_uri: catalog {self.catalog_name!r} at {where} cannot be opened: {cause}. {remedy}"


def embedded_default(home: Path) -> dict[str, str]:
    """The embedded stack: catalog ``lake`` in ``.lake/catalog.db``, warehouse ``.lake/warehouse``."""
    lake = home.resolve() / ".lake"
    return {"catalog_uri": f"sqlite:///{lake / 'catalog.db'}", "warehouse": str(lake / "warehouse")}


def relative_to_file(values: dict[str, Any], folder: Path) -> dict[str, Any]:
    """A config file's relative local paths, read from the file's folder rather than the current one.

    ``icegroup init`` writes ``warehouse: .lake/warehouse`` and ``sqlite:///.lake/catalog.db``; a
    command run from a subfolder, or a Dagster run started elsewhere, must still reach that lake.
    """
    resolved = dict(values)
    warehouse = resolved.get("warehouse")
    if isinstance(warehouse, str) and "://" not in warehouse and not Path(warehouse).is_absolute():
        resolved["warehouse"] = str((folder / warehouse).resolve())
    for field in ("catalog_uri", "heartbeats_uri"):
        uri = resolved.get(field)
        if isinstance(uri, str) and uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
            database = uri.removeprefix("sqlite:///")
            if database and database != ":memory:":
                resolved[field] = f"sqlite:///{(folder / database).resolve()}"
    return resolved


def load_lakehouse(path: Path | None = None, env: Mapping[str, str] | None = None) -> LakehouseConfig:
    """Build the config from the embedded default, then a YAML file, then ``ICEGROUP_*`` variables.

    Later sources win, so a deployment can point both engines at PostgreSQL with one variable. A file
    that names a REST catalog replaces the embedded default's SQL catalog instead of adding to it.
    ``ICEGROUP_OPENLINEAGE_FILE`` turns OpenLineage on with the client's file transport, one JSON
    event per line, as ``make demo`` does.
    """
    env = os.environ if env is None else env
    home = Path(env.get(ENV_HOME, "."))
    values: dict[str, Any] = {}
    origins: dict[str, str] = {}
    path = path or (Path(env[ENV_CONFIG]) if env.get(ENV_CONFIG) else None)
    if path is not None:
        from_file = relative_to_file(read_yaml_mapping(path, what="lakehouse config", unset=ENV_CONFIG), path.parent)
        values.update(from_file)
        origins.update(dict.fromkeys(from_file, str(path)))
    if "rest" not in values:
        values = {**embedded_default(home), **values}
    for var, field in ENV_OVERRIDES.items():
        if env.get(var):
            section, _, key = field.rpartition(".")
            into = values.setdefault(section, {}) if section else values
            into[key] = env[var]
            origins[field] = var
    if env.get(ENV_OPENLINEAGE_FILE):
        events = {"type": "file", "log_file_path": str(Path(env[ENV_OPENLINEAGE_FILE]).resolve()), "append": True}
        values["openlineage"] = {**values.get("openlineage", {}), "transport": events}
        origins["openlineage.transport"] = ENV_OPENLINEAGE_FILE
    try:
        return LakehouseConfig(**values)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, source="lakehouse defaults", origins=origins)) from exc
