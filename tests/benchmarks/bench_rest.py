"""What the REST catalog costs: ``icegroup consume`` on a SQL catalog and on a REST catalog, side by side.

One PostgreSQL cluster (``infra/postgres.py``, a throw-away one) holds two catalog databases
that get the same data (``workloads.py``, same seed):

- ``sql``: the SQL catalog, reached directly by both engines (pyiceberg's ``SqlCatalog``, Spark's
  ``JdbcCatalog``), heartbeats in its own database;
- ``rest``: the same PostgreSQL behind icegroup's local REST server (``infra/rest_catalog/``,
  Iceberg's reference handlers), reached with OAuth2 client credentials by both engines, fences
  raised by fence commits, heartbeats in a database of their own.

Each round runs both arms, in alternating order (A B, B A, ...), each ``icegroup consume GROUP
--until-caught-up`` a process timed from start to exit, into a sink of its own; every sink is
checked equal to its source, key by key. Both arms cut the same shards (same data, same caps), so
the ratio of the medians is the ratio per shard. Two variants: ``few_shards`` (the default caps:
one shard per stream) and ``many_shards`` (one file per shard, so catalog round trips weigh the
most). Run: ``python -m tests.benchmarks.bench_rest`` (writes
tests/benchmarks/results/rest_catalog.json).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import tempfile
from pathlib import Path

import yaml
from pyiceberg.table import Table

from icegroup.iceberg.config.lakehouse import load_lakehouse
from icegroup.iceberg.config.rest import ENV_CREDENTIAL
from icegroup.iceberg.protocol.group import GroupConfig
from icegroup.iceberg.protocol.sink_commit import KEY_SHARD_IDS
from icegroup.infra.postgres import start_local_postgres
from icegroup.infra.rest_catalog import RestServer, start, stop, wait_ready
from tests.benchmarks.measure import ICEGROUP, check_same_rows, run_timed
from tests.benchmarks.workloads import Workload, fill
from tests.factories import create_source, write_groups

ROUNDS = 4
ARMS = ("sql", "rest")
# Default caps cut a stream's backlog into one shard; one file a shard makes a commit-heavy consume.
VARIANTS: dict[str, dict[str, int]] = {"few_shards": {}, "many_shards": {"max_files": 1}}
WORKLOAD = Workload("W3", snapshots=60, rows_per_snapshot=2_000)
SOURCE = "bench.events"
TRANSFORM = "icegroup.spark_jobs.transforms:enrich_events"
CLIENT = {"client_id": "bench", "client_secret": "bench-secret-not-for-production"}
RESULTS = Path(__file__).parent / "results" / "rest_catalog.json"


def free_port() -> int:
    """A port nobody listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def committed_shards(sink: Table) -> int:
    """How many shards the sink's commits carry (``icegroup.shard-ids``, comma-separated)."""
    return sum(
        len(snapshot.summary[KEY_SHARD_IDS].split(","))
        for snapshot in sink.snapshots()
        if snapshot.summary is not None and KEY_SHARD_IDS in snapshot.summary.additional_properties
    )


def lakehouse_files(folder: Path, pg_url: str, rest_url: str) -> dict[str, Path]:
    """Each arm's lakehouse config, on the same PostgreSQL cluster and Spark ``local[*]``."""
    configs = {
        "sql": {"catalog_uri": f"{pg_url}/sqlcat", "warehouse": str(folder / "sql-warehouse")},
        "rest": {"rest": {"uri": rest_url, "warehouse": "bench"}, "heartbeats_uri": f"{pg_url}/heartbeats"},
    }
    paths = {}
    for arm, config in configs.items():
        paths[arm] = folder / f"{arm}.yaml"
        paths[arm].write_text(yaml.safe_dump(config))
    return paths


