"""An Iceberg REST catalog, configured once for both engines, with its secrets kept out of every file icegroup writes.

A REST catalog (Polaris, Unity Catalog, Glue's and S3 Tables' endpoints, Nessie, Lakekeeper) is
reached with the same property names by pyiceberg's ``RestCatalog`` and Iceberg's Java
``RESTCatalog`` (``uri``, ``warehouse``, ``prefix``, ``credential``, ``token``,
``oauth2-server-uri``, ``scope``, ``header.<Name>``, ``rest.*``). So this module builds one property
map, and pyiceberg and Spark (``SparkCatalog`` with ``type=rest``) each get it as they spell it.

Secrets (the OAuth2 client credential, a bearer token) are read when a catalog is opened, only from
the environment (``ICEGROUP_REST_CREDENTIAL``, ``ICEGROUP_REST_TOKEN``) or from pyiceberg's own
configuration (``.pyiceberg.yaml``, ``PYICEBERG_CATALOG__<NAME>__*``) when ``pyiceberg_catalog``
names a catalog there. The settings model itself holds none, so dumping it (``describe``, run
configs, logs) can never show one. The client that opens the catalog is ``rest_catalog.py``'s: a
process that only builds Spark's settings from this (a plain Spark job beside icegroup) imports
neither pyiceberg's catalogs nor requests (pyiceberg's configuration reader only for a catalog
named in it, ``pyiceberg_catalog``).
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field, field_validator

ENV_CREDENTIAL = "ICEGROUP_REST_CREDENTIAL"
ENV_TOKEN = "ICEGROUP_REST_TOKEN"
SECRET_KEYS = frozenset({"credential", "token"})
# What Java's REST client takes besides the secrets; pyiceberg-only keys (its FileIO, SSL files) stay out of Spark.
SHARED_KEYS = frozenset({"uri", "warehouse", "prefix", "oauth2-server-uri", "scope", "audience", "resource"})
SHARED_PREFIXES = ("header.", "rest.")


class RestCatalogSettings(BaseModel):
    """Where an Iceberg REST catalog is and how to sign in to it; never the secrets themselves."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    uri: str | None = Field(
        default=None,
        description="The catalog's base URL, e.g. https://polaris.example.com/api/catalog or "
        "https://glue.us-east-1.amazonaws.com/iceberg. Unset only when pyiceberg_catalog names a catalog that has one.",
    )
    warehouse: str | None = Field(
        default=None,
        description="The warehouse the server should serve, as the server names it: Polaris the catalog's name, "
        "Glue the account id, S3 Tables the table bucket's ARN, the local test server its folder.",
    )
    prefix: str | None = Field(
        default=None, description="A path prefix under /v1/ for servers that need one; most send it in /v1/config."
    )
    oauth2_server_uri: str | None = Field(
        default=None,
        description="The OAuth2 token endpoint for the client credential; unset: <uri>/v1/oauth/tokens.",
    )
    scope: str | None = Field(
        default=None, description="OAuth2 scope to ask for, e.g. PRINCIPAL_ROLE:ALL on Polaris; unset: `catalog`."
    )
    headers: dict[str, str] = Field(
        default_factory=dict,
        description="Extra HTTP headers sent on every request, e.g. X-Iceberg-Access-Delegation: vended-credentials. "
        "Not for secrets: an Authorization header belongs in the environment (ICEGROUP_REST_TOKEN).",
    )
    properties: dict[str, str] = Field(
        default_factory=dict,
        description="Further catalog properties both engines pass on as they are, e.g. rest.sigv4-enabled: 'true', "
        "rest.signing-name: glue, rest.signing-region: us-east-1.",
    )
    pyiceberg_catalog: str | None = Field(
        default=None,
        description="Take every setting, secrets included, from this catalog of pyiceberg's configuration "
        "(.pyiceberg.yaml in $PYICEBERG_HOME, ~ or the working folder, and PYICEBERG_CATALOG__<NAME>__* variables); "
        "settings given here win over it.",
    )

    @field_validator("uri", "oauth2_server_uri")
    @classmethod
    def _is_http(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError(f"{value!r} is not an http(s) URL; write it as https://host/path")
        return value.rstrip("/") if value is not None else None

    @field_validator("headers")
    @classmethod
    def _no_secret_header(cls, value: dict[str, str]) -> dict[str, str]:
        if any(name.lower() == "authorization" for name in value):
            raise ValueError(
                f"an Authorization header is a secret and may not be written in a file; export {ENV_TOKEN} instead"
            )
        return value

    @field_validator("properties")
    @classmethod
    def _no_secret_property(cls, value: dict[str, str]) -> dict[str, str]:
        secret = sorted(SECRET_KEYS & set(value))
        if secret:
            raise ValueError(
                f"{', '.join(secret)} is a secret and may not be written in a file; export {ENV_CREDENTIAL} "
                f"(client_id:client_secret) or {ENV_TOKEN} instead, or keep it in pyiceberg's configuration"
            )
        return value

    def catalog_properties(self, name: str, env: Mapping[str, str]) -> dict[str, str]:
        """Every property of the catalog, secrets included: pyiceberg's configuration, these settings, then ``env``."""
        properties: dict[str, str] = {}
        if self.pyiceberg_catalog:
            from pyiceberg.utils.config import Config  # only a catalog named in pyiceberg's configuration loads it

            found = Config().get_catalog_config(self.pyiceberg_catalog)
            if found is None:
                raise ValueError(
                    f"pyiceberg_catalog: no catalog {self.pyiceberg_catalog!r} in pyiceberg's configuration "
                    "(.pyiceberg.yaml or PYICEBERG_CATALOG__<NAME>__* variables)"
                )
            properties.update({key: str(value) for key, value in found.items() if isinstance(value, str | int | bool)})
        own = {
            "uri": self.uri,
            "warehouse": self.warehouse,
            "prefix": self.prefix,
            "oauth2-server-uri": self.oauth2_server_uri,
            "scope": self.scope,
        }
        properties.update({key: value for key, value in own.items() if value is not None})
        properties.update({f"header.{header}": value for header, value in self.headers.items()})
        properties.update(self.properties)
        if env.get(ENV_CREDENTIAL):
            properties["credential"] = env[ENV_CREDENTIAL]
        if env.get(ENV_TOKEN):
            properties["token"] = env[ENV_TOKEN]
        if not properties.get("uri"):
            raise ValueError(
                f"rest.uri: catalog {name!r} has no URI; set rest.uri, or a pyiceberg_catalog that has one"
            )
        if SECRET_KEYS & set(properties) and "oauth2-server-uri" not in properties:
            properties["oauth2-server-uri"] = f"{properties['uri'].rstrip('/')}/v1/oauth/tokens"
        properties["type"] = "rest"
        return properties


def spark_catalog_properties(properties: Mapping[str, str]) -> dict[str, str]:
    """The properties Java's ``RESTCatalog`` takes, from the ones pyiceberg's takes (the names are shared)."""
    shared = {
        key: value
        for key, value in properties.items()
        if key in SHARED_KEYS or key in SECRET_KEYS or key.startswith(SHARED_PREFIXES)
    }
    shared["type"] = "rest"
    if SECRET_KEYS & set(shared):
        # Java 1.9 infers OAuth2 from a credential or token with a warning; say it, as pyiceberg does.
        shared.setdefault("rest.auth.type", "oauth2")
    return shared


def first_line(exc: object) -> str:
    """An error's first line, short enough for a one-line message."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
