"""The stack's layout and the files it writes: ports, worker sizes, and the configs that select it.

Pure apart from ``write_files``: the product's lakehouse config, Dagster's instance config and the
``env`` file for a stack in one folder, so tests can check them without starting anything.
"""

from __future__ import annotations

import os
import secrets
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

from icegroup.iceberg.config.rest import ENV_CREDENTIAL

BUCKET = "icegroup"
REST_WAREHOUSE = "lake"
REST_CLIENT_ID = "icegroup-stack"
# The REST catalog servers the stack can run (`make stack-up CATALOG=...`): icegroup's own small server
# (the default: it checks a client credential), Iceberg's REST test fixture, and Project Nessie.
CATALOGS = ("icegroup", "fixture", "nessie")
ENV_STACK_CATALOG = "ICEGROUP_STACK_CATALOG"
# Dummy keys for the local S3 server, which accepts any; .stack/env exports them. Real keys never go in a file.
S3_KEYS = {"AWS_ACCESS_KEY_ID": "icegroup-stack", "AWS_SECRET_ACCESS_KEY": "icegroup-stack", "AWS_REGION": "us-east-1"}


@dataclass(frozen=True)
class Layout:
    """Where the stack listens and how big its workers are.

    The workers advertise 4 cores and 3g each on a 2-core machine: oversubscribed on purpose, so that
    the tests' Spark application, several Borrowers and the chaos workers (1 core each) are all
    scheduled at once. They are Spark's scheduling limits, not a measure of the hardware.
    """

    folder: Path
    catalog: str = "icegroup"
    postgres_port: int = 55432
    master_port: int = 17077
    master_ui_port: int = 18080
    worker_ui_ports: tuple[int, ...] = (18081, 18082)
    worker_cores: int = 4
    worker_memory: str = "3g"
    webserver_port: int = 13000
    s3_port: int = 19000
    rest_port: int = 18181
    nessie_port: int = 19120
    nessie_management_port: int = 19121
    # One Borrower's application: 1 core and a small executor, so a handful of Borrowers share the workers.
    app_cores: int = 1
    executor_memory: str = "768m"

    @property
    def master_url(self) -> str:
        """The Spark master, as ``spark_master`` takes it."""
        return f"spark://127.0.0.1:{self.master_port}"

    def __post_init__(self) -> None:
        """Refuse a catalog server the stack cannot run, naming the ones it can."""
        if self.catalog not in CATALOGS:
            raise ValueError(f"CATALOG={self.catalog!r} is not a server the stack runs; use {', '.join(CATALOGS)}")

    @property
    def rest_url(self) -> str:
        """The stack's Iceberg REST catalog, as ``rest.uri`` takes it."""
        if self.catalog == "nessie":
            return f"http://127.0.0.1:{self.nessie_port}/iceberg"
        return f"http://127.0.0.1:{self.rest_port}"

    @property
    def rest_warehouse(self) -> str | None:
        """The warehouse clients name, if any.

        icegroup's server makes a catalog per name, Nessie has one named ``warehouse``, and the
        fixture serves a single catalog and ignores the name.
        """
        return {"icegroup": REST_WAREHOUSE, "nessie": "warehouse"}.get(self.catalog)

    @property
    def s3_warehouse(self) -> str:
        """Where the fixture's and Nessie's tables live: the stack's bucket (Nessie takes no local folder)."""
        return f"s3://{BUCKET}/{self.catalog}"

    @property
    def s3_endpoint(self) -> str:
        """The S3-compatible server's endpoint."""
        return f"http://127.0.0.1:{self.s3_port}"

    def catalog_uri(self, database: str = "lake") -> str:
        """A database of the stack's PostgreSQL as ``catalog_uri``."""
        return f"postgresql+psycopg2://postgres@127.0.0.1:{self.postgres_port}/{database}"


def repo_root() -> Path:
    """The checkout: workspace.yaml, the groups file and the built jars are found from here."""
    return Path(__file__).resolve().parents[1]


def lakehouse_config(layout: Layout) -> dict[str, object]:
    """The product's lakehouse config for this stack: the only thing that differs from the embedded default.

    The catalog is the stack's REST catalog, as production lakes are reached; heartbeats are kept in
    the Dagster instance's database, which every Leader and Borrower of the stack reaches already.
    On icegroup's server the warehouse is ``lake`` (a folder of the stack's) and the credential is in
    ``env``, never in this file; on the fixture and Nessie the tables are in S3, reached with the
    keys in ``env``.
    """
    rest = {"uri": layout.rest_url, **({"warehouse": layout.rest_warehouse} if layout.rest_warehouse else {})}
    s3 = {} if layout.catalog == "icegroup" else {"s3": s3_settings(layout)}
    return {"rest": rest, **s3, "heartbeats_uri": layout.catalog_uri("dagster"), **spark_config(layout)}