def run(rounds: int, folder: Path, caps: dict[str, int]) -> dict[str, object]:
    """Fill both catalogs, then time the arms round by round under shard ``caps``; the seconds and shard count."""
    postgres = start_local_postgres()
    server = None
    try:
        for database in ("sqlcat", "restcat", "heartbeats"):
            postgres.create_database(database)
        settings = RestServer(
            jdbc_url=f"jdbc:postgresql://127.0.0.1:{postgres.port}/restcat",
            jdbc_user="postgres",
            warehouse=str(folder / "rest-warehouse"),
            port=free_port(),
        )
        server = start(settings, folder / "rest.log", CLIENT)
        wait_ready(settings.url, 60, server, folder / "rest.log")
        pg_url = postgres.url("").rstrip("/")
        files = lakehouse_files(folder, pg_url, settings.url)
        groups = write_groups(
            folder / "groups.yaml",
            *[
                GroupConfig(
                    name=f"{arm}_{i}", source=SOURCE, sink=f"bench.{arm}_{i}", transform=TRANSFORM, shard_caps=caps
                )
                for i in range(rounds)
                for arm in ARMS
            ],
        )
        # Secrets come only from the environment, this process's included (it fills both catalogs).
        os.environ[ENV_CREDENTIAL] = f"{CLIENT['client_id']}:{CLIENT['client_secret']}"
        base = {k: v for k, v in os.environ.items() if not k.startswith("ICEGROUP_")}
        envs = {
            arm: {
                **base,
                "ICEGROUP_HOME": str(folder),
                "ICEGROUP_LAKEHOUSE": str(path),
                "ICEGROUP_GROUPS": str(groups),
                ENV_CREDENTIAL: os.environ[ENV_CREDENTIAL],
            }
            for arm, path in files.items()
        }
        catalogs = {arm: load_lakehouse(env=env).catalog() for arm, env in envs.items()}
        for catalog in catalogs.values():
            fill(create_source(catalog, SOURCE), WORKLOAD)
        print(f"{WORKLOAD.snapshots} snapshots of {WORKLOAD.rows_per_snapshot} rows in both catalogs", flush=True)
        seconds: dict[str, list[float]] = {arm: [] for arm in ARMS}
        shards: dict[str, int] = {}
        for index in range(rounds):
            for arm in ARMS if index % 2 == 0 else tuple(reversed(ARMS)):
                name = f"{arm}_{index}"
                command = [ICEGROUP, "consume", name, "--until-caught-up"]
                elapsed = run_timed(command, envs[arm], folder / f"{name}.log")
                check_same_rows(catalogs[arm], SOURCE, f"bench.{name}")
                shards[arm] = committed_shards(catalogs[arm].load_table(f"bench.{name}"))
                seconds[arm].append(round(elapsed, 2))
                print(f"round {index + 1}/{rounds}: {arm} {elapsed:.1f}s, {shards[arm]} shards, verified", flush=True)
        return {"seconds": seconds, "shards": shards}
    finally:
        if server is not None:
            stop(server)
        postgres.stop()


def main() -> None:
    """Run the arms and record medians and the REST/SQL ratio."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="rounds per arm (default %(default)s)")
    args = parser.parse_args()
    result: dict[str, object] = {
        "cores": os.cpu_count(),
        "rounds": args.rounds,
        "workload": {"snapshots": WORKLOAD.snapshots, "rows_per_snapshot": WORKLOAD.rows_per_snapshot},
        "transform": TRANSFORM,
        "python": sys.version.split()[0],
    }
    for variant, caps in VARIANTS.items():
        with tempfile.TemporaryDirectory(prefix="icegroup-bench-rest-", ignore_cleanup_errors=True) as tmp:
            measured = run(args.rounds, Path(tmp), caps)
        seconds: dict[str, list[float]] = measured["seconds"]  # type: ignore[assignment]
        shards: dict[str, int] = measured["shards"]  # type: ignore[assignment]
        medians = {arm: round(statistics.median(values), 2) for arm, values in seconds.items()}
        result[variant] = {
            "shard_caps": caps,
            "seconds": seconds,
            "median_s": medians,
            "shards": shards,
            "median_s_per_shard": {arm: round(medians[arm] / max(1, shards[arm]), 3) for arm in ARMS},
            "rest_over_sql": round(medians["rest"] / medians["sql"], 3),
        }
        RESULTS.write_text(json.dumps(result, indent=2) + "\n")
        print(f"{variant}: REST / SQL per shard {result[variant]['rest_over_sql']}x (medians {medians})", flush=True)


if __name__ == "__main__":
    main()
