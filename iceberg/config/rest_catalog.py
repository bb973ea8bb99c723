"""pyiceberg's REST catalog as icegroup opens it: reads retried, and every refusal named with the setting to check.

Kept apart from the settings (``rest.py``) so that only a process that opens a REST catalog imports
pyiceberg's REST client and requests; the settings alone build Spark's properties.
"""

from __future__ import annotations

import requests
from pyiceberg.catalog import Catalog
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import BadRequestError, ForbiddenError, OAuthError, RESTError, UnauthorizedError
from requests import Session
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

from icegroup.iceberg.config.rest import ENV_CREDENTIAL, ENV_TOKEN, SECRET_KEYS, first_line
from icegroup.iceberg.errors import CatalogUnavailable, ConfigError

# A read answered by a server error or a dropped connection is asked again: reads change nothing, so a
# second try is always safe. Commits (POST) are never retried here: whether a lost one landed is decided
# by icegroup from the table itself (its fence and summaries), not by sending it twice.
READ_RETRY = Retry(
    total=4,
    connect=4,
    read=4,
    status=4,
    backoff_factor=0.25,
    status_forcelist=(500, 502, 503, 504),
    allowed_methods=frozenset({"GET", "HEAD"}),
    raise_on_status=False,
    respect_retry_after_header=True,
)


class RetryingRestCatalog(RestCatalog):
    """pyiceberg's ``RestCatalog`` whose reads outlast a server's brief failures (``READ_RETRY``).

    Iceberg's REST test fixture, for one, answers 500 once per pooled connection after its catalog
    database restarts (PostgreSQL's admin-shutdown state is not one Iceberg's JDBC pool reconnects
    on); a proxy or load balancer answers 502-504 while a server restarts. Java's REST client
    retries such reads itself; pyiceberg's does not.
    """

    def _create_session(self) -> Session:
        session = super()._create_session()
        adapter = HTTPAdapter(max_retries=READ_RETRY)
        session.mount("http://", adapter)
        session.mount("https://", adapter)
        return session


def open_rest_catalog(name: str, properties: dict[str, str]) -> Catalog:
    """Sign in to the REST server and read its ``/v1/config``: a refused credential or request is a ``ConfigError``.

    A server that cannot be reached is ``CatalogUnavailable``. Each error names the setting to check.
    """
    where = f"catalog {name!r} at {properties['uri']}"
    try:
        return RetryingRestCatalog(name, **properties)
    except (OAuthError, UnauthorizedError, ForbiddenError) as exc:
        if not SECRET_KEYS & set(properties):
            raise ConfigError(
                f"rest: {where} wants a credential, and none was given ({first_line(exc)}). Set "
                f"{ENV_CREDENTIAL} (client_id:client_secret) or {ENV_TOKEN} (a bearer token), or name a "
                "pyiceberg_catalog that has one"
            ) from exc
        raise ConfigError(
            f"rest: {where} refused the credential ({first_line(exc)}). Check {ENV_CREDENTIAL} "
            f"(client_id:client_secret) or {ENV_TOKEN} (a token that has not expired), or the pyiceberg_catalog "
            "it comes from, and rest.oauth2_server_uri and rest.scope"
        ) from exc
    except BadRequestError as exc:
        raise ConfigError(
            f"rest: {where} refused the request ({first_line(exc)}); check rest.warehouse and rest.prefix"
        ) from exc
    except (requests.RequestException, RESTError) as exc:
        raise CatalogUnavailable(
            f"rest: {where} cannot be reached: {first_line(exc)}. Check that the server is up and that "
            "rest.uri is right"
        ) from exc
