"""Which REST catalog server the stack runs (``make stack-up CATALOG=...``), and how each is started.

icegroup's own server (the default) over PostgreSQL database ``lake`` with a client credential;
Iceberg's REST test fixture over database ``fixture``; Project Nessie over RocksDB in ``nessie/``.
The fixture's and Nessie's warehouses are in the stack's S3 bucket.
"""

from __future__ import annotations

import shutil

from icegroup.infra import nessie, rest_catalog, rest_fixture
from icegroup.infra.postgres import LocalPostgres
from icegroup.infra.stack_layout import REST_CLIENT_ID, S3_KEYS, Layout, rest_secret


def rest_server(layout: Layout) -> rest_catalog.RestServer:
    """The stack's own REST catalog server (the default): Iceberg's handlers over the catalog database ``lake``."""
    return rest_catalog.RestServer(
        jdbc_url=f"jdbc:postgresql://127.0.0.1:{layout.postgres_port}/lake",
        jdbc_user="postgres",
        warehouse=str(layout.folder / "warehouse"),
        port=layout.rest_port,
    )


def fixture_server(layout: Layout) -> rest_fixture.FixtureServer:
    """Iceberg's REST test fixture over the catalog database ``fixture``, its warehouse in the stack's bucket."""
    return rest_fixture.FixtureServer(
        jdbc_url=f"jdbc:postgresql://127.0.0.1:{layout.postgres_port}/fixture",
        jdbc_user="postgres",
        warehouse=layout.s3_warehouse,
        port=layout.rest_port,
        s3_endpoint=layout.s3_endpoint,
    )


def nessie_server(layout: Layout) -> nessie.NessieServer:
    """Project Nessie, its version store in ``nessie/`` of the stack, its warehouse in the stack's bucket."""
    return nessie.NessieServer(
        store=layout.folder / "nessie",
        s3_endpoint=layout.s3_endpoint,
        warehouse=layout.s3_warehouse,
        port=layout.nessie_port,
        management_port=layout.nessie_management_port,
    )


def catalog_part(layout: Layout) -> tuple[int, list[str], dict[str, str], str]:
    """The stack's catalog server as (port, command, environment, what it serves), for the chosen ``layout.catalog``."""
    if layout.catalog == "fixture":
        server = fixture_server(layout)
        env = {**rest_fixture.server_env(server, {}), **S3_KEYS}
        return layout.rest_port, rest_fixture.command(), env, f"Iceberg's REST fixture, {server.warehouse}"
    if layout.catalog == "nessie":
        served = nessie_server(layout)
        command = served.command(nessie.find_java(), nessie.fetch_jar())
        return layout.nessie_port, command, dict(S3_KEYS), f"Nessie {nessie.VERSION}, {served.warehouse}"
    credentials = {"ICEGROUP_REST_CLIENT_ID": REST_CLIENT_ID, "ICEGROUP_REST_CLIENT_SECRET": rest_secret(layout)}
    return layout.rest_port, rest_catalog.command(rest_server(layout)), credentials, "icegroup's server, warehouse lake"


def forget_s3_catalogs(layout: Layout, postgres: LocalPostgres) -> None:
    """Empty the fixture's and Nessie's catalogs: their tables' files were in an S3 server that just started empty.

    The S3 server (moto) keeps its objects in memory, so a new one has none; a catalog still naming
    them would serve tables whose metadata is gone.
    """
    if "fixture" in postgres.databases():
        postgres.drop_database("fixture")
    shutil.rmtree(layout.folder / "nessie", ignore_errors=True)
    postgres.ensure_database("fixture")