def s3_settings(layout: Layout) -> dict[str, object]:
    """The stack's S3 server, as the lakehouse's ``s3`` takes it."""
    return {"endpoint": layout.s3_endpoint, "region": S3_KEYS["AWS_REGION"], "path_style_access": True}


def spark_config(layout: Layout) -> dict[str, object]:
    """How Borrowers reach the stack's Spark cluster, whichever catalog they use.

    No ``jars``: the driver resolves the same coordinates as on one machine, and the workers fetch
    the jars from it.
    """
    return {
        "spark_master": layout.master_url,
        "spark": {
            "cores_max": layout.app_cores,
            "executor_cores": layout.app_cores,
            "executor_memory": layout.executor_memory,
            "python": sys.executable,
        },
    }


def s3_lakehouse_config(layout: Layout) -> dict[str, object]:
    """A SQL catalog in the stack's PostgreSQL, its warehouse in the S3 bucket (pyiceberg's side; infra/README.md)."""
    return {
        "catalog_name": "s3lake",
        "catalog_uri": layout.catalog_uri(),
        "warehouse": f"s3://{BUCKET}/warehouse",
        "s3": s3_settings(layout),
        **spark_config(layout),
    }


def rest_secret(layout: Layout) -> str:
    """The REST catalog's client secret: made on first use and kept in ``rest-secret`` (only the owner reads it).

    Kept, so that a server restarted by ``stack-up`` and every client that sourced ``env`` agree.
    """
    path = layout.folder / "rest-secret"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch(mode=0o600)
        path.write_text(secrets.token_urlsafe(24))
    return path.read_text().strip()


def dagster_config(layout: Layout) -> dict[str, object]:
    """Dagster's instance on the stack's PostgreSQL, with the queued run coordinator the daemon drives."""
    return {
        "storage": {
            "postgres": {
                "postgres_db": {
                    "hostname": "127.0.0.1",
                    "port": layout.postgres_port,
                    "username": "postgres",
                    "password": "",
                    "db_name": "dagster",
                    # SQLAlchemy 2.1 maps plain postgresql:// to psycopg 3; dagster-postgres installs psycopg2.
                    "scheme": "postgresql+psycopg2",
                }
            }
        },
        "run_coordinator": {
            "module": "dagster.core.run_coordinator",
            "class": "QueuedRunCoordinator",
            "config": {"max_concurrent_runs": 8, "dequeue_interval_seconds": 1},
        },
        "run_monitoring": {"enabled": True, "start_timeout_seconds": 180, "poll_interval_seconds": 30},
        "telemetry": {"enabled": False},
    }


def stack_env(layout: Layout) -> dict[str, str]:
    """The variables that point icegroup, Dagster and boto3 at this stack, the REST catalog's credential included."""
    env = {
        "ICEGROUP_LAKEHOUSE": str(layout.folder / "lakehouse.yaml"),
        "DAGSTER_HOME": str(layout.folder / "dagster"),
        ENV_STACK_CATALOG: layout.catalog,
        **S3_KEYS,
    }
    if layout.catalog == "icegroup":
        env[ENV_CREDENTIAL] = f"{REST_CLIENT_ID}:{rest_secret(layout)}"
    return env


def write_files(layout: Layout) -> None:
    """The stack's configs and its ``env`` file; rewritten on every ``up``, so they match the layout."""
    folder = layout.folder
    (folder / "dagster").mkdir(parents=True, exist_ok=True)
    (folder / "warehouse").mkdir(exist_ok=True)
    (folder / "logs").mkdir(exist_ok=True)
    (folder / "lakehouse.yaml").write_text(yaml.safe_dump(lakehouse_config(layout), sort_keys=False))
    (folder / "lakehouse-s3.yaml").write_text(yaml.safe_dump(s3_lakehouse_config(layout), sort_keys=False))
    (folder / "dagster" / "dagster.yaml").write_text(yaml.safe_dump(dagster_config(layout), sort_keys=False))
    lines = [f"export {key}={value}" for key, value in stack_env(layout).items()]
    (folder / "env").touch(mode=0o600)
    (folder / "env").write_text(
        "# source this file to use the stack: icegroup, dagster and boto3 pick it up\n" + "\n".join(lines) + "\n"
    )


def default_layout(catalog: str | None = None) -> Layout:
    """The layout in ``ICEGROUP_STACK_DIR`` (else ``.stack/``), on ``catalog`` (else ``ICEGROUP_STACK_CATALOG``)."""
    folder = Path(os.environ.get("ICEGROUP_STACK_DIR") or repo_root() / ".stack").resolve()
    return Layout(folder=folder, catalog=catalog or os.environ.get(ENV_STACK_CATALOG) or "icegroup")
